import sys

from tasks.detection.mmdet import exit_if_missing

exit_if_missing()
from tasks.detection.mmdet.grid import main  # noqa: E402  (after the check: it imports mmdet)

sys.exit(main())
