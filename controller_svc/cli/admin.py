"""`controller-svc topics delete`, `reassign submit|list|cancel|verify`, `elect-leaders`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

import uvloop

from controller_svc.adapters.admin_errors import AdminError
from controller_svc.cli.target import add_target_args, client_of
from controller_svc.common.errors import ErrorCode


def register(sub: argparse._SubParsersAction, topics_sub: argparse._SubParsersAction | None) -> None:  # type: ignore[type-arg]
    if topics_sub is not None:
        delete = topics_sub.add_parser("delete", help="delete topics (DeleteTopics RPC)")
        add_target_args(delete)
        delete.add_argument("--topic", action="append", required=True)

    reassign = sub.add_parser("reassign", help="partition reassignment (KIP-455)")
    reassign_sub = reassign.add_subparsers(dest="reassign_command", required=True)
    submit = reassign_sub.add_parser("submit", help="start a reassignment from a plan file")
    add_target_args(submit)
    submit.add_argument(
        "--plan",
        required=True,
        help='JSON file in kafka-reassign-partitions format: {"version":1,"partitions":'
        '[{"topic":"t","partition":0,"replicas":[1,2]}]}',
    )
    submit.add_argument("--wait", action="store_true", help="show progress until the reassignment completes")
    listing = reassign_sub.add_parser("list", help="ongoing reassignments")
    add_target_args(listing)
    cancel = reassign_sub.add_parser("cancel", help="cancel reassignments (revert to the original replicas)")
    add_target_args(cancel)
    cancel.add_argument("--plan", help="cancel the partitions of this plan file")
    cancel.add_argument("--partition", action="append", default=[], metavar="TOPIC:PARTITION")
    verify = reassign_sub.add_parser("verify", help="is the plan complete? (exit 0 when it is)")
    add_target_args(verify)
    verify.add_argument("--plan", required=True)
    verify.add_argument("--wait", action="store_true", help="show progress until complete")
    verify.add_argument("--timeout-s", type=float, default=3600)

    elect = sub.add_parser("elect-leaders", help="preferred or unclean leader election (ElectLeaders RPC)")
    add_target_args(elect)
    elect.add_argument("--election-type", choices=["preferred", "unclean"], default="preferred")
    elect.add_argument("--partition", action="append", default=[], metavar="TOPIC:PARTITION")
    elect.add_argument("--all-topic-partitions", action="store_true")


def _partition_arg(text: str) -> tuple[str, int]:
    topic, colon, partition = text.rpartition(":")
    if not colon or not topic or not partition.isdigit():
        raise AdminError(f"{text!r} is not TOPIC:PARTITION")
    return topic, int(partition)


def read_plan(path: str) -> list[tuple[str, int, list[int]]]:
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.loads(f.read())
        return [(e["topic"], int(e["partition"]), [int(r) for r in e["replicas"]]) for e in obj["partitions"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise AdminError(f"cannot read the plan {path}: {e}") from e


def run(args: argparse.Namespace) -> int:
    try:
        return uvloop.run(_run(args))
    except AdminError as e:
        print(f"controller-svc: {e}", file=sys.stderr)
        return 1


async def _progress(client: Any, plan: list[tuple[str, int, list[int]]], wait: bool, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    wanted = {(t, p): r for t, p, r in plan}
    while True:
        description = await client.describe_cluster(include_partitions=True, topics=sorted({t for t, _ in wanted}))
        current = {(p.topic, p.partition): p for p in description.partitions}
        ongoing = {(r.topic, r.partition): r for r in (await client.list_reassignments(list(wanted))).reassignments}
        done = 0
        lines = []
        for key, target in sorted(wanted.items()):
            p = current.get(key)
            if p is None:
                lines.append(f"{key[0]}-{key[1]}: unknown partition")
                continue
            if key not in ongoing and list(p.replicas) == target:
                done += 1
                lines.append(f"{key[0]}-{key[1]}: complete (replicas {target}, leader {p.leader})")
            elif key in ongoing:
                r = ongoing[key]
                joined = [x for x in r.adding_replicas if x in r.isr]
                lines.append(
                    f"{key[0]}-{key[1]}: in progress: adding {list(r.adding_replicas)} "
                    f"({len(joined)}/{len(r.adding_replicas)} in ISR), removing {list(r.removing_replicas)}"
                )
            else:
                lines.append(f"{key[0]}-{key[1]}: not started or cancelled (replicas {list(p.replicas)})")
        print(f"[{time.strftime('%H:%M:%S')}] {done}/{len(wanted)} partitions complete")
        for line in lines:
            print("  " + line)
        if done == len(wanted):
            return 0
        if not wait:
            return 1
        if time.monotonic() > deadline:
            print("timed out", file=sys.stderr)
            return 1
        await asyncio.sleep(1.0)


async def _run(args: argparse.Namespace) -> int:
    client = client_of(args)
    if args.command == "topics":  # topics delete
        deleted = await client.delete_topics(args.topic)
        if deleted.error_code:
            raise AdminError(f"{ErrorCode.name_of(deleted.error_code)}: {deleted.error_message}")
        failed = 0
        for r in deleted.topics:
            if r.error_code:
                failed += 1
                print(f"{r.name}: {ErrorCode.name_of(r.error_code)}: {r.error_message}", file=sys.stderr)
            else:
                print(f"{r.name}: marked for deletion")
        return 1 if failed else 0
    if args.command == "elect-leaders":
        partitions = [_partition_arg(p) for p in args.partition]
        if not partitions and not args.all_topic_partitions:
            raise AdminError("give --partition TOPIC:PARTITION (repeatable) or --all-topic-partitions")
        elected = await client.elect_leaders(args.election_type, partitions)
        if elected.error_code:
            raise AdminError(f"{ErrorCode.name_of(elected.error_code)}: {elected.error_message}")
        failed = 0
        for e in elected.partitions:
            if e.error_code not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED):
                failed += 1
            print(
                f"{e.topic}-{e.partition}: {ErrorCode.name_of(e.error_code)}"
                + (f" (leader {e.leader})" if e.leader >= 0 else "")
                + (f": {e.error_message}" if e.error_message else "")
            )
        return 1 if failed else 0
    # reassign
    if args.reassign_command == "list":
        response = await client.list_reassignments()
        if response.error_code:
            raise AdminError(f"{ErrorCode.name_of(response.error_code)}: {response.error_message}")
        for o in response.reassignments:
            print(
                f"{o.topic}-{o.partition}: replicas {list(o.replicas)} adding {list(o.adding_replicas)} "
                f"removing {list(o.removing_replicas)} isr {list(o.isr)} leader {o.leader}"
            )
        if not response.reassignments:
            print("no reassignment in progress")
        return 0
    if args.reassign_command == "cancel":
        partitions = [_partition_arg(p) for p in args.partition]
        if args.plan:
            partitions += [(t, p) for t, p, _ in read_plan(args.plan)]
        if not partitions:
            raise AdminError("give --plan or --partition TOPIC:PARTITION")
        alter = await client.alter_reassignments([(t, p, None) for t, p in partitions])
    elif args.reassign_command == "submit":
        alter = await client.alter_reassignments(list(read_plan(args.plan)))
    else:  # verify
        return await _progress(client, read_plan(args.plan), args.wait, args.timeout_s)
    if alter.error_code:
        raise AdminError(f"{ErrorCode.name_of(alter.error_code)}: {alter.error_message}")
    failed = 0
    for a in alter.partitions:
        if a.error_code:
            failed += 1
            print(f"{a.topic}-{a.partition}: {ErrorCode.name_of(a.error_code)}: {a.error_message}", file=sys.stderr)
        else:
            print(f"{a.topic}-{a.partition}: {'cancelled' if args.reassign_command == 'cancel' else 'started'}")
    if args.reassign_command == "submit" and getattr(args, "wait", False) and not failed:
        return await _progress(client, read_plan(args.plan), True, 3600)
    return 1 if failed else 0
