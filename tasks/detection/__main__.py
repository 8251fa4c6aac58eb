import sys

from tasks.voc import main

sys.exit(main())
