import sys

from tasks.detection.grid import main

sys.exit(main())
