"""Controlled shutdown benchmark (issue 4).

5 brokers, RF 3, broker 1 leading 10k partitions (explicit assignment, broker 1 first). Measured:
from SIGTERM to the broker process's exit (its controlled shutdown moves every leadership away,
then it deregisters). Floor, in the same run: the same number of partition-state writes in
multis of 1000 through the same client (the ZooKeeper work the controller cannot avoid).

    python -m bench.controlled_shutdown [--partitions 10000]
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

from bench.broker_failure import floor_writes_ms
from bench.common import (
    CpuMeter,
    LogTail,
    Profiler,
    emit,
    log_timeline_ms,
    save,
    start_cluster,
    stop_cluster,
    summary_of_runs,
    wait_all_led,
)
from controller_svc.adapters.admin_client import AdminClient
from controller_svc.adapters.zk import paths
from controller_svc.devtools.zookeeper_launcher import pid_alive
from kcontroller.v1 import controller_pb2


async def create_led_by(spec: dict[str, Any], broker: int, partitions: int, brokers: int) -> list[tuple[str, int]]:
    client = AdminClient(zookeeper=spec["zookeeper"], timeout_s=600)
    others = [b for b in range(1, brokers + 1) if b != broker]
    created: list[tuple[str, int]] = []
    for index in range((partitions + 999) // 1000):
        count = min(1000, partitions - index * 1000)
        name = f"led-{index:03d}"
        assignments = [
            controller_pb2.ReplicaAssignment(
                partition=p, replicas=[broker, others[p % len(others)], others[(p + 1) % len(others)]]
            )
            for p in range(count)
        ]
        response = await client.create_topics(
            controller_pb2.CreateTopicsRequest(
                topics=[controller_pb2.CreatableTopic(name=name, assignments=assignments)]
            )
        )
        if response.error_code or response.topics[0].error_code:
            raise RuntimeError(f"creating {name} failed: {response}")
        created += [(name, p) for p in range(count)]
    return created


def wait_for_exit(pid: int, cpu: CpuMeter) -> None:
    while pid_alive(pid):
        cpu.poll()
        time.sleep(0.005)


async def run(partitions: int, brokers: int, profile_dir: str | None = None) -> dict[str, Any]:
    # The ZooKeeper heap positionally (start_cluster's default), so that the overrides can only
    # be controller configs.
    directory, spec = await asyncio.to_thread(
        start_cluster, 1, brokers, 10000, 1024, **{"auto.leader.rebalance.enable": "false"}
    )
    try:
        created = await create_led_by(spec, 1, partitions, brokers)
        await wait_all_led(spec, partitions)
        victim = next(b for b in spec["brokers"] if b["id"] == 1)
        tail = LogTail(spec["logs"])
        tail.skip_existing()
        profiler = Profiler(profile_dir)
        profiler.start("controller", spec["controllers"][0]["pid"])
        profiler.start(f"broker-{victim['id']}", victim["pid"])
        cpu = CpuMeter(spec)
        controller_pid = spec["controllers"][0]["pid"]
        threads_before = cpu.threads_ms(controller_pid)
        cpu.start()
        sigterm_ts_ms = time.time() * 1000
        started = time.monotonic()
        os.kill(victim["pid"], signal.SIGTERM)
        await asyncio.to_thread(wait_for_exit, victim["pid"], cpu)
        exit_ms = (time.monotonic() - started) * 1000
        cpu_ms = cpu.stop()  # the broker: up to its last poll before it exited
        threads_after = cpu.threads_ms(controller_pid)
        controller_threads_ms = {
            name: round(ms - threads_before.get(name, 0.0), 1)
            for name, ms in threads_after.items()
            if ms - threads_before.get(name, 0.0) > 0
        }
        await asyncio.to_thread(profiler.stop)
        records = tail.new_records(["broker.controlled_shutdown_succeeded", "broker.controlled_shutdown_failed"])
        outcome = records[0]["kind"] if records else "unknown"
        client = AdminClient(zookeeper=spec["zookeeper"], timeout_s=600)
        description = await client.describe_cluster(include_partitions=True)
        still_led = sum(1 for p in description.partitions if p.leader == 1)
        floor_ms = await floor_writes_ms(spec["zookeeper"], [paths.partition_state_path(t, p) for t, p in created])
        return {
            "benchmark": "controlled_shutdown",
            "partitions_led": partitions,
            "brokers": brokers,
            "replication_factor": 3,
            "sigterm_to_exit_ms": round(exit_ms, 1),
            "timeline_ms": log_timeline_ms(spec["logs"], sigterm_ts_ms, victim["id"]),
            "cpu_ms_until_exit": cpu_ms,
            "controller_cpu_ms_by_thread": controller_threads_ms,
            "outcome": outcome,
            "partitions_still_led_after": still_led,
            "floor_zk_writes": partitions,
            "floor_zk_writes_ms": round(floor_ms, 1),
            "ratio_to_floor": round(exit_ms / floor_ms, 2) if floor_ms else None,
            "target": {"sigterm_to_exit_ms": 500, "ratio_to_floor": 2.5},
            "reference": "Kafka 1.1's published figure is 3 s",
        }
    finally:
        await asyncio.to_thread(functools.partial(stop_cluster, directory))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=10000)
    parser.add_argument("--brokers", type=int, default=5)
    parser.add_argument("--out", help="also write the result (a JSON list) to this file")
    parser.add_argument("--profile", metavar="DIR", help="py-spy the controller and the broker during the shutdown")
    parser.add_argument("--runs", type=int, default=1, help="repeat on a fresh cluster each time; adds a summary")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, not {args.runs}")
    results = []
    for index in range(args.runs):
        result = uvloop.run(run(args.partitions, args.brokers, args.profile))
        result["run"] = index + 1
        emit(result)
        results.append(result)
    if args.runs > 1:
        summary = summary_of_runs(
            "controlled_shutdown", results, ["sigterm_to_exit_ms", "ratio_to_floor", "floor_zk_writes_ms"]
        )
        emit(summary)
        results.append(summary)
    if args.out:
        save(args.out, results)


if __name__ == "__main__":
    main()
