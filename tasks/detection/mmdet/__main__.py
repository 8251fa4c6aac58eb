import sys

from tasks.detection.mmdet.grid import main

sys.exit(main())
