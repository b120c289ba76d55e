"""`controller-svc topics create|list|describe`."""

from __future__ import annotations

import argparse
import sys

import uvloop

from controller_svc.adapters.admin_errors import AdminError
from controller_svc.cli.target import add_target_args, client_of
from controller_svc.common.errors import ErrorCode
from kcontroller.v1 import controller_pb2


def parse_replica_assignment(text: str) -> list[controller_pb2.ReplicaAssignment]:
    """kafka-topics' format: partitions separated by ',', replicas by ':' (e.g. 1:2,2:3)."""
    result = []
    for partition, part in enumerate(text.split(",")):
        try:
            replicas = [int(r) for r in part.split(":")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad replica list {part!r} in --replica-assignment") from None
        result.append(controller_pb2.ReplicaAssignment(partition=partition, replicas=replicas))
    return result


def register(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    topics = sub.add_parser("topics", help="create, list, describe and delete topics")
    topics_sub = topics.add_subparsers(dest="topics_command", required=True)
    create = topics_sub.add_parser("create", help="create a topic (CreateTopics RPC)")
    add_target_args(create)
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=-1)
    create.add_argument("--replication-factor", type=int, default=-1)
    create.add_argument(
        "--replica-assignment",
        type=parse_replica_assignment,
        help="explicit assignment, e.g. 1:2,2:3 (instead of partitions and replication factor)",
    )
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="topic config")
    create.add_argument("--validate-only", action="store_true")
    listing = topics_sub.add_parser("list", help="list topics")
    add_target_args(listing)
    describe = topics_sub.add_parser("describe", help="partitions, leaders and ISRs")
    add_target_args(describe)
    describe.add_argument("--topic", action="append", default=[])
    describe.add_argument("--offline-only", action="store_true", help="only partitions without a leader")
    describe.add_argument("--under-replicated-only", action="store_true", help="only partitions with ISR < replicas")
    return topics_sub  # type: ignore[no-any-return]


def run(args: argparse.Namespace) -> int:
    try:
        return uvloop.run(_run(args))
    except AdminError as e:
        print(f"controller-svc topics {args.topics_command}: {e}", file=sys.stderr)
        return 1


async def _run(args: argparse.Namespace) -> int:
    client = client_of(args)
    if args.topics_command == "create":
        configs = {}
        for item in args.config:
            key, eq, value = item.partition("=")
            if not eq:
                print(f"--config {item!r}: expected KEY=VALUE", file=sys.stderr)
                return 2
            configs[key] = value
        if args.replica_assignment is None and (args.partitions <= 0 or args.replication_factor <= 0):
            print("give --partitions and --replication-factor, or --replica-assignment", file=sys.stderr)
            return 2
        topic = controller_pb2.CreatableTopic(
            name=args.topic,
            num_partitions=args.partitions,
            replication_factor=args.replication_factor,
            assignments=args.replica_assignment or [],
            configs=configs,
        )
        response = await client.create_topics(
            controller_pb2.CreateTopicsRequest(topics=[topic], validate_only=args.validate_only)
        )
        if response.error_code:
            print(f"error {ErrorCode.name_of(response.error_code)}: {response.error_message}", file=sys.stderr)
            return 1
        failed = 0
        for result in response.topics:
            if result.error_code:
                failed += 1
                print(f"{result.name}: {ErrorCode.name_of(result.error_code)}: {result.error_message}", file=sys.stderr)
            else:
                verb = "would be created" if args.validate_only else "created"
                print(f"{result.name} {verb} with {len(result.assignments)} partitions (topic id {result.topic_id})")
        return 1 if failed else 0
    description = await client.describe_cluster(
        include_partitions=args.topics_command == "describe", topics=getattr(args, "topic", []) or []
    )
    if args.topics_command == "list":
        for name in sorted(description.topic_ids) or []:
            print(name)
        return 0
    live = {b.id for b in description.live_brokers}
    print(
        f"controller {description.active_controller.id} epoch {description.controller_epoch}; "
        f"{description.topic_count} topics, {description.partition_count} partitions, "
        f"{description.offline_partition_count} offline"
    )
    for p in description.partitions:
        under = len(p.isr) < len(p.replicas)
        if args.offline_only and p.leader >= 0:
            continue
        if args.under_replicated_only and not under:
            continue
        offline = [r for r in p.replicas if r not in live]
        print(
            f"Topic: {p.topic}\tPartition: {p.partition}\tLeader: {p.leader if p.leader >= 0 else 'none'}\t"
            f"LeaderEpoch: {p.leader_epoch}\tReplicas: {','.join(map(str, p.replicas))}\t"
            f"Isr: {','.join(map(str, p.isr))}" + (f"\tOffline: {','.join(map(str, offline))}" if offline else "")
        )
    return 0
