import sys

from controller_svc.cli.main import main

sys.exit(main())
