import sys

from tasks.grid.cli import main

sys.exit(main("coco"))  # the extra is checked once the arguments parse, before mmdet is imported
