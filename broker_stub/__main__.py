import sys

from broker_stub.cli import main

sys.exit(main())
