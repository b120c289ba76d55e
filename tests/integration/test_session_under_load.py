"""A controller step that holds the event loop longer than the ZooKeeper session timeout must
not cost the controller its session (the failover-windows issue, section 0: at 100k partitions
a failover that starved the session's heartbeats lost it half-way and re-elected endlessly).

The session timeout is the shortest ZooKeeper grants here (1 s with the fixtures' 500 ms tick).
The standby's failover loads a few thousand real partitions and then, through the fault
injection `debug.failover.hold.loop.ms`, computes for three session timeouts without yielding,
as a failover over a very large cluster does (bench/failover.py measures the real thing at 100k
partitions). The test proves that the hold happened (the controller's own `event_loop.blocked`
record, which names the injected step's function as where the loop was held), then that the
failover completed with exactly one election, no resignation and no lost session, and that the
brokers follow the new controller.
"""

from __future__ import annotations

import asyncio
import pathlib
import re

from controller_svc.adapters.admin_client import AdminClient
from controller_svc.devtools.devcluster import read_controller
from kcontroller.v1 import controller_pb2
from tests.integration.harness import eventually, read_records

SESSION_TIMEOUT_MS = 1000
HOLD_MS = 3 * SESSION_TIMEOUT_MS
PARTITIONS = 3000
# The controller events whose handling runs an election in a standby (controller.py's dispatch).
ELECTING_EVENTS = {"Reelect", "ControllerEpochChange", "RetryElection", "RegisterBrokerAndReelect"}


async def test_failover_that_holds_the_loop_past_the_session_timeout_keeps_its_session(cluster_factory) -> None:
    cluster = await cluster_factory(
        controllers=2,
        brokers=3,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        controller_overrides={"debug.failover.hold.loop.ms": str(HOLD_MS)},
    )
    admin = AdminClient(zookeeper=cluster.zookeeper, timeout_s=120)
    response = await admin.create_topics(
        controller_pb2.CreateTopicsRequest(
            topics=[controller_pb2.CreatableTopic(name="load", num_partitions=PARTITIONS, replication_factor=3)]
        )
    )
    assert response.error_code == 0 and response.topics[0].error_code == 0, response

    async def all_led() -> bool:
        description = await admin.describe_cluster(include_partitions=True)
        return sum(1 for p in description.partitions if p.leader >= 0) == PARTITIONS

    await eventually(all_led, timeout_s=120, interval_s=0.5, what=f"{PARTITIONS} partitions led")
    old_id, old_epoch = await read_controller(cluster.zookeeper)
    new_id = next(c["id"] for c in cluster.spec["controllers"] if c["id"] != old_id)
    new_node = f"controller-{new_id}"

    await cluster.stop_node(cluster.controller(old_id), timeout_s=60)

    async def completed() -> list[dict]:
        return [
            r
            for r in read_records(cluster.logs, new_node)
            if r["kind"] == "controller.failover_completed" and r["controller_epoch"] > old_epoch
        ]

    await eventually(completed, timeout_s=60, interval_s=0.2, what="the takeover")
    # Three more session timeouts: a session lost during the failover has expired by now.
    await asyncio.sleep(3 * SESSION_TIMEOUT_MS / 1000)

    records = read_records(cluster.logs)
    blocked = [r for r in records if r["node"] == new_node and r["kind"] == "event_loop.blocked"]
    held = [r["blocked_ms"] for r in blocked]
    assert held and max(held) >= HOLD_MS * 0.9, f"{new_node}'s loop was not held as injected: {held}"
    # The hold is in the failover, so it is named by the event that ran the election: which one
    # depends on the notification the standby handled first (/controller deleted, /controller_epoch
    # changed, or a retry), so any of the events that elect.
    longest = max(blocked, key=lambda r: r["blocked_ms"])
    assert longest["step"] in ELECTING_EVENTS, longest
    # Where: the monitor's sampler took the loop thread's stack while it was held.
    injected = [
        stack
        for stack in longest["held_in"]
        if stack.startswith("controller_svc/controller/term.py:") and " hold_event_loop < " in stack
    ]
    assert injected, longest
    elections = [r for r in records if r["kind"] == "controller.elected" and r["controller_epoch"] > old_epoch]
    assert [(r["controller_id"], r["controller_epoch"]) for r in elections] == [(new_id, old_epoch + 1)]
    assert not [r for r in records if r["kind"] == "controller.resigned" and r["node"] == new_node]
    process_log = await asyncio.to_thread(pathlib.Path(cluster.logs, f"{new_node}.log").read_text)
    assert "lost (expired or closed by the server)" not in process_log, process_log[-3000:]
    assert re.search(rf"event loop held for \d+ ms by {longest['step']} ", process_log), process_log[-3000:]
    assert f"held in: {injected[0]}" in process_log, process_log[-3000:]
    assert (await read_controller(cluster.zookeeper)) == (new_id, old_epoch + 1)
    snapshot = await cluster.converged(min_epoch=old_epoch + 1, timeout_s=60)
    assert snapshot.controller_epoch == old_epoch + 1
