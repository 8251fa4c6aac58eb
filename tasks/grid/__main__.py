"""`python -m tasks.grid status|tasks ...`: the grid tools that are not a task (tasks.grid.status,
tasks.grid.rerun)."""

import importlib
import sys

COMMANDS = {"status": "tasks.grid.status", "tasks": "tasks.grid.rerun"}  # imported when run: --help needs neither
USAGE = f"usage: python -m tasks.grid {{{','.join(COMMANDS)}}} ...  (python -m tasks.grid status --help for more)"

if __name__ == "__main__":
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(USAGE)
        print("  status  where each cell submitted with --launcher submitit stands (done, running, failed, missing)")
        print("  tasks   every task: its command, datasets, models, metrics and profiles")
        sys.exit(0)
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    sys.exit(importlib.import_module(COMMANDS[sys.argv[1]]).main(sys.argv[2:]))
