"""`controller-svc`: run a controller, manage a local cluster, run the demo."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from controller_svc import config as cfg


def _add_config_args(parser: argparse.ArgumentParser, keys: tuple[cfg.Key, ...]) -> None:
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


def run_process(kind: str, args: argparse.Namespace) -> int:
    import uvloop

    from controller_svc import logging_setup

    keys = cfg.CONTROLLER_KEYS if kind == "controller" else cfg.BROKER_KEYS
    try:
        config = load_config(args, keys)
    except cfg.ConfigError as e:
        print(f"{kind}: bad configuration: {e}", file=sys.stderr)
        return 2
    from controller_svc import tls
    from controller_svc.zk.client import digest_auth_from_config

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
    if kind == "controller":
        from controller_svc.app import run_controller as runner
    else:
        from broker_stub.app import run_broker as runner
    try:
        return uvloop.run(runner(config))
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        import logging

        logging.getLogger(kind).exception("%s %d failed: %s", kind, node_id, e)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="controller-svc", description="Kafka ZooKeeper-mode controller, re-implemented on asyncio"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    controller = sub.add_parser("controller", help="run one controller process")
    _add_config_args(controller, cfg.CONTROLLER_KEYS)

    cluster = sub.add_parser("cluster", help="a local cluster of background processes")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True)
    up = cluster_sub.add_parser("up", help="start ZooKeeper, controllers and brokers; write DIR/cluster.json")
    up.add_argument("--controllers", type=int, default=3)
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--dir", required=True)
    up.add_argument("--zookeeper", help="use this ZooKeeper (host:port[/chroot]) instead of starting one")
    up.add_argument(
        "--session-timeout-ms",
        type=int,
        default=6000,
        help="zookeeper.session.timeout.ms of every node (default 6000 for a local cluster)",
    )
    up.add_argument("--controller-override", action="append", default=[], metavar="KEY=VALUE")
    up.add_argument("--broker-override", action="append", default=[], metavar="KEY=VALUE")
    down = cluster_sub.add_parser("down", help="stop everything `up` started")
    down.add_argument("--dir", required=True)
    down.add_argument("--grace-s", type=float, default=15.0, help="SIGKILL after this many seconds")
    status = cluster_sub.add_parser("status", help="who is controller, the epoch, the brokers")
    status.add_argument("--dir", required=True)

    demo = sub.add_parser(
        "demo",
        help="start a cluster, kill its controller and a broker, show the takeovers, analyse the logs on Spark",
    )
    demo.add_argument("--dir", default=None, help="cluster directory (default: a new temporary one)")
    demo.add_argument("--session-timeout-ms", type=int, default=6000)
    demo.add_argument("--no-analysis", action="store_true", help="skip the Spark analysis at the end")

    from controller_svc import cli_admin, cli_topics
    from controller_svc.analytics import cli as cli_analyze

    topics_sub = cli_topics.register(sub)
    cli_admin.register(sub, topics_sub)
    cli_analyze.register(sub)

    describe = sub.add_parser(
        "describe", help="the cluster as a table: controller, epoch, brokers, offline and under-replicated partitions"
    )
    cli_topics.add_target_args(describe)

    health = sub.add_parser("health", help="gRPC health check of a controller or broker (exit 0 when SERVING)")
    health.add_argument(
        "--address",
        default=os.environ.get("KCONTROLLER_HEALTH_ADDRESS", "127.0.0.1:9190"),
        help="host:port (default: $KCONTROLLER_HEALTH_ADDRESS or 127.0.0.1:9190)",
    )
    health.add_argument("--timeout-s", type=float, default=3.0)

    args = parser.parse_args(argv)
    if args.command == "topics":
        return cli_topics.run(args)
    if args.command in ("reassign", "elect-leaders"):
        return cli_admin.run(args)
    if args.command == "describe":
        return describe_cluster(args)
    if args.command == "analyze":
        return cli_analyze.run(args)
    if args.command == "health":
        return check_health(args.address, args.timeout_s)
    if args.command == "controller":
        return run_process("controller", args)
    if args.command == "cluster":
        return run_cluster(args, parser)
    if args.command == "demo":
        from controller_svc.demo import run_demo

        return run_demo(args.dir, args.session_timeout_ms, analyse_logs=not args.no_analysis)
    parser.error(f"unknown command {args.command}")
    return 2


def describe_cluster(args: argparse.Namespace) -> int:
    import uvloop

    from controller_svc.admin_client import AdminError
    from controller_svc.cli_topics import client_of
    from controller_svc.cluster_table import format_cluster

    try:
        description = uvloop.run(client_of(args).describe_cluster(include_partitions=True))
    except AdminError as e:
        print(f"describe: {e}", file=sys.stderr)
        return 1
    print(format_cluster(description))
    return 0


def check_health(address: str, timeout_s: float) -> int:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from controller_svc import tls

    with tls.channel(address, tls.from_env()) as channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
        except grpc.RpcError as e:
            print(f"{address}: {e.code().name}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    print(f"{address}: {status}")
    return 0 if response.status == health_pb2.HealthCheckResponse.SERVING else 1


def run_cluster(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from controller_svc import devcluster
    from controller_svc.zookeeper_launcher import ZooKeeperLaunchError

    try:
        if args.cluster_command == "up":
            if args.controllers < 1 or args.brokers < 0:
                parser.error("--controllers must be >= 1 and --brokers >= 0")
            spec = devcluster.up(
                args.dir,
                args.controllers,
                args.brokers,
                args.zookeeper,
                args.session_timeout_ms,
                cfg.parse_overrides(args.controller_override),
                cfg.parse_overrides(args.broker_override),
            )
            print(devcluster.status(args.dir))
            print(f"\nwrote {args.dir}/cluster.json; logs in {spec['logs']}")
        elif args.cluster_command == "down":
            devcluster.down(args.dir, args.grace_s)
            print(f"cluster in {args.dir} stopped")
        else:
            print(devcluster.status(args.dir))
    except (devcluster.ClusterError, ZooKeeperLaunchError, cfg.ConfigError) as e:
        print(f"controller-svc cluster {args.cluster_command}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
