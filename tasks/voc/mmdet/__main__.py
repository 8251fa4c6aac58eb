import sys

from tasks.voc.mmdet import exit_if_missing

exit_if_missing()
from tasks.grid.cli import main  # noqa: E402  (after the check: the task imports mmdet)

sys.exit(main("coco"))
