import sys

from tasks.deploy.runtimes import main

sys.exit(main())
