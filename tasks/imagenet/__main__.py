import sys

from tasks.imagenet.grid import main

sys.exit(main())
