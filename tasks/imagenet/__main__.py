import sys

from tasks.grid.cli import main
from tasks.grid.help import run_command

sys.exit(run_command(lambda: main("imagenet")))
