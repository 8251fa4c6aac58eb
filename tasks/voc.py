"""`python -m tasks.voc`: the detection task on a VOC-layout folder (the same as `python -m tasks.detection`)."""

import sys

from tasks.detection.grid import main

if __name__ == "__main__":
    sys.exit(main())
