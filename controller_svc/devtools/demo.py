"""The demo: a local cluster (3 controllers, 3 brokers), a topic, kill -9 of the active
controller and then of a leading broker, the takeovers and how long they took, teardown, and
finally the Spark analysis of the cluster's own state-change logs."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import time
from collections import Counter
from typing import Any

import uvloop

from controller_svc.adapters.admin_client import AdminClient
from controller_svc.devtools import devcluster
from kcontroller.v1 import controller_pb2

TOPIC = "demo"
PARTITIONS = 12


async def create_topic(spec: dict[str, Any]) -> None:
    client = AdminClient(zookeeper=spec["zookeeper"])
    topic = controller_pb2.CreatableTopic(name=TOPIC, num_partitions=PARTITIONS, replication_factor=2)
    response = await client.create_topics(controller_pb2.CreateTopicsRequest(topics=[topic]))
    if response.topics[0].error_code != 0:
        raise devcluster.ClusterError(f"creating {TOPIC}: {response.topics[0].error_message}")


async def leaders(spec: dict[str, Any]) -> dict[int, int]:
    """Partition -> leader, as the active controller sees it."""
    client = AdminClient(zookeeper=spec["zookeeper"])
    description = await client.describe_cluster(include_partitions=True, topics=[TOPIC])
    return {p.partition: p.leader for p in description.partitions}


async def wait_for_leaders(spec: dict[str, Any], timeout_s: float, avoiding: int | None = None) -> dict[int, int]:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            current = await leaders(spec)
            if len(current) == PARTITIONS and all(leader >= 0 and leader != avoiding for leader in current.values()):
                return current
        except Exception:  # the controller may be moving; keep asking until the deadline
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise devcluster.ClusterError(f"partitions of {TOPIC} did not get leaders in {timeout_s:.0f} s")
        await asyncio.sleep(0.1)


def analyse(logs: str, out: str) -> None:
    from controller_svc.analytics import session

    try:
        session.check_runtime()
    except session.SparkUnavailableError as e:
        print(f"   skipped: {e}")
        return
    from controller_svc.analytics import job
    from controller_svc.analytics.cli import readable

    started = time.monotonic()
    spark = session.build("local[*]")
    try:
        outcome = job.analyze(spark, [logs], out)
    finally:
        spark.stop()
    print(f"   done in {time.monotonic() - started:.0f} s (local Spark)\n")
    print(readable(outcome.summary))
    print(f"\nsummary: {outcome.summary_path}\nreport:  {outcome.report_path}")


def run_demo(directory: str | None, session_timeout_ms: int, analyse_logs: bool = True) -> int:
    base = directory or tempfile.mkdtemp(prefix="kcontroller-demo-")
    print(f"== starting a local cluster in {base} (3 controllers, 3 brokers, ZooKeeper)")
    started = time.monotonic()
    spec = devcluster.up(base, 3, 3, session_timeout_ms=session_timeout_ms)
    history = os.path.join(base, "history")
    try:
        print(f"   up in {time.monotonic() - started:.1f} s\n")
        uvloop.run(create_topic(spec))
        placed = uvloop.run(wait_for_leaders(spec, 30.0))
        print(
            f"== topic {TOPIC}: {PARTITIONS} partitions, replication factor 2, leaders {dict(sorted(placed.items()))}\n"
        )
        print(devcluster.status(base))
        before = uvloop.run(devcluster.snapshot(spec))
        victim = next(c for c in spec["controllers"] if c["id"] == before.controller_id)
        print(
            f"\n== kill -9 of the active controller {victim['id']} (pid {victim['pid']}, epoch "
            f"{before.controller_epoch})"
        )
        print(f"   its ZooKeeper session ({session_timeout_ms} ms timeout) must expire before a standby can take over")
        killed_at = time.monotonic()
        os.kill(victim["pid"], signal.SIGKILL)
        after = uvloop.run(devcluster.wait_converged(spec, 60.0, min_epoch=before.controller_epoch + 1))
        took = time.monotonic() - killed_at
        print(
            f"\n== controller {after.controller_id} took over with epoch {after.controller_epoch}; every broker "
            f"applied its UpdateMetadata {took:.2f} s after the kill\n"
        )

        current = uvloop.run(wait_for_leaders(spec, 30.0))
        broker_id, led = Counter(current.values()).most_common(1)[0]
        broker = next(b for b in spec["brokers"] if b["id"] == broker_id)
        print(f"== kill -9 of broker {broker_id} (pid {broker['pid']}), leader of {led} partitions of {TOPIC}")
        killed_at = time.monotonic()
        os.kill(broker["pid"], signal.SIGKILL)
        moved = uvloop.run(wait_for_leaders(spec, 60.0, avoiding=broker_id))
        print(
            f"   its partitions have new leaders {time.monotonic() - killed_at:.2f} s after the kill "
            f"(session expiry included): {dict(sorted(moved.items()))}\n"
        )
        print(devcluster.status(base))
        time.sleep(1.0)  # let the brokers' last role changes reach their logs
        shutil.copytree(spec["logs"], history)
        print(f"\nstate-change logs: {spec['logs']} (copied to {history} for the analysis)")
    finally:
        print("\n== tearing down")
        devcluster.down(base, grace_s=10)
    if analyse_logs:
        print(f"\n== analysing the cluster's state-change logs on Spark: controller-svc analyze {history} ...")
        analyse(history, os.path.join(base, "analysis"))
    return 0
