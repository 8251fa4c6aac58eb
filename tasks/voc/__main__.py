import sys

from tasks.grid.help import run_command
from tasks.voc import main

sys.exit(run_command(main))
