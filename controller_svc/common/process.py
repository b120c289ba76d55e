"""What every process's entry point shares: configuration flags, loading and checking the
configuration, logging set-up, and running the process on uvloop."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

from controller_svc.common import config as cfg


def add_config_args(parser: argparse.ArgumentParser, keys: tuple[cfg.Key, ...]) -> None:
    parser.add_argument("--config", metavar="FILE", help="properties file with the keys below")
    parser.add_argument(
        "--override",
        action="append",
        metavar="KEY=VALUE",
        default=[],
        help="set one config key (repeatable); wins over the file and KCONTROLLER_* environment variables",
    )
    parser.add_argument(
        "--check-config",
        action="store_true",
        help="validate the configuration (defaults, file, environment, flags), print it and exit: 0 valid, 2 not",
    )
    parser.epilog = "config keys:\n" + cfg.describe(keys)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def load_config(args: argparse.Namespace, keys: tuple[cfg.Key, ...]) -> cfg.Config:
    return cfg.load(keys, args.config, cfg.parse_overrides(args.override))


def run_process(kind: str, args: argparse.Namespace, runner: Callable[[cfg.Config], Coroutine[Any, Any, int]]) -> int:
    """Load and check the configuration, set up logging, run `runner` on uvloop: the part of
    `controller-svc controller` and `broker-stub` that is the same for both processes."""
    import uvloop

    from controller_svc.common import logging_setup

    keys = cfg.CONTROLLER_KEYS if kind == "controller" else cfg.BROKER_KEYS
    try:
        config = load_config(args, keys)
    except cfg.ConfigError as e:
        print(f"{kind}: bad configuration: {e}", file=sys.stderr)
        return 2
    from controller_svc.common import tls
    from controller_svc.common.zk_settings import digest_auth_from_config

    try:
        tls.load(config.values)
        digest_auth_from_config(config.values)
    except (tls.TlsConfigError, ValueError) as e:
        print(f"{kind}: bad configuration: {e}", file=sys.stderr)
        return 2
    if getattr(args, "check_config", False):
        print(f"{kind}: configuration OK")
        for key in keys:
            print(f"  {key.name}={'<redacted>' if key.secret and config[key.name] else config[key.name]}")
        return 0
    node_id = config.int("controller.id" if kind == "controller" else "broker.id")
    logging_setup.setup(f"{kind}-{node_id}", config.str("log.level"), config.str("log.format"))

    async def run_then_exit() -> NoReturn:
        # Ended from the loop itself once the runner has closed what it owned: the loop's own
        # teardown (cancelling what is left, joining the default executor's threads, gRPC's
        # poller) has nothing to show either, and took 5-20 ms of a broker's exit after its
        # controlled shutdown, on cores the cluster was busy with.
        exit_now(await runner(config))

    try:
        uvloop.run(run_then_exit())
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        import logging

        logging.getLogger(kind).exception("%s %d failed: %s", kind, node_id, e)
        return 1


def exit_now(code: int) -> NoReturn:
    """End the process once its runner has returned: everything it owned (ZooKeeper session,
    gRPC server, state-change log) is closed by then, and only the interpreter's finalization
    is left, which frees every object one by one and joins gRPC's threads, work that grows
    with the partitions held and has nothing to show for it. Logs and standard streams are
    flushed first."""
    import logging
    import os

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
