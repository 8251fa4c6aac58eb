"""`python -m tasks.grid status|tasks ...`: the grid tools that are not a task (tasks.grid.status,
tasks.grid.task_list)."""

import sys

from tasks.grid import status, task_list

COMMANDS = {"status": status.main, "tasks": task_list.main}
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
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
