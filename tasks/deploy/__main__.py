import sys

from tasks.deploy.driver import main

sys.exit(main())
