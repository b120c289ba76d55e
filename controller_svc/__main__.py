import sys

from controller_svc.cli import main

sys.exit(main())
