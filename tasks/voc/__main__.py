import sys

from tasks.voc.command import main

sys.exit(main())
