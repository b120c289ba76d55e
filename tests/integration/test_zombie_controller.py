"""A zombie controller: one paused past its session timeout in the middle of something, that
resumes believing it is still the controller. The pause lands exactly where each test says:
the controller stops itself there (`debug.self.stop.dir`, common/self_stop.py) and records
it, so the test knows the zombie really holds a request to send, or a write to make, when it
resumes (a SIGSTOP from outside usually catches an idle process that then never acts).

Kafka's guarantees: a request carrying an older controller epoch is refused by every broker
that has seen the newer one (STALE_CONTROLLER_EPOCH), and a write behind an old epoch's fence,
or from an expired session, never reaches ZooKeeper (KAFKA-6082)."""

from __future__ import annotations

import asyncio
import pathlib
import signal
from typing import Any

import pytest

from controller_svc.adapters.zk import paths
from controller_svc.common.errors import ErrorCode
from controller_svc.devtools import devcluster
from tests.integration.harness import Cluster, create_topic, eventually, scrape

pytestmark = pytest.mark.integration


async def _stop_the_active_controller_at(
    cluster: Cluster, stops: pathlib.Path, point: str, topic: str
) -> tuple[Any, dict[str, Any], Any, asyncio.Task[Any]]:
    """Arm the active controller to stop itself at `point`, give it work that reaches the point
    (CreateTopics), wait until it stopped there and another controller took over."""
    before = await cluster.converged()
    zombie = cluster.controller(before.controller_id)
    node = f"controller-{zombie['id']}"
    (stops / f"{node}.{point}").touch()
    creating = asyncio.create_task(asyncio.wait_for(create_topic(cluster, topic, 1, 3), 120))
    creating.add_done_callback(lambda task: task.cancelled() or task.exception())  # its fate is not checked

    async def stopped_there() -> bool:
        return any(r["kind"] == "debug.self_stop" and r["point"] == point for r in cluster.records(node))

    await eventually(stopped_there, 30, what=f"the active controller to stop itself {point}")
    try:
        after = await cluster.converged(min_epoch=before.controller_epoch + 1, timeout_s=60)
    except BaseException:
        cluster.signal(zombie, signal.SIGCONT)
        raise
    assert after.controller_id != before.controller_id
    return before, zombie, after, creating


async def _zombie_resigned(cluster: Cluster, zombie: dict[str, Any], epoch: int) -> None:
    async def resigned() -> bool:
        return any(
            r["kind"] == "controller.resigned" and r["controller_epoch"] == epoch
            for r in cluster.records(f"controller-{zombie['id']}")
        )

    await eventually(resigned, 30, what="the zombie controller to resign")


async def _settle(creating: asyncio.Task[Any]) -> None:
    try:
        await creating
    except Exception:
        pass


async def test_a_zombie_resumed_with_a_request_in_hand_sends_its_old_epoch_and_brokers_refuse_it(
    cluster_factory: Any, tmp_path: pathlib.Path
) -> None:
    stops = tmp_path / "stops"
    stops.mkdir()
    cluster = await cluster_factory(controllers=2, brokers=3, controller_overrides={"debug.self.stop.dir": str(stops)})
    before, zombie, after, creating = await _stop_the_active_controller_at(cluster, stops, "before-send", "bait")
    cluster.signal(zombie, signal.SIGCONT)

    def refusals() -> list[dict[str, Any]]:
        return [
            r
            for r in cluster.records()
            if r["kind"] == "request.received"
            and r["controller_epoch"] == before.controller_epoch
            and r["result"] == "rejected"
            and r["error"] == ErrorCode.STALE_CONTROLLER_EPOCH
        ]

    async def refused() -> bool:
        return bool(refusals())

    # The request it held went out, with its old epoch, and the broker refused it.
    await eventually(refused, 30, what="a broker to refuse the zombie's request")
    resumed = next(r for r in cluster.records(f"controller-{zombie['id']}") if r["kind"] == "debug.self_resumed")
    assert all(r["ts"] >= resumed["ts"] for r in refusals())
    await _zombie_resigned(cluster, zombie, before.controller_epoch)
    response = await devcluster.describe_cluster(zombie["grpc"])
    assert response is not None and response.error_code == ErrorCode.NOT_CONTROLLER
    assert response.active_controller.id == after.controller_id
    # No broker applied anything of the old epoch after the new one, nor went back to it.
    for broker_id in after.brokers:
        now = await cluster.describe_broker(broker_id)
        assert now is not None and now.controller_epoch == after.controller_epoch
    await _settle(creating)


async def test_a_zombie_resumed_in_the_middle_of_a_write_is_refused_by_zookeeper(
    cluster_factory: Any, tmp_path: pathlib.Path
) -> None:
    stops = tmp_path / "stops"
    stops.mkdir()
    cluster = await cluster_factory(controllers=2, brokers=3, controller_overrides={"debug.self.stop.dir": str(stops)})
    before, zombie, after, creating = await _stop_the_active_controller_at(
        cluster, stops, "before-fenced-write", "never-written"
    )
    zk = await cluster.zk()
    try:
        epoch_before_wakeup = await zk.get(paths.CONTROLLER_EPOCH)
        cluster.signal(zombie, signal.SIGCONT)

        def zombie_writes() -> list[dict[str, Any]]:
            return [r for r in cluster.records(f"controller-{zombie['id']}") if r["kind"] == "debug.zombie_write"]

        async def answered() -> bool:
            return bool(zombie_writes())

        # The write it was about to make was attempted, and refused.
        await eventually(answered, 60, what="the zombie's write to be answered")
        assert [w["outcome"] for w in zombie_writes()] == ["refused"], zombie_writes()
        await _zombie_resigned(cluster, zombie, before.controller_epoch)
        # Its session expired while it was stopped: Kafka's SessionExpireListener meters say so
        # on its metrics page (and the new controller's session never expired).
        prefix = "kafka_server_sessionexpirelistener_zookeeper"

        async def expiry_counted() -> bool:
            samples = await asyncio.to_thread(scrape, zombie["metrics"])
            return samples.get(f"{prefix}expires_total", 0) >= 1 and samples.get(f"{prefix}syncconnects_total", 0) >= 2

        await eventually(expiry_counted, 30, what="the zombie's expired session in its metrics")
        successor = await asyncio.to_thread(scrape, cluster.controller(after.controller_id)["metrics"])
        assert successor.get(f"{prefix}expires_total") == 0 and successor.get(f"{prefix}syncconnects_total", 0) >= 1
        # Nothing of it is in ZooKeeper: no topic, and the epoch and /controller are the new controller's.
        assert not await cluster.znode_exists(paths.topic_path("never-written"))
        epoch_now = await zk.get(paths.CONTROLLER_EPOCH)
        assert epoch_now[0] == str(after.controller_epoch).encode()
        assert epoch_now[1].version == epoch_before_wakeup[1].version
    finally:
        await zk.close()
    await _settle(creating)
