"""Failover windows and operations that fail half-way (the failover-windows issue, section 1).
Each test puts its fault exactly in the window its name says: a request written between the
stop of the only controller and the start of its successor, a change made while the new
controller holds its loop after its load, a topic that cannot be written in the middle of a
request."""

from __future__ import annotations

import asyncio
import json
import pathlib

import grpc
import pytest

from controller_svc.adapters.admin_client import AdminClient
from controller_svc.adapters.zk import paths
from controller_svc.devtools.devcluster import read_controller
from kcontroller.v1 import broker_pb2, broker_pb2_grpc
from tests.integration.harness import brokers_agree_with_controller, create_topic, eventually, partitions

pytestmark = pytest.mark.integration

NO_REBALANCE = {"auto.leader.rebalance.enable": "false"}


async def write_znode(cluster, path: str, data: bytes) -> None:  # type: ignore[no-untyped-def]
    zk = await cluster.zk()
    try:
        await zk.create(path, data)
    finally:
        await zk.close()


async def znode_exists(cluster, path: str) -> bool:  # type: ignore[no-untyped-def]
    return bool(await cluster.znode_exists(path))


async def plan_gone(cluster) -> bool:  # type: ignore[no-untyped-def]
    return not await znode_exists(cluster, paths.REASSIGN_PARTITIONS)


async def restart_the_controller_after(cluster, action) -> int:  # type: ignore[no-untyped-def]
    """Stop the only controller, run `action` while there is none, start it again; its new epoch."""
    _, epoch = await read_controller(cluster.zookeeper)
    controller = cluster.controller(1)
    await cluster.stop_node(controller)
    assert (await read_controller(cluster.zookeeper))[0] == -1, "a controller is still registered"
    await action()
    cluster.start_node(controller)
    await cluster.converged(min_epoch=epoch + 1)
    return int(epoch) + 1


async def test_reassignment_plan_written_while_no_controller_runs_is_carried_out(cluster_factory) -> None:
    """Kafka's initializePartitionReassignments starts every plan entry at failover; before,
    start-up marked them all as under way, none moved, and the plan blocked later ones."""
    cluster = await cluster_factory(controllers=1, brokers=4, controller_overrides=NO_REBALANCE)
    await cluster.converged()
    assert (await create_topic(cluster, "m", assignment={0: [1, 2], 1: [2, 3]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "m", [1, 2, 3, 4]), 30, what="online")
    plan = {"version": 1, "partitions": [{"topic": "m", "partition": 0, "replicas": [3, 4]}]}

    async def write_plan() -> None:
        await write_znode(cluster, paths.REASSIGN_PARTITIONS, json.dumps(plan).encode())

    await restart_the_controller_after(cluster, write_plan)
    admin = AdminClient(zookeeper=cluster.zookeeper)

    async def moved(partition: int, replicas: list[int]) -> bool:
        current = (await partitions(cluster, "m"))[("m", partition)]
        ongoing = (await admin.list_reassignments()).reassignments
        return not ongoing and list(current.replicas) == replicas and set(current.isr) == set(replicas)

    await eventually(lambda: moved(0, [3, 4]), 45, what="the plan found at failover to be carried out")
    await eventually(lambda: plan_gone(cluster), 30, what="the plan znode to be removed")
    # The plan no longer blocks the next submission.
    await write_znode(
        cluster,
        paths.REASSIGN_PARTITIONS,
        json.dumps({"version": 1, "partitions": [{"topic": "m", "partition": 1, "replicas": [4, 1]}]}).encode(),
    )
    await eventually(lambda: moved(1, [4, 1]), 45, what="a later plan to be carried out")
    await eventually(lambda: brokers_agree_with_controller(cluster, "m", [1, 2, 3, 4]), 30, what="brokers agree")


async def test_deletion_request_found_at_failover_with_deletion_disabled_keeps_the_topic_online(
    cluster_factory,
) -> None:
    """TopicDeletionManager.init with delete.topic.enable=false removes the requests and queues
    nothing; before, the topic was queued anyway: never re-elected, shown as being deleted."""
    cluster = await cluster_factory(
        controllers=1, brokers=3, controller_overrides={**NO_REBALANCE, "delete.topic.enable": "false"}
    )
    await cluster.converged()
    assert (await create_topic(cluster, "keep", assignment={0: [1, 2], 1: [2, 3]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "keep", [1, 2, 3]), 30, what="online")

    async def request_deletion() -> None:
        await write_znode(cluster, f"{paths.DELETE_TOPICS}/keep", b"")

    await restart_the_controller_after(cluster, request_deletion)

    async def request_removed() -> bool:
        return not await znode_exists(cluster, f"{paths.DELETE_TOPICS}/keep")

    await eventually(request_removed, 30, what="the deletion request to be removed")
    assert await znode_exists(cluster, paths.topic_path("keep"))
    await eventually(lambda: brokers_agree_with_controller(cluster, "keep", [1, 2, 3]), 30, what="brokers agree")
    description = await cluster.describe_broker(3)
    assert description is not None
    leaders = {(p.topic, p.partition): p.leader for p in description.metadata_partitions if p.topic == "keep"}
    assert leaders and all(leader >= 0 for leader in leaders.values()), leaders  # -2 would mean "being deleted"
    # The topic is still elected like any other: its leader's death moves leadership.
    leader = (await partitions(cluster, "keep"))[("keep", 1)].leader
    cluster.kill(cluster.broker(leader))
    survivors = [b for b in (1, 2, 3) if b != leader]

    async def re_elected() -> bool:
        current = (await partitions(cluster, "keep"))[("keep", 1)]
        return current.leader in survivors

    await eventually(re_elected, 30, what="partition keep-1 to be re-elected")


async def test_create_topics_failing_part_way_brings_the_topics_it_wrote_online(
    cluster_factory, zookeeper, chroot_connect: str
) -> None:
    """One CreateTopics of three topics whose second cannot be written (its config znode
    belongs to another ZooKeeper identity: NoAuth). Kafka finds new topics by diffing ZooKeeper
    against its context, so the first and third come online; before, the failure aborted the
    request after the first was written, and it was never brought online."""
    from controller_svc.adapters.zk.client import ZkClient
    from controller_svc.common.zk_settings import ZkDigestAuth
    from kcontroller.v1 import controller_pb2

    cluster = await cluster_factory(controllers=1, brokers=2, controller_overrides=NO_REBALANCE)
    await cluster.converged()
    # Without a chroot of its own (a secured chroot would lock the cluster out), another
    # identity creates /config/topics/locked in the cluster's chroot: readable by all, writable
    # only by it.
    other = ZkClient(zookeeper.connect, 10000, auth=ZkDigestAuth("other", "secret"), set_acl=True)
    await other.start(timeout_s=10)
    try:
        chroot = chroot_connect[len(zookeeper.connect) :]
        await other.create(f"{chroot}{paths.CONFIG_TOPICS}/locked", b'{"version":1,"config":{}}')
    finally:
        await other.close()
    admin = AdminClient(zookeeper=cluster.zookeeper)
    response = await admin.create_topics(
        controller_pb2.CreateTopicsRequest(
            topics=[
                controller_pb2.CreatableTopic(name=name, num_partitions=2, replication_factor=2)
                for name in ("first", "locked", "last")
            ]
        )
    )
    codes = {t.name: t.error_code for t in response.topics}
    assert codes == {"first": 0, "locked": 31, "last": 0}, response  # 31: CLUSTER_AUTHORIZATION_FAILED
    for topic in ("first", "last"):
        await eventually(lambda t=topic: brokers_agree_with_controller(cluster, t, [1, 2]), 30, what=f"{topic} online")
        assert all(p.leader in (1, 2) for p in (await partitions(cluster, topic)).values())
    assert not await znode_exists(cluster, paths.topic_path("locked"))


async def test_isr_change_made_while_the_new_controller_loads_reaches_every_broker(cluster_factory) -> None:
    """Kafka deletes pending ISR-change notifications *before* loading the metadata. The new
    controller here holds its loop for 4 s right after its load (fault injection); the ISR
    shrinks in that window. Before, the notification was deleted after the load: the controller
    kept the ISR it had read and sent it to every broker, the shrink lost for good."""
    cluster = await cluster_factory(
        controllers=2, brokers=3, controller_overrides={**NO_REBALANCE, "debug.failover.hold.loop.ms": "4000"}
    )
    await cluster.converged()
    assert (await create_topic(cluster, "w", assignment={0: [1, 2, 3]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "w", [1, 2, 3]), 30, what="online")
    old_id, old_epoch = await read_controller(cluster.zookeeper)
    new_id = next(c["id"] for c in cluster.spec["controllers"] if c["id"] != old_id)
    log_path = pathlib.Path(cluster.logs, f"controller-{new_id}.log")
    holds_before = (await asyncio.to_thread(log_path.read_text)).count("fault injection: holding")
    await cluster.stop_node(cluster.controller(old_id))

    async def holding() -> bool:
        return (await asyncio.to_thread(log_path.read_text)).count("fault injection: holding") > holds_before

    await eventually(holding, 30, interval_s=0.05, what="the new controller to hold its loop after its load")
    async with grpc.aio.insecure_channel(cluster.broker(1)["grpc"]) as channel:
        shrunk = await broker_pb2_grpc.BrokerControlStub(channel).SetReplicaLagging(
            broker_pb2.SetReplicaLaggingRequest(topic="w", partition=0, replica=3, lagging=True)
        )
    assert shrunk.error_code == 0 and list(shrunk.isr) == [1, 2]
    assert await holding()  # still inside the window: the hold lasts 4 s
    await cluster.converged(min_epoch=old_epoch + 1)

    async def every_broker_has_the_shrunk_isr() -> bool:
        for broker_id in (1, 2, 3):
            d = await cluster.describe_broker(broker_id)
            match = [p for p in (d.metadata_partitions if d else []) if (p.topic, p.partition) == ("w", 0)]
            if not match or list(match[0].isr) != [1, 2]:
                return False
        return list((await partitions(cluster, "w"))[("w", 0)].isr) == [1, 2]

    await eventually(every_broker_has_the_shrunk_isr, 30, what="the controller and every broker to see ISR [1, 2]")
