"""What a `controller-svc` command loads before it does anything: every command registers every
parser, so the admin commands' parsers must not bring in the clients they use."""

from __future__ import annotations

import json
import subprocess
import sys


def test_registering_the_commands_loads_no_client() -> None:
    """`analyze --service` (a new process per request) started 0.2 s slower when registering
    the admin parsers imported the admin client, and with it the ZooKeeper client."""
    probe = (
        "import json, sys\n"
        "from controller_svc.cli import main\n"
        "try:\n"
        "    main.main(['analyze', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert "controller_svc.cli.admin" in loaded  # the parsers were registered
    assert "controller_svc.adapters.admin_errors" in loaded
    assert not {"controller_svc.adapters.admin_client", "controller_svc.adapters.zk.client"} & loaded
    assert not {name for name in loaded if name == "pyspark" or name.startswith("pyspark.")}
