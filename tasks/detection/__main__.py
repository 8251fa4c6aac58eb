import sys

from tasks.detection.command import main

sys.exit(main())
