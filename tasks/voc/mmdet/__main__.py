import sys

from tasks.voc.mmdet import exit_if_missing

exit_if_missing()
from tasks.voc.mmdet.grid import main  # noqa: E402  (after the check: it imports mmdet)

sys.exit(main())
