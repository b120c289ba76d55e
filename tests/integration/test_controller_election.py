"""Issue 2: controller election, epoch fencing and failover on real ZooKeeper, real
processes and real gRPC."""

from __future__ import annotations

import asyncio
import json
import re
import signal

import aiozk
import pytest

from controller_svc.adapters.zk import paths
from controller_svc.common.errors import ErrorCode
from controller_svc.devtools import devcluster
from tests.integration.harness import eventually

pytestmark = pytest.mark.integration


def elected(records: list[dict]) -> list[dict]:
    return [r for r in records if r["kind"] == "controller.elected"]


def applied_epochs_never_regress(records: list[dict]) -> None:
    """Per broker, the controller epochs of applied requests never go down."""
    highest: dict[str, int] = {}
    for r in records:
        if r["kind"] == "request.received" and r["result"] == "applied":
            assert r["controller_epoch"] >= highest.get(r["node"], 0), f"epoch went backwards: {r}"
            highest[r["node"]] = r["controller_epoch"]


async def test_three_controllers_exactly_one_wins_with_kafka_compatible_znodes(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=3, brokers=3)
    snap = await cluster.converged()
    assert snap.controller_epoch == 1
    wins = elected(cluster.records())
    assert len(wins) == 1 and wins[0]["controller_epoch"] == 1
    assert wins[0]["controller_id"] == snap.controller_id

    zk = await cluster.zk()
    try:
        controller, _ = await zk.get(paths.CONTROLLER)
        epoch, _ = await zk.get(paths.CONTROLLER_EPOCH)
        broker, _ = await zk.get(paths.broker_path(1))
    finally:
        await zk.close()
    assert re.fullmatch(rb'\{"version":1,"brokerid":%d,"timestamp":"\d{13}"\}' % snap.controller_id, controller)
    assert epoch == b"1"
    registration = json.loads(broker)
    assert list(registration) == [
        "version",
        "host",
        "port",
        "jmx_port",
        "timestamp",
        "endpoints",
        "listener_security_protocol_map",
        "rack",
        "features",
    ]
    assert registration["version"] == 5 and registration["endpoints"] == [f"PLAINTEXT://{cluster.broker(1)['grpc']}"]

    # Every broker knows the controller, its epoch and all live brokers.
    for broker_id, description in snap.brokers.items():
        assert description.controller_id == snap.controller_id
        assert sorted(b.id for b in description.live_brokers) == [1, 2, 3], broker_id

    # Standbys answer NOT_CONTROLLER and name the active controller and its endpoint.
    for c in cluster.spec["controllers"]:
        response = await devcluster.describe_cluster(c["grpc"])
        assert response is not None
        if c["id"] == snap.controller_id:
            assert response.error_code == 0 and response.responder_active
            assert len(response.live_brokers) == 3
        else:
            assert response.error_code == ErrorCode.NOT_CONTROLLER
            assert response.active_controller.id == snap.controller_id
            assert response.active_controller.grpc == cluster.controller(snap.controller_id)["grpc"]


async def test_kill9_of_active_controller_elects_next_epoch(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=3, brokers=3)
    before = await cluster.converged()
    cluster.kill(cluster.controller(before.controller_id))
    after = await cluster.converged(min_epoch=before.controller_epoch + 1)
    assert after.controller_epoch == before.controller_epoch + 1
    assert after.controller_id != before.controller_id
    assert all(d.controller_epoch == after.controller_epoch for d in after.brokers.values())
    assert all(d.controller_id == after.controller_id for d in after.brokers.values())
    wins = elected(cluster.records())
    assert [w["controller_epoch"] for w in wins] == [1, 2]
    applied_epochs_never_regress(cluster.records())


async def test_deleting_controller_znode_by_hand_reelects(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=2, brokers=2)
    before = await cluster.converged()
    # A plain ZooKeeper client, as an operator's zkCli would be.
    servers, _, chroot = cluster.zookeeper.partition("/")
    plain = aiozk.ZKClient(servers, chroot="/" + chroot)
    await plain.start()
    try:
        await plain.delete(paths.CONTROLLER)
    finally:
        await plain.close()
    after = await cluster.converged(min_epoch=before.controller_epoch + 1)
    assert after.controller_epoch == before.controller_epoch + 1
    assert all(d.controller_epoch == after.controller_epoch for d in after.brokers.values())
    resigned = [r for r in cluster.records() if r["kind"] == "controller.resigned"]
    if after.controller_id != before.controller_id:
        assert any(r["controller_id"] == before.controller_id for r in resigned)
    applied_epochs_never_regress(cluster.records())


async def test_late_broker_gets_metadata_and_restarted_broker_fences_old_epoch(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=2, brokers=3)
    snap = await cluster.converged()
    # A late broker: stop broker 3 cleanly, start it again later.
    late = cluster.broker(3)
    await cluster.stop_node(late)
    await eventually(lambda: _live_brokers_seen(cluster, 1, {1, 2}), 30, what="broker 1 to learn that broker 3 left")
    cluster.start_node(late)
    again = await cluster.converged(min_epoch=snap.controller_epoch)
    assert sorted(b.id for b in again.brokers[3].live_brokers) == [1, 2, 3]
    assert again.brokers[3].broker_epoch > snap.brokers[3].broker_epoch
    assert again.brokers[3].update_metadata_count >= 1

    # A restarted broker has a new epoch; a request carrying the old one is rejected.
    old_epoch = again.brokers[3].broker_epoch
    response = await cluster.send_update_metadata(3, again.controller_id, again.controller_epoch, old_epoch - 1)
    assert response.error_code == ErrorCode.STALE_BROKER_EPOCH
    response = await cluster.send_update_metadata(
        3, again.controller_id, again.controller_epoch, snap.brokers[3].broker_epoch
    )
    assert response.error_code == ErrorCode.STALE_BROKER_EPOCH
    received = [r for r in cluster.records("broker-3") if r["kind"] == "request.received"]
    assert received[-1]["result"] == "rejected" and received[-1]["error"] == ErrorCode.STALE_BROKER_EPOCH
    # The clean stop deregistered and logged it.
    assert any(r["kind"] == "broker.shutdown" for r in cluster.records("broker-3"))


async def test_fast_restart_waits_for_previous_registration_to_expire(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=2)
    snap = await cluster.converged()
    broker = cluster.broker(2)
    cluster.kill(broker)  # its ephemeral registration survives until the session expires
    cluster.start_node(broker)
    after = await cluster.converged(min_epoch=snap.controller_epoch, timeout_s=60)
    assert after.brokers[2].broker_epoch > snap.brokers[2].broker_epoch
    log_text = (cluster.dir / "logs" / "broker-2.log").read_text()
    assert "waiting up to" in log_text and "to expire" in log_text


async def test_corrupt_controller_znode_is_replaced_by_an_election(cluster_factory, chroot_connect) -> None:
    servers, _, chroot = chroot_connect.partition("/")
    plain = aiozk.ZKClient(servers, chroot="/" + chroot)
    await plain.start()
    try:
        await plain.create(paths.CONTROLLER, b"this is not kafka json")
    finally:
        await plain.close()
    cluster = await cluster_factory(controllers=2, brokers=2)
    snap = await cluster.converged()
    assert snap.controller_epoch == 1
    logs = "".join(
        (cluster.dir / "logs" / f"controller-{c['id']}.log").read_text() for c in cluster.spec["controllers"]
    )
    assert "corrupt znode /controller: not JSON" in logs


async def test_non_integer_controller_epoch_blocks_election_until_repaired(cluster_factory, chroot_connect) -> None:
    servers, _, chroot = chroot_connect.partition("/")
    plain = aiozk.ZKClient(servers, chroot="/" + chroot)
    await plain.start()
    try:
        await plain.create(paths.CONTROLLER_EPOCH, b"seven")
        cluster = await cluster_factory(controllers=2, brokers=2, wait=False)

        async def refusal_logged() -> bool:
            return any(
                "refusing to elect a controller" in (cluster.dir / "logs" / f"controller-{c['id']}.log").read_text()
                for c in cluster.spec["controllers"]
            )

        await eventually(refusal_logged, 30, what="the controllers to refuse the corrupt epoch")
        # Nobody became controller with an invented epoch (checked over two retry intervals).
        for _ in range(10):
            assert not await plain.exists(paths.CONTROLLER)
            await asyncio.sleep(0.5)
        assert not elected(cluster.records())

        await plain.set_data(paths.CONTROLLER_EPOCH, b"7", force=True)
        snap = await cluster.converged(min_epoch=8)
        assert snap.controller_epoch == 8
        assert [w["controller_epoch"] for w in elected(cluster.records())] == [8]
    finally:
        await plain.close()


async def _live_brokers_seen(cluster, broker_id: int, expected: set[int]) -> bool:
    description = await cluster.describe_broker(broker_id)
    return description is not None and {b.id for b in description.live_brokers} == expected


async def test_health_and_reflection_on_both_servers(cluster_factory) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    from controller_svc.cli.main import check_health

    cluster = await cluster_factory(controllers=2, brokers=1)
    await cluster.converged()
    expected = {
        cluster.spec["controllers"][0]["grpc"]: "kcontroller.v1.Controller",
        cluster.spec["controllers"][1]["grpc"]: "kcontroller.v1.Controller",
        cluster.broker(1)["grpc"]: "kcontroller.v1.BrokerControl",
    }
    for address, service in expected.items():
        async with grpc.aio.insecure_channel(address) as channel:

            async def serving(channel: grpc.aio.Channel = channel, service: str = service) -> bool:
                # A standby turns SERVING once its Startup event is processed, which may come
                # a moment after the cluster has converged.
                health = await health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=service), timeout=5
                )
                return bool(health.status == health_pb2.HealthCheckResponse.SERVING)

            await eventually(serving, 20, what=f"{address} to serve {service}")
            call = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
            )
            names = set()
            async for reply in call:
                names |= {s.name for s in reply.list_services_response.service}
            assert {service, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= names
        assert await asyncio.to_thread(check_health, address, 5.0) == 0


async def test_broker_session_expiry_reregisters_and_is_handled_as_a_bounce(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=2)
    before = await cluster.converged()
    broker = cluster.broker(2)
    cluster.signal(broker, signal.SIGSTOP)
    try:
        # Past the session timeout: ZooKeeper drops the registration, the controller sees broker 2 die.
        await eventually(lambda: _live_brokers_seen(cluster, 1, {1}), 30, what="broker 2 to be declared dead")
    finally:
        cluster.signal(broker, signal.SIGCONT)

    async def reregistered() -> bool:
        d = await cluster.describe_broker(2)
        return d is not None and d.registered and d.broker_epoch > before.brokers[2].broker_epoch

    await eventually(reregistered, 30, what="broker 2 to re-register with a new epoch")
    after = await cluster.converged(min_epoch=before.controller_epoch)
    assert sorted(b.id for b in after.brokers[1].live_brokers) == [1, 2]
    assert next(b for b in after.brokers[1].live_brokers if b.id == 2).broker_epoch == after.brokers[2].broker_epoch
    registrations = [r for r in cluster.records("broker-2") if r["kind"] == "broker.registered"]
    assert len(registrations) == 2 and registrations[1]["broker_epoch"] > registrations[0]["broker_epoch"]
