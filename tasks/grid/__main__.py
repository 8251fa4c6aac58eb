"""`python -m tasks.grid status ...`: the grid tools that are not a task (see tasks.grid.status)."""

import sys

from tasks.grid import status

COMMANDS = {"status": status.main}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(f"usage: python -m tasks.grid {{{','.join(COMMANDS)}}} ...", file=sys.stderr)
        sys.exit(2)
    sys.exit(COMMANDS[sys.argv[1]](sys.argv[2:]))
