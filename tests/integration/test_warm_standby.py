"""The warm standby on real processes and a real ZooKeeper: a standby that has read none of the
changes made since its first read (refreshes an hour apart) takes over warm, re-reads exactly
what changed, and holds what ZooKeeper holds; with the standby off, the same takeover loads
cold."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from bench.failover import _zookeeper_port, cut_zookeeper_connections, wait_standby_settled
from controller_svc.adapters.zk import codecs, paths
from controller_svc.devtools.devcluster import read_controller
from kcontroller.v1 import broker_pb2, broker_pb2_grpc
from tests.integration.harness import (
    Cluster,
    brokers_agree_with_controller,
    create_topic,
    eventually,
    partitions,
    scrape,
)

pytestmark = pytest.mark.integration

NO_REFRESH = {"auto.leader.rebalance.enable": "false", "controller.standby.refresh.interval.ms": "3600000"}


def _standby_metrics(cluster: Cluster, controller_id: int) -> dict[str, float]:
    samples = scrape(cluster.controller(controller_id)["metrics"])
    return {
        "ready": samples.get("kcontroller_standby_ready", 0.0),
        "read": samples.get("kcontroller_standby_znodes_read_total", 0.0),
        "pending": samples.get("kcontroller_standby_pending", 0.0),
    }


async def _shrink(cluster: Cluster, topic: str, partition: int) -> list[int]:
    current = (await partitions(cluster, topic))[(topic, partition)]
    follower = next(r for r in current.isr if r != current.leader)
    async with grpc.aio.insecure_channel(cluster.broker(current.leader)["grpc"]) as channel:
        shrunk = await broker_pb2_grpc.BrokerControlStub(channel).SetReplicaLagging(
            broker_pb2.SetReplicaLaggingRequest(topic=topic, partition=partition, replica=follower, lagging=True)
        )
    assert shrunk.error_code == 0, shrunk
    return list(shrunk.isr)


async def _states_in_zookeeper(cluster: Cluster, topics: list[str]) -> dict[tuple[str, int], Any]:
    zk = await cluster.zk()
    try:
        states = {}
        for topic in topics:
            for child in await zk.get_children(paths.partitions_path(topic)):
                path = paths.partition_state_path(topic, int(child))
                data, stat = await zk.get(path)
                states[(topic, int(child))] = codecs.decode_partition_state(path, data, stat.version)
        return states
    finally:
        await zk.close()


def _failover_record(cluster: Cluster, controller_id: int, after_epoch: int) -> dict[str, Any] | None:
    found = [
        r
        for r in cluster.records(f"controller-{controller_id}")
        if r["kind"] == "controller.failover_completed" and r["controller_epoch"] > after_epoch
    ]
    return found[-1] if found else None


@pytest.mark.parametrize("warm", [True, False])
async def test_a_standby_that_read_none_of_the_changes_takes_over_with_what_zookeeper_holds(
    cluster_factory: Any, warm: bool
) -> None:
    overrides = {**NO_REFRESH, "controller.standby.warm.enable": "true" if warm else "false"}
    cluster = await cluster_factory(controllers=2, brokers=3, controller_overrides=overrides)
    await cluster.converged()
    old_id, old_epoch = await read_controller(cluster.zookeeper)
    new_id = next(c["id"] for c in cluster.spec["controllers"] if c["id"] != old_id)
    # bench.failover's wait for a ready and idle standby, on the real metrics pages: it ends
    # settled with the (empty) cluster's copy loaded, and without a copy (warm off) it runs out
    # of time unsettled.
    settled = await wait_standby_settled([cluster.controller(new_id)], timeout_s=30 if warm else 3, poll_s=0.5)
    if warm:
        assert settled["settled"] and settled["ready"] and settled["pending"] == 0 and settled["reloads"] >= 1, settled
    else:
        assert not settled["settled"] and not settled["ready"] and settled["reloads"] == 0, settled
    assert (await create_topic(cluster, "w", partitions=6, replication_factor=3)).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "w", [1, 2, 3]), 30, what="w online")
    read_before = (await asyncio.to_thread(_standby_metrics, cluster, new_id))["read"]
    # Changes the standby marks but does not read: ISR shrinks written by two leaders, a new
    # topic with a config, its partition states written by the active controller.
    shrunk = {p: await _shrink(cluster, "w", p) for p in (0, 1)}
    assert (
        await create_topic(cluster, "x", partitions=2, replication_factor=2, configs={"retention.ms": "1000"})
    ).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "x", [1, 2, 3]), 30, what="x online")
    # The fault landed: the standby read nothing since (its copy is stale), and says it has
    # work left (with the standby off, nothing is pending).
    stale = await asyncio.to_thread(_standby_metrics, cluster, new_id)
    assert stale["read"] == read_before
    assert (stale["pending"] > 0) == warm, stale
    await cluster.stop_node(cluster.controller(old_id))
    await cluster.converged(min_epoch=old_epoch + 1)

    async def failover_record() -> dict[str, Any] | None:
        return await asyncio.to_thread(_failover_record, cluster, new_id, old_epoch)

    record = await eventually(failover_record, 30, what="the failover's record")
    if warm:
        assert record["load_mode"] == "warm", record
        # Its copy was read when the cluster was empty: topics w and x, their config znodes and
        # their 6 + 2 partition states were marked since, and re-read at takeover (a znode changed
        # again during the takeover may be read twice, nothing else is read).
        assert 12 <= record["warm_reread"] <= 24, record
    else:
        assert record["load_mode"] == "cold" and record["cold_reason"] == "disabled", record
    in_zookeeper = await _states_in_zookeeper(cluster, ["w", "x"])
    seen = await partitions(cluster)
    assert set(seen) == set(in_zookeeper)
    for key, state in in_zookeeper.items():
        assert (seen[key].leader, list(seen[key].isr), seen[key].leader_epoch) == (
            state.leader,
            list(state.isr),
            state.leader_epoch,
        ), key
    for p, isr in shrunk.items():
        assert list(seen[("w", p)].isr) == isr


async def test_a_standby_whose_connection_is_cut_reads_its_copy_again_keeping_what_did_not_change(
    cluster_factory: Any,
) -> None:
    """The standby's ZooKeeper connection reset under it (`ss -K`, as a network fault would):
    aiozk reconnects within the session, the tree watches are gone, and the standby reads its
    copy again, keeping every state (none changed). It then follows a change and takes over warm
    with what ZooKeeper holds."""
    cluster = await cluster_factory(
        controllers=2, brokers=3, controller_overrides={"auto.leader.rebalance.enable": "false"}
    )
    await cluster.converged()
    assert (await create_topic(cluster, "w", partitions=6, replication_factor=3)).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "w", [1, 2, 3]), 30, what="w online")
    old_id, old_epoch = await read_controller(cluster.zookeeper)
    standby = cluster.controller(next(c["id"] for c in cluster.spec["controllers"] if c["id"] != old_id))
    settled = await wait_standby_settled([standby], timeout_s=60, poll_s=0.5)
    assert settled["settled"], settled
    names = {
        "reloads": "kcontroller_standby_reloads_total",
        "kept": "kcontroller_standby_states_kept_total",
        "disconnects": "kafka_server_sessionexpirelistener_zookeeperdisconnects_total",
        "expires": "kafka_server_sessionexpirelistener_zookeeperexpires_total",
        "ready": "kcontroller_standby_ready",
        "pending": "kcontroller_standby_pending",
    }

    def sample() -> dict[str, float]:
        samples = scrape(standby["metrics"])
        return {name: samples.get(metric, 0.0) for name, metric in names.items()}

    before = await asyncio.to_thread(sample)
    cut = await asyncio.to_thread(cut_zookeeper_connections, standby["pid"], _zookeeper_port(cluster.zookeeper))
    assert cut == 1  # the fault landed: the standby's one connection to ZooKeeper was reset

    async def read_again() -> dict[str, float] | None:
        now = await asyncio.to_thread(sample)
        done = now["reloads"] > before["reloads"] and now["ready"] == 1 and now["pending"] == 0
        return now if done else None

    after = await eventually(read_again, 60, what="the standby's copy read again")
    assert after["disconnects"] > before["disconnects"] and after["expires"] == before["expires"], (before, after)
    assert after["kept"] - before["kept"] == 6, (before, after)  # every state of w, none changed
    shrunk = await _shrink(cluster, "w", 0)
    await cluster.stop_node(cluster.controller(old_id))
    await cluster.converged(min_epoch=old_epoch + 1)

    async def failover_record() -> dict[str, Any] | None:
        return await asyncio.to_thread(_failover_record, cluster, standby["id"], old_epoch)

    record = await eventually(failover_record, 30, what="the failover's record")
    assert record["load_mode"] == "warm", record
    in_zookeeper = await _states_in_zookeeper(cluster, ["w"])
    seen = await partitions(cluster, "w")
    assert {k: (s.leader, list(s.isr), s.leader_epoch) for k, s in in_zookeeper.items()} == {
        k: (s.leader, list(s.isr), s.leader_epoch) for k, s in seen.items()
    }
    assert list(seen[("w", 0)].isr) == shrunk


async def test_a_reconnect_loses_the_tree_watch_and_the_arming_says_so(tmp_path: Any) -> None:
    """The assumption the standby's verification rests on, on the real server: a persistent
    recursive watch lives on its connection. After the server restarts (the session survives and
    the client reconnects), changes are no longer heard until the watch is armed again, and
    `tree_watch_intact` reports the old arming broken, so a standby would not trust its copy.
    Kafka's SessionExpireListener meters count the two clients' lost connections and
    reconnections, and no expiry."""
    from prometheus_client import REGISTRY

    from controller_svc.adapters.zk.client import WatchKind, ZkClient
    from controller_svc.devtools import zookeeper_launcher

    def meters() -> dict[str, float]:
        names = ("disconnects", "syncconnects", "expires")
        prefix = "kafka_server_sessionexpirelistener_zookeeper"
        return {name: REGISTRY.get_sample_value(f"{prefix}{name}_total") or 0.0 for name in names}

    server = await asyncio.to_thread(zookeeper_launcher.start, tmp_path / "zk", 1, 500)
    zk = ZkClient(server.connect, 30000)
    writer = ZkClient(server.connect, 30000)
    try:
        await zk.start(timeout_s=30)
        await writer.start(timeout_s=30)
        await zk.ensure_path("/tw")
        heard: list[tuple[WatchKind, str]] = []
        arming = await zk.watch_tree("/tw", lambda kind, path: heard.append((kind, path)))
        await writer.create("/tw/before", b"")
        await eventually(lambda: asyncio.sleep(0, heard == [(WatchKind.CREATED, "/tw/before")]), 10, what="an event")
        session = zk.session_id
        before = meters()
        await asyncio.to_thread(server.stop_node, 0)
        await asyncio.to_thread(server.restart_node, 0)

        async def reconnected() -> bool:
            return zk.connected and await zk.exists("/tw") is not None

        await eventually(reconnected, 60, what="the client back on the restarted server")
        assert zk.session_id == session, "the session was expected to survive the restart"
        assert not zk.tree_watch_intact(arming)
        await eventually(lambda: asyncio.sleep(0, writer.connected), 60, what="the writer back")
        after = meters()
        disconnects, reconnects = (after[n] - before[n] for n in ("disconnects", "syncconnects"))
        assert disconnects >= 2 and reconnects == disconnects and after["expires"] == before["expires"], (
            before,
            after,
        )
        await writer.create("/tw/unheard", b"")
        await asyncio.sleep(1.0)
        assert (WatchKind.CREATED, "/tw/unheard") not in heard  # lost with the connection
        again = await zk.watch_tree("/tw", lambda kind, path: heard.append((kind, path)))
        assert zk.tree_watch_intact(again)
        await writer.create("/tw/heard", b"")
        await eventually(
            lambda: asyncio.sleep(0, (WatchKind.CREATED, "/tw/heard") in heard), 10, what="the event after re-arming"
        )
    finally:
        await zk.close()
        await writer.close()
        await asyncio.to_thread(server.stop)
