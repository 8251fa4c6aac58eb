import sys

from tasks.deploy.driver import main
from tasks.grid.help import run_command

sys.exit(run_command(main))
