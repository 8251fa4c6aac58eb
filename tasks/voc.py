"""`python -m tasks.voc`: the detection task's command under the task's own name (tasks/detection/command.py)."""

import sys

from tasks.detection.command import main

if __name__ == "__main__":
    sys.exit(main())
