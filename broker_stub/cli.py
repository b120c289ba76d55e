"""`broker-stub`: run one broker stub process."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from broker_stub.app import run_broker
from controller_svc.common import config as cfg
from controller_svc.common.process import add_config_args, run_process


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="broker-stub",
        description="A control-plane Kafka broker: registers in ZooKeeper, fences and applies controller requests",
    )
    add_config_args(parser, cfg.BROKER_KEYS)
    args = parser.parse_args(argv)
    return run_process("broker", args, run_broker)


if __name__ == "__main__":
    sys.exit(main())
