"""A real cluster's history through the Spark checker: a controller kill and a broker kill."""

from __future__ import annotations

import asyncio
import pathlib
import shutil
from collections import Counter
from typing import Any

from controller_svc.analytics import schema
from tests.integration.harness import brokers_agree_with_controller, create_topic, eventually, partitions


async def test_history_of_a_controller_kill_and_a_broker_kill(
    cluster_factory: Any, spark: Any, tmp_path: pathlib.Path
) -> None:
    from controller_svc.analytics import job

    cluster = await cluster_factory(controllers=3, brokers=3)
    first = await cluster.converged()
    assert (await create_topic(cluster, "h", partitions=8, replication_factor=2)).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "h", [1, 2, 3]), 30, what="h online")

    cluster.kill(cluster.controller(first.controller_id))
    second = await cluster.converged(min_epoch=first.controller_epoch + 1)

    before = await partitions(cluster, "h")
    victim, _ = Counter(p.leader for p in before.values()).most_common(1)[0]
    led = {key for key, p in before.items() if p.leader == victim}
    survivors = [b for b in (1, 2, 3) if b != victim]
    cluster.kill(cluster.broker(victim))

    async def moved() -> bool:
        current = await partitions(cluster, "h")
        return all(p.leader in survivors for p in current.values())

    await eventually(moved, 30, what=f"leaders to move off broker {victim}")
    await eventually(lambda: brokers_agree_with_controller(cluster, "h", survivors), 30, what="survivors agree")
    history = tmp_path / "history"
    shutil.copytree(cluster.logs, history)

    outcome = await asyncio.to_thread(job.analyze, spark, [str(history)], str(tmp_path / "out"))
    summary = outcome.summary
    assert outcome.exit_code == 0, summary["violations"]
    assert summary["violations"] == {name: 0 for name in schema.INVARIANTS}
    assert summary["malformed"] == 0
    assert summary["availability"]["failovers"] == 1

    read = spark.read.parquet
    (incident,) = [r.asDict() for r in read(str(tmp_path / "out" / "failover_incidents")).collect()]
    assert incident["previous_controller"] == first.controller_id
    assert incident["controller_id"] == second.controller_id
    assert incident["controller_epoch"] == second.controller_epoch
    assert incident["lost_evidence"] == "vacancy_observed"
    assert (incident["brokers"], incident["brokers_applied"]) == (3, 3)
    assert incident["election_ms"] >= 0 and incident["propagation_ms"] >= 0
    assert incident["total_ms"] == incident["detection_ms"] + incident["election_ms"] + incident["propagation_ms"]
    # Counted from the fault: a kill -9 is seen only when the session expires, no sooner than the
    # session timeout after the process last reached ZooKeeper. An idle aiozk client pings a
    # third of the timeout after its last request, and the process keeps logging in between
    # (requests applied, node.alive every 500 ms), so its last record can be up to that third
    # (plus the ping task's scheduling) after its last contact: a broker killed 1.3 s after its
    # last ping was seen dead 2.96 s after its last record with a 4 s session.
    session_ms = cluster.session_timeout_ms
    earliest_detection_ms = session_ms - session_ms // 3 - 200
    assert incident["detection_ms"] >= earliest_detection_ms, incident
    assert summary["availability"]["longest_failover_detection_ms"] == incident["detection_ms"]

    intervals = [r.asDict() for r in read(str(tmp_path / "out" / "offline_intervals")).collect()]
    assert {(r["topic"], r["partition"]) for r in intervals} == led
    for interval in intervals:
        assert interval["cause"] == "broker_deregistered"
        assert interval["end_cause"] == "leader_applied"
        assert interval["new_leader"] in survivors
        assert interval["duration_ms"] >= interval["detection_ms"] >= earliest_detection_ms, interval
        assert interval["start_ts"] + interval["detection_ms"] == interval["detected_ts"]
    assert summary["availability"]["still_offline"] == 0
