import sys

from tasks.cifar.grid import main

sys.exit(main())
