"""`controller-svc`: run a controller, manage a local cluster, run the demo."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from controller_svc.common import config as cfg
from controller_svc.common import process


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="controller-svc", description="Kafka ZooKeeper-mode controller, re-implemented on asyncio"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    controller = sub.add_parser("controller", help="run one controller process")
    process.add_config_args(controller, cfg.CONTROLLER_KEYS)

    cluster = sub.add_parser("cluster", help="a local cluster of background processes")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True)
    up = cluster_sub.add_parser("up", help="start ZooKeeper, controllers and brokers; write DIR/cluster.json")
    up.add_argument("--controllers", type=int, default=3)
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--dir", required=True)
    up.add_argument("--zookeeper", help="use this ZooKeeper (host:port[/chroot]) instead of starting one")
    up.add_argument(
        "--zookeeper-nodes",
        type=int,
        default=1,
        help="without --zookeeper: start a standalone ZooKeeper (1, the default) or an ensemble of this many",
    )
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
    down.add_argument(
        "--grace-s",
        type=float,
        default=15.0,
        help="SIGKILL what is left of each group (brokers, controllers, ZooKeeper) after this many seconds",
    )
    status = cluster_sub.add_parser("status", help="who is controller, the epoch, the brokers")
    status.add_argument("--dir", required=True)

    demo = sub.add_parser(
        "demo",
        help="start a cluster, kill its controller and a broker, show the takeovers, analyse the logs on Spark",
    )
    demo.add_argument("--dir", default=None, help="cluster directory (default: a new temporary one)")
    demo.add_argument("--session-timeout-ms", type=int, default=6000)
    demo.add_argument("--no-analysis", action="store_true", help="skip the Spark analysis at the end")
    demo.add_argument(
        "--containers",
        action="store_true",
        help="instead: build the images and run deploy/compose.yaml's cluster as containers (podman)",
    )
    demo.add_argument(
        "--base",
        choices=("local", "registry"),
        default="local",
        help="with --containers: base images made from Debian's packages (default) or pulled from a registry",
    )

    image = sub.add_parser("image", help="container images (podman)")
    image_sub = image.add_subparsers(dest="image_command", required=True)
    image_build = image_sub.add_parser(
        "build", help="build the node and ZooKeeper images of deploy/compose.yaml; print their variables"
    )
    image_build.add_argument(
        "--base",
        choices=("local", "registry"),
        default="local",
        help="local: bases made from Debian's packages, no network in the build (default); registry: python:3.11-slim",
    )

    chaos = sub.add_parser(
        "chaos",
        help="a seeded schedule of faults on a local cluster (3-node ZooKeeper), then convergence and analysis",
    )
    chaos.add_argument("--dir", required=True, help="cluster directory (must not hold a running cluster)")
    chaos.add_argument("--seed", type=int, default=1)
    chaos.add_argument("--duration-s", type=float, default=60.0, help="how long faults are injected")
    chaos.add_argument("--controllers", type=int, default=3)
    chaos.add_argument("--brokers", type=int, default=4)
    chaos.add_argument("--zookeeper-nodes", type=int, default=3)
    chaos.add_argument("--session-timeout-ms", type=int, default=6000)
    chaos.add_argument("--topics", type=int, default=4, help="topics created before the faults start")
    chaos.add_argument("--partitions", type=int, default=25, help="partitions of each of those topics")
    chaos.add_argument("--converge-timeout-s", type=float, default=180.0)
    chaos.add_argument("--no-analysis", action="store_true", help="skip the Spark analysis of the logs")
    chaos.add_argument("--out", help="also write the JSON summary to this file")

    from controller_svc.analytics import cli as cli_analyze
    from controller_svc.cli import admin as cli_admin
    from controller_svc.cli import topics as cli_topics
    from controller_svc.cli.target import add_target_args

    topics_sub = cli_topics.register(sub)
    cli_admin.register(sub, topics_sub)
    cli_analyze.register(sub)

    describe = sub.add_parser(
        "describe", help="the cluster as a table: controller, epoch, brokers, offline and under-replicated partitions"
    )
    add_target_args(describe)

    health = sub.add_parser("health", help="gRPC health check of a controller or broker (exit 0 when SERVING)")
    health.add_argument(
        "--address",
        default=os.environ.get("KCONTROLLER_HEALTH_ADDRESS", "127.0.0.1:9190"),
        help="host:port (default: $KCONTROLLER_HEALTH_ADDRESS or 127.0.0.1:9190)",
    )
    health.add_argument("--timeout-s", type=float, default=3.0)

    args = parser.parse_args(argv)
    if args.command == "topics" and args.topics_command == "delete":
        return cli_admin.run(args)
    if args.command == "topics":
        return cli_topics.run(args)
    if args.command in ("reassign", "elect-leaders"):
        return cli_admin.run(args)
    if args.command == "describe":
        return describe_cluster(args)
    if args.command == "analyze":
        return cli_analyze.run(args)
    if args.command == "analyze-service":
        return cli_analyze.run_service(args)
    if args.command == "health":
        return check_health(args.address, args.timeout_s)
    if args.command == "controller":
        from controller_svc.service.app import run_controller

        return process.run_process("controller", args, run_controller)
    if args.command == "cluster":
        return run_cluster(args, parser)
    if args.command == "chaos":
        return run_chaos_command(args, parser)
    if args.command == "image":
        return build_image_command(args.base)
    if args.command == "demo" and args.base != "local" and not args.containers:
        parser.error("--base chooses the containers' base images: it needs --containers")
    if args.command == "demo" and args.containers:
        from controller_svc.devtools.containers import run_container_demo

        return run_container_demo(args.base)
    if args.command == "demo":
        from controller_svc.devtools.demo import run_demo

        return run_demo(args.dir, args.session_timeout_ms, analyse_logs=not args.no_analysis)
    parser.error(f"unknown command {args.command}")
    return 2


def build_image_command(base: str) -> int:
    from controller_svc.devtools import containers

    missing = containers.missing_tools()
    if missing:
        print(f"error: {', '.join(missing)} not installed (`./dev setup` installs them)", file=sys.stderr)
        return 2
    env = containers.podman_env()
    try:
        images = containers.build_images(base, env)
    except containers.ContainerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for key, value in {"CONTAINERS_CONF": env["CONTAINERS_CONF"], **images.compose_env()}.items():
        print(f"{key}={value}")
    return 0


def run_chaos_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import json

    from controller_svc.devtools.chaos import ChaosSettings, run_chaos

    if args.duration_s <= 0 or args.controllers < 1 or args.brokers < 3 or args.zookeeper_nodes < 1:
        parser.error("chaos needs --duration-s > 0, --controllers >= 1, --brokers >= 3, --zookeeper-nodes >= 1")
    settings = ChaosSettings(
        directory=args.dir,
        seed=args.seed,
        duration_s=args.duration_s,
        controllers=args.controllers,
        brokers=args.brokers,
        zookeeper_nodes=args.zookeeper_nodes,
        session_timeout_ms=args.session_timeout_ms,
        topics=args.topics,
        partitions=args.partitions,
        converge_timeout_s=args.converge_timeout_s,
        analyse=not args.no_analysis,
    )
    from controller_svc.devtools.devcluster import ClusterError
    from controller_svc.devtools.zookeeper_launcher import ZooKeeperLaunchError

    try:
        summary = run_chaos(settings)
    except (ClusterError, ZooKeeperLaunchError) as e:
        print(f"controller-svc chaos: {e}", file=sys.stderr)
        return 2
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    if not summary["passed"]:
        print(f"chaos seed {args.seed} FAILED; replay: {summary.get('replay')}", file=sys.stderr)
    return 0 if summary["passed"] else 1


def describe_cluster(args: argparse.Namespace) -> int:
    import uvloop

    from controller_svc.adapters.admin_client import AdminError
    from controller_svc.cli.target import client_of
    from controller_svc.core.cluster_table import format_cluster

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

    from controller_svc.common import tls

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
    from controller_svc.devtools import devcluster
    from controller_svc.devtools.zookeeper_launcher import ZooKeeperLaunchError

    try:
        if args.cluster_command == "up":
            if args.controllers < 1 or args.brokers < 0 or args.zookeeper_nodes < 1:
                parser.error("--controllers and --zookeeper-nodes must be >= 1 and --brokers >= 0")
            spec = devcluster.up(
                args.dir,
                args.controllers,
                args.brokers,
                args.zookeeper,
                args.session_timeout_ms,
                cfg.parse_overrides(args.controller_override),
                cfg.parse_overrides(args.broker_override),
                zookeeper_nodes=args.zookeeper_nodes,
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
