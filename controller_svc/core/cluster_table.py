"""The readable cluster table of `controller-svc describe` and `cluster status`: controller,
epoch, brokers with their partitions and leaderships, offline and under-replicated partitions."""

from __future__ import annotations

from collections import Counter

from kcontroller.v1 import controller_pb2

MAX_LISTED = 20


def _listed(partitions: list[controller_pb2.PartitionDescription]) -> str:
    names = [f"{p.topic}-{p.partition}" for p in partitions[:MAX_LISTED]]
    more = len(partitions) - len(names)
    return ", ".join(names) + (f" ... and {more} more" if more > 0 else "")


def format_cluster(description: controller_pb2.DescribeClusterResponse) -> str:
    partitions = list(description.partitions)
    replicas = Counter(r for p in partitions for r in p.replicas)
    leaders = Counter(p.leader for p in partitions if p.leader >= 0)
    offline = [p for p in partitions if p.leader < 0]
    under_replicated = [p for p in partitions if p.leader >= 0 and len(p.isr) < len(p.replicas)]
    active = description.active_controller
    lines = [
        f"controller  {active.id if active.id >= 0 else 'NONE'}  epoch {description.controller_epoch}"
        + (f"  ({active.grpc})" if active.grpc else ""),
        f"topics {len({p.topic for p in partitions})}  partitions {len(partitions)}  "
        f"offline {len(offline)}  under-replicated {len(under_replicated)}",
        "",
        f"{'broker':>6}  {'endpoint':<24}{'rack':<10}{'epoch':>12}  {'partitions':>10}  {'leading':>7}",
    ]
    live = {b.id for b in description.live_brokers}
    for broker in sorted(description.live_brokers, key=lambda b: b.id):
        endpoint = f"{broker.endpoints[0].host}:{broker.endpoints[0].port}" if broker.endpoints else "-"
        lines.append(
            f"{broker.id:>6}  {endpoint:<24}{broker.rack or '-':<10}{broker.broker_epoch:>12}  "
            f"{replicas.get(broker.id, 0):>10}  {leaders.get(broker.id, 0):>7}"
        )
    for broker_id in sorted(set(replicas) - live):
        lines.append(f"{broker_id:>6}  {'(not live)':<24}{'-':<10}{'-':>12}  {replicas[broker_id]:>10}  {0:>7}")
    if offline:
        lines += ["", f"offline partitions ({len(offline)}): {_listed(offline)}"]
    if under_replicated:
        lines += ["", f"under-replicated partitions ({len(under_replicated)}): {_listed(under_replicated)}"]
    return "\n".join(lines)
