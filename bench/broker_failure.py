"""Hard failure of a broker (issue 3).

10k partitions (5 brokers, RF 3); one broker, leading about 2k of them, is killed with
SIGKILL. Measured from the ZooKeeper notification (its registration disappearing, seen by a
watch of our own):
- `new_leaders_ms`: to every surviving replica of the partitions it led having applied their
  new leader;
- `total_ms`: to every surviving broker having applied everything the controller sent for the
  failure: the new leaders, the ISR shrink of the partitions it followed (a LeaderAndIsr with a
  higher leader epoch and an ISR without it, on every surviving replica), and the
  UpdateMetadata that carry both (the completion of the last request sent, once every role
  change is seen and the controller has sent nothing for 2 s).
Floor, in the same run: the same number of ZooKeeper writes (partition-state setData in multis
of 1000) through the same client.

    python -m bench.broker_failure [--partitions 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import signal
import time
from typing import Any

import uvloop

from bench.common import (
    CpuMeter,
    Profiler,
    create_partitions,
    emit,
    log_timeline_ms,
    records,
    save,
    start_cluster,
    stop_cluster,
    summary_of_runs,
    wait_all_led,
)
from controller_svc.adapters.admin_client import AdminClient
from controller_svc.adapters.zk import paths
from controller_svc.adapters.zk.client import SetDataOp, WatchKind, ZkClient


async def floor_writes_ms(zookeeper: str, state_paths: list[str]) -> float:
    """Write the same number of partition states (their own current data, unconditionally) in
    multis of 1000, pipelined, through the same client."""
    zk = ZkClient(zookeeper, 30000)
    await zk.start(timeout_s=30)
    try:
        current = await zk.get_many(state_paths)
        ops = [SetDataOp(p, got[0]) for p, got in zip(state_paths, current, strict=True) if got is not None]
        started = time.monotonic()
        await zk.pipelined([functools.partial(zk.multi, ops[i : i + 1000]) for i in range(0, len(ops), 1000)])
        return (time.monotonic() - started) * 1000
    finally:
        await zk.close()


async def run(partitions: int, brokers: int, rf: int, profile_dir: str | None = None) -> dict[str, Any]:
    directory, spec = await asyncio.to_thread(start_cluster, 1, brokers, 6000)
    try:
        await create_partitions(spec, partitions, rf)
        await wait_all_led(spec, partitions, rf=rf)
        client = AdminClient(zookeeper=spec["zookeeper"], timeout_s=600)
        before = {
            (p.topic, p.partition): p for p in (await client.describe_cluster(include_partitions=True)).partitions
        }
        leaders: dict[int, int] = {}
        for p in before.values():
            leaders[p.leader] = leaders.get(p.leader, 0) + 1
        victim_id = max(leaders, key=lambda b: leaders[b])
        affected = {k for k, p in before.items() if victim_id in p.replicas}
        led = {k for k, p in before.items() if p.leader == victim_id}
        victim = next(b for b in spec["brokers"] if b["id"] == victim_id)

        watcher = ZkClient(spec["zookeeper"], 30000)
        await watcher.start(timeout_s=30)
        gone = asyncio.get_running_loop().create_future()

        def on_registration(kind: WatchKind, _path: str) -> None:
            if kind == WatchKind.DELETED and not gone.done():
                gone.set_result(time.time())

        watcher.watch_data(paths.broker_path(victim_id), on_registration)
        await watcher.exists(paths.broker_path(victim_id), watch=True)
        profiler = Profiler(profile_dir)
        profiler.start("controller", spec["controllers"][0]["pid"])
        survivor = next(b for b in spec["brokers"] if b["id"] != victim_id)
        profiler.start(f"broker-{survivor['id']}", survivor["pid"])
        cpu = CpuMeter(spec)
        cpu.start()
        os.kill(victim["pid"], signal.SIGKILL)
        t0 = await gone
        await watcher.close()

        # Every surviving replica of every partition with a replica on the dead broker applies a
        # LeaderAndIsr with a higher leader epoch, a leader other than the dead broker and an ISR
        # without it: a new leader where it led, the ISR shrink where it followed.
        needed = {(b, k) for k in affected for b in before[k].replicas if b != victim_id}
        deadline = time.monotonic() + 300
        applied_at: dict[tuple[int, tuple[str, int]], int] = {}
        quiet_since: float | None = None
        last_sent = 0
        while time.monotonic() < deadline:
            for r in records(spec["logs"], ["partition.role_changed"]):
                if r["ts"] < t0 * 1000 or r["role"] not in ("leader", "follower"):
                    continue
                key = (int(r["node"].split("-")[1]), (r["topic"], r["partition"]))
                if (
                    key in needed
                    and r["leader"] != victim_id
                    and victim_id not in r["isr"]
                    and r["leader_epoch"] > before[key[1]].leader_epoch
                ):
                    applied_at.setdefault(key, r["ts"])
            sent = sum(1 for r in records(spec["logs"], ["request.sent"]) if r["ts"] >= t0 * 1000)
            if sent != last_sent:
                last_sent, quiet_since = sent, time.monotonic()
            if len(applied_at) == len(needed) and quiet_since is not None and time.monotonic() - quiet_since >= 2:
                break
            await asyncio.sleep(0.2)
        else:
            raise TimeoutError(f"only {len(applied_at)} of {len(needed)} replicas applied the failure's changes")
        # Includes the 2 s of quiet the loop above waits for (idle processes: a few ms each).
        cpu_ms = cpu.stop()
        await asyncio.to_thread(profiler.stop)
        new_leaders_ms = max(ts for (b, k), ts in applied_at.items() if k in led) - t0 * 1000
        completed = [
            r
            for r in records(spec["logs"], ["request.completed"])
            if r["ts"] >= t0 * 1000 and r["broker"] != victim_id and not r["error"]
        ]
        total_ms = max([r["ts"] for r in completed] + list(applied_at.values())) - t0 * 1000
        writes = len(affected)
        floor_ms = await floor_writes_ms(
            spec["zookeeper"], [paths.partition_state_path(t, p) for t, p in sorted(affected)]
        )
        change = next(r for r in records(spec["logs"], ["broker.change"]) if victim_id in r["dead"])
        return {
            "benchmark": "broker_hard_failure",
            "partitions": partitions,
            "brokers": brokers,
            "replication_factor": rf,
            "dead_broker": victim_id,
            "partitions_led_by_dead_broker": len(led),
            "partitions_with_a_replica_on_it": len(affected),
            "notification_to_controller_ms": round(change["ts"] - t0 * 1000, 1),
            "new_leaders_ms": round(new_leaders_ms, 1),
            "total_ms": round(total_ms, 1),
            "timeline_ms": log_timeline_ms(spec["logs"], t0 * 1000, victim_id),
            "cpu_ms": cpu_ms,
            "requests_completed": len(completed),
            "ratio_to_floor": round(total_ms / floor_ms, 2) if floor_ms else None,
            "floor_zk_writes": writes,
            "floor_zk_writes_ms": round(floor_ms, 1),
            "target": {"total_ms": 500},
        }
    finally:
        await asyncio.to_thread(functools.partial(stop_cluster, directory))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=10000)
    parser.add_argument("--brokers", type=int, default=5)
    parser.add_argument("--out", help="also write the result (a JSON list) to this file")
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument("--profile", metavar="DIR", help="py-spy the controller and a surviving broker")
    parser.add_argument("--runs", type=int, default=1, help="repeat on a fresh cluster each time; adds a summary")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, not {args.runs}")
    results = []
    for index in range(args.runs):
        result = uvloop.run(run(args.partitions, args.brokers, args.replication_factor, args.profile))
        result["run"] = index + 1
        emit(result)
        results.append(result)
    if args.runs > 1:
        summary = summary_of_runs(
            "broker_hard_failure", results, ["total_ms", "new_leaders_ms", "ratio_to_floor", "floor_zk_writes_ms"]
        )
        emit(summary)
        results.append(summary)
    if args.out:
        save(args.out, results)


if __name__ == "__main__":
    main()
