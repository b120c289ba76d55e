"""Per-partition encodings on the controller's hot paths, against what they replaced (issue 13).

Every leader change, controlled shutdown and failover encodes each partition it touches: its
`PartitionState` field for LeaderAndIsr and UpdateMetadata, its state znode's JSON, and the
paths of the multis that write them. Each is timed against the plain way of doing the same, in
the same process, on the same partitions, and the outputs are checked equal first:

- `partition_field`: `metadata_encoding.encode_online` (joined from encoded pieces) against
  building the upb message and serializing it (`encode_field(state_message(...))`), on 10k
  partitions of 1000-partition topics (RF 3) with small numbers, and again with leader epochs
  and znode versions past the tables (the upb fallback);
- `state_znode_json`: `codecs.encode_partition_state` against orjson of the fields in a dict;
- `multi_paths`: `ZkClient._full_paths` against aiozk's `normalize_path` per path, with and
  without a chroot.

    python -m bench.encoding [--partitions 10000] [--runs 7] [--out FILE]

Milliseconds per 1000 partitions, the median of the runs; `ratio_to_floor` is ours over the
plain way's (below 1 is faster).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import aiozk
import orjson

from bench.common import emit, save
from controller_svc.adapters.zk import codecs, paths
from controller_svc.adapters.zk.client import ZkClient
from controller_svc.common.model import LeaderIsrAndControllerEpoch, ReplicaAssignment, TopicPartition
from controller_svc.common.zk_settings import parse_connect_string
from controller_svc.core.metadata_encoding import encode_field, encode_online, state_message

Partition = tuple[TopicPartition, LeaderIsrAndControllerEpoch, ReplicaAssignment]


def partitions(count: int, large: bool) -> list[Partition]:
    """`count` partitions, 1000 per topic, replicas rotating over 5 brokers, an ISR of 2 or 3;
    with `large`, leader epochs and znode versions past the encoding tables."""
    made: list[Partition] = []
    for index in range(count):
        tp = TopicPartition(f"bench-{index // 1000:04d}", index % 1000)
        replicas = tuple(1 + (index + k) % 5 for k in range(3))
        isr = replicas if index % 4 else replicas[:2]
        epoch, version = (20_000 + index % 7, 40_000 + index % 11) if large else (index % 7, index % 11)
        made.append((tp, LeaderIsrAndControllerEpoch(replicas[0], epoch, isr, version, 3), ReplicaAssignment(replicas)))
    return made


def per_1000_ms(work: Callable[[], object], items: int, runs: int) -> float:
    """Median over `runs` of the time `work` takes, per 1000 items; one warm-up run first."""
    work()
    samples = []
    for _ in range(runs):
        gc.collect()
        started = time.perf_counter()
        work()
        samples.append((time.perf_counter() - started) * 1000 * 1000 / items)
    return round(statistics.median(samples), 3)


def compare(
    name: str, ours: Callable[[], list[Any]], floor: Callable[[], list[Any]], items: int, runs: int
) -> dict[str, Any]:
    if ours() != floor():
        raise SystemExit(f"{name}: the two encodings differ")
    ours_ms = per_1000_ms(ours, items, runs)
    floor_ms = per_1000_ms(floor, items, runs)
    return {"ms_per_1000": ours_ms, "floor_ms_per_1000": floor_ms, "ratio_to_floor": round(ours_ms / floor_ms, 2)}


def _state_json_dict(state: LeaderIsrAndControllerEpoch) -> bytes:
    return orjson.dumps(
        {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": 1,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        }
    )


def _client(connect: str) -> ZkClient:
    """A ZkClient with aiozk's client made but not started: `_full_paths` only reads its chroot."""
    servers, chroot = parse_connect_string(connect)
    zk = ZkClient(connect, 10000)
    zk._client = aiozk.ZKClient(servers, chroot=chroot)
    return zk


def run(count: int, runs: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for label, large in (("small_numbers", False), ("past_the_tables", True)):
        parts = partitions(count, large)
        results[f"partition_field_{label}"] = compare(
            f"partition_field_{label}",
            lambda parts=parts: [encode_online(tp, s, a) for tp, s, a in parts],  # type: ignore[misc]
            lambda parts=parts: [  # type: ignore[misc]
                encode_field(state_message(tp, s, list(a.replicas), s.leader)) for tp, s, a in parts
            ],
            count,
            runs,
        )
    parts = partitions(count, False)
    results["state_znode_json"] = compare(
        "state_znode_json",
        lambda: [codecs.encode_partition_state(s) for _, s, _ in parts],
        lambda: [_state_json_dict(s) for _, s, _ in parts],
        count,
        runs,
    )
    state_paths = [paths.partition_state_path(tp.topic, tp.partition) for tp, _, _ in parts]
    for label, connect in (("no_chroot", "127.0.0.1:2181"), ("chroot", "127.0.0.1:2181/kafka")):
        zk = _client(connect)
        normalize = zk._client.normalize_path
        # In multis of 1000, as the partition-state store sends them.
        chunks = [state_paths[i : i + 1000] for i in range(0, len(state_paths), 1000)]
        results[f"multi_paths_{label}"] = compare(
            f"multi_paths_{label}",
            lambda zk=zk, chunks=chunks: [zk._full_paths(list(c)) for c in chunks],  # type: ignore[misc]
            lambda normalize=normalize, chunks=chunks: [[normalize(p) for p in c] for c in chunks],  # type: ignore[misc]
            count,
            runs,
        )
    return {"benchmark": "encoding", "partitions": count, "runs": runs, "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", help="also write the result (a JSON list) to this file")
    args = parser.parse_args()
    if args.partitions < 1000 or args.runs < 1:
        parser.error("--partitions must be at least 1000 and --runs at least 1")
    result = run(args.partitions, args.runs)
    emit(result)
    if args.out:
        save(args.out, [result])


if __name__ == "__main__":
    main()
