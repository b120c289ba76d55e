"""Issue 4: topic deletion, reassignment with cancel, preferred and automatic election,
controlled shutdown; through ZooKeeper admin paths, the Controller RPCs and the CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from controller_svc.adapters.admin_client import AdminClient
from controller_svc.adapters.zk import paths
from controller_svc.common.errors import ErrorCode
from kcontroller.v1 import controller_pb2, controller_pb2_grpc
from tests.integration.harness import (
    brokers_agree_with_controller,
    create_topic,
    describe,
    eventually,
    leader_epochs_never_regress,
    partitions,
    roles,
    scrape,
)

pytestmark = pytest.mark.integration

NO_REBALANCE = {"auto.leader.rebalance.enable": "false"}


def client(cluster) -> AdminClient:  # type: ignore[no-untyped-def]
    return AdminClient(zookeeper=cluster.zookeeper)


async def znode_exists(cluster, path: str) -> bool:  # type: ignore[no-untyped-def]
    return bool(await cluster.znode_exists(path))


async def topic_gone(cluster, topic: str) -> bool:  # type: ignore[no-untyped-def]
    return (
        not any(
            [
                await znode_exists(cluster, paths.topic_path(topic)),
                await znode_exists(cluster, f"{paths.CONFIG_TOPICS}/{topic}"),
                await znode_exists(cluster, f"{paths.DELETE_TOPICS}/{topic}"),
            ]
        )
        and topic not in (await describe(cluster)).topic_ids
    )


async def reassignment_done(cluster, topic: str, partition: int, replicas: list[int]) -> bool:  # type: ignore[no-untyped-def]
    ongoing = (await client(cluster).list_reassignments()).reassignments
    current = (await partitions(cluster, topic))[(topic, partition)]
    return not ongoing and list(current.replicas) == replicas and set(current.isr) == set(replicas)


def cli(cluster, *args: str) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(
        [sys.executable, "-m", "controller_svc", *args, "--zookeeper", cluster.zookeeper],
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- topic deletion ----------------------------------------------------------------------------


async def test_topic_deletion_and_recreation(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=3)
    await cluster.converged()
    assert (await create_topic(cluster, "doomed", 4, 2, configs={"retention.ms": "1000"})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "doomed", [1, 2, 3]), 30, what="online")
    response = await client(cluster).delete_topics(["doomed", "never-existed"])
    codes = {r.name: r.error_code for r in response.topics}
    assert codes == {"doomed": 0, "never-existed": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    await eventually(lambda: topic_gone(cluster, "doomed"), 30, what="the topic and its znodes to go")
    for broker_id in (1, 2, 3):
        description = await cluster.describe_broker(broker_id)
        assert description is not None
        assert not [r for r in description.roles if r.topic == "doomed"]
        assert not [p for p in description.metadata_partitions if p.topic == "doomed"]
    deleted = [r for r in cluster.records() if r["kind"] == "partition.role_changed" and r["role"] == "deleted"]
    assert len(deleted) == 8  # 4 partitions x RF 2, each replica deleted by StopReplica(delete=true)
    # Recreated right after deletion.
    assert (await create_topic(cluster, "doomed", 2, 3)).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "doomed", [1, 2, 3]), 30, what="recreated")
    assert len(await partitions(cluster, "doomed")) == 2


async def test_deletion_with_a_broker_down_waits_then_completes(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=3)
    await cluster.converged()
    assert (await create_topic(cluster, "waiting", assignment={0: [1, 3], 1: [3, 2]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "waiting", [1, 2, 3]), 30, what="online")
    cluster.kill(cluster.broker(3))

    async def broker3_gone() -> bool:
        return 3 not in {b.id for b in (await describe(cluster)).live_brokers}

    await eventually(broker3_gone, 30, what="broker 3 to be declared dead")
    # Written the way kafka-topics.sh --delete does it.
    zk = await cluster.zk()
    try:
        await zk.create(f"{paths.DELETE_TOPICS}/waiting")
    finally:
        await zk.close()
    await asyncio.sleep(2)
    assert await znode_exists(cluster, paths.topic_path("waiting")), "a dead replica makes the topic ineligible"
    assert await znode_exists(cluster, f"{paths.DELETE_TOPICS}/waiting")
    cluster.start_node(cluster.broker(3))
    await eventually(lambda: topic_gone(cluster, "waiting"), 45, what="deletion to complete once broker 3 is back")


async def test_deletion_disabled_removes_the_request_and_keeps_the_topic(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=2, controller_overrides={"delete.topic.enable": "false"})
    await cluster.converged()
    assert (await create_topic(cluster, "kept", 1, 2)).error_code == 0
    response = await client(cluster).delete_topics(["kept"])
    assert response.topics[0].error_code == ErrorCode.TOPIC_DELETION_DISABLED
    zk = await cluster.zk()
    try:
        await zk.create(f"{paths.DELETE_TOPICS}/kept")
    finally:
        await zk.close()

    async def request_removed() -> bool:
        return not await znode_exists(cluster, f"{paths.DELETE_TOPICS}/kept")

    await eventually(request_removed, 30, what="the deletion request to be removed")
    assert await znode_exists(cluster, paths.topic_path("kept"))
    assert len(await partitions(cluster, "kept")) == 1


# --- reassignment ------------------------------------------------------------------------------


async def test_reassignment_completes_as_kafka_leaves_it(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=4, controller_overrides=NO_REBALANCE)
    await cluster.converged()
    assert (await create_topic(cluster, "move", assignment={0: [1, 2]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "move", [1, 2]), 30, what="online")
    before = (await partitions(cluster, "move"))[("move", 0)]
    plan = cluster.dir / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "move", "partition": 0, "replicas": [3, 4]}]}))
    submitted = cli(cluster, "reassign", "submit", "--plan", str(plan))
    assert submitted.returncode == 0, submitted.stderr
    await eventually(lambda: reassignment_done(cluster, "move", 0, [3, 4]), 45, what="the reassignment to complete")
    verified = cli(cluster, "reassign", "verify", "--plan", str(plan))
    assert verified.returncode == 0 and "1/1 partitions complete" in verified.stdout
    after = (await partitions(cluster, "move"))[("move", 0)]
    assert after.leader == 3 and after.leader_epoch > before.leader_epoch
    zk = await cluster.zk()
    try:
        znode = json.loads((await zk.get(paths.topic_path("move")))[0])
    finally:
        await zk.close()
    assert znode["partitions"] == {"0": [3, 4]} and znode["adding_replicas"] == {} and znode["removing_replicas"] == {}
    await eventually(lambda: brokers_agree_with_controller(cluster, "move", [3, 4]), 30, what="new replicas agree")
    for old in (1, 2):
        assert ("move", 0) not in await roles(cluster, old)
    leader_epochs_never_regress(cluster.records())


async def submit_zk_plan(cluster, entries: list[tuple[str, int, list[int]]]) -> None:  # type: ignore[no-untyped-def]
    """Write /admin/reassign_partitions as kafka-reassign-partitions (ZooKeeper mode) does."""
    plan = {"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r} for t, p, r in entries]}
    zk = await cluster.zk()
    try:
        await zk.create(paths.REASSIGN_PARTITIONS, json.dumps(plan).encode())
    finally:
        await zk.close()


async def test_reassignment_to_a_dead_broker_waits_and_cancel_restores(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=3, controller_overrides=NO_REBALANCE)
    await cluster.converged()
    assert (await create_topic(cluster, "r", assignment={0: [1, 2], 1: [1, 2]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "r", [1, 2]), 30, what="online")
    await cluster.stop_node(cluster.broker(3))
    # The API refuses replicas to add that are not live (Kafka's validateReplicas)...
    refused = await client(cluster).alter_reassignments([("r", 0, [1, 3])])
    assert refused.partitions[0].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    # ...a ZooKeeper plan may name them, and waits for them.
    await submit_zk_plan(cluster, [("r", 0, [1, 3]), ("r", 1, [2, 3])])
    await asyncio.sleep(2)
    ongoing = {(r.topic, r.partition): r for r in (await client(cluster).list_reassignments()).reassignments}
    assert list(ongoing[("r", 0)].adding_replicas) == [3] and list(ongoing[("r", 0)].removing_replicas) == [2]
    # Cancel partition 1: back to [1, 2].
    cancelled = await client(cluster).alter_reassignments([("r", 1, None)])
    assert cancelled.partitions[0].error_code == 0
    # The original replica set comes back (in Kafka's reassignTo order, as Kafka does).
    await eventually(lambda: reassignment_done_one(cluster, "r", 1, {1, 2}), 30, what="the cancel to restore {1, 2}")
    again = await client(cluster).alter_reassignments([("r", 1, None)])
    assert again.partitions[0].error_code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    # Broker 3 returns: partition 0's reassignment resumes and completes.
    cluster.start_node(cluster.broker(3))
    await eventually(lambda: reassignment_done(cluster, "r", 0, [1, 3]), 45, what="the reassignment to resume")


async def test_cancel_sends_the_reverted_replicas_to_the_replicas_and_metadata_to_every_broker(
    cluster_factory,
) -> None:
    """Kafka's onPartitionReassignment runs phase B for a cancel: LeaderAndIsr with the reverted
    replica set (and a bumped leader epoch) to the remaining replicas, UpdateMetadata to all.
    Before, a cancel only rewrote ZooKeeper: brokers kept the replica set of the cancelled move."""
    cluster = await cluster_factory(controllers=1, brokers=3, controller_overrides=NO_REBALANCE)
    await cluster.converged()
    assert (await create_topic(cluster, "c", assignment={0: [1, 2]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "c", [1, 2, 3]), 30, what="online")
    await cluster.stop_node(cluster.broker(3))
    await submit_zk_plan(cluster, [("c", 0, [3, 2])])

    async def brokers_see(replicas: set[int]) -> bool:
        controller_view = (await partitions(cluster, "c"))[("c", 0)]
        if set(controller_view.replicas) != replicas:
            return False
        for broker_id in (1, 2):
            description = await cluster.describe_broker(broker_id)
            if description is None:
                return False
            role = next((r for r in description.roles if (r.topic, r.partition) == ("c", 0)), None)
            cached = next((p for p in description.metadata_partitions if (p.topic, p.partition) == ("c", 0)), None)
            if role is None or cached is None:
                return False
            expected = list(controller_view.replicas)
            if list(role.replicas) != expected or role.leader_epoch != controller_view.leader_epoch:
                return False
            if list(cached.replicas) != expected:
                return False
        return True

    await eventually(lambda: brokers_see({1, 2, 3}), 30, what="the brokers to see the move under way")
    epoch_during_move = (await partitions(cluster, "c"))[("c", 0)].leader_epoch
    assert (await client(cluster).alter_reassignments([("c", 0, None)])).partitions[0].error_code == 0
    await eventually(lambda: brokers_see({1, 2}), 30, what="both replicas and the metadata to lose broker 3")
    after = (await partitions(cluster, "c"))[("c", 0)]
    assert after.leader in (1, 2) and set(after.isr) <= {1, 2} and after.leader_epoch > epoch_during_move


async def reassignment_done_one(cluster, topic: str, partition: int, replicas: set[int]) -> bool:  # type: ignore[no-untyped-def]
    ongoing = {(r.topic, r.partition) for r in (await client(cluster).list_reassignments()).reassignments}
    current = (await partitions(cluster, topic))[(topic, partition)]
    return (topic, partition) not in ongoing and set(current.replicas) == replicas and not current.adding_replicas


async def test_reassignment_survives_controller_failover(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=2, brokers=3, controller_overrides=NO_REBALANCE)
    snap = await cluster.converged()
    assert (await create_topic(cluster, "f", assignment={0: [1, 2]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "f", [1, 2]), 30, what="online")
    await cluster.stop_node(cluster.broker(3))
    await submit_zk_plan(cluster, [("f", 0, [2, 3])])

    async def under_way() -> bool:
        return bool((await client(cluster).list_reassignments()).reassignments)

    await eventually(under_way, 30, what="the reassignment to start")
    cluster.kill(cluster.controller(snap.controller_id))
    await cluster.converged(min_epoch=snap.controller_epoch + 1, brokers=[1, 2])
    ongoing = (await client(cluster).list_reassignments()).reassignments
    assert [(r.topic, r.partition, list(r.adding_replicas)) for r in ongoing] == [("f", 0, [3])]
    cluster.start_node(cluster.broker(3))
    await eventually(lambda: reassignment_done(cluster, "f", 0, [2, 3]), 45, what="the new controller to finish")


async def test_invalid_plans_are_rejected_and_valid_entries_proceed(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=3, controller_overrides=NO_REBALANCE)
    await cluster.converged()
    assert (await create_topic(cluster, "p", assignment={0: [1, 2], 1: [1, 2]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "p", [1, 2]), 30, what="online")
    plan = {
        "version": 1,
        "partitions": [
            {"topic": "p", "partition": 0, "replicas": [2, 3]},  # valid
            {"topic": "nope", "partition": 0, "replicas": [1, 2]},  # unknown topic
            {"topic": "p", "partition": 9, "replicas": [1, 2]},  # unknown partition
            {"topic": "p", "partition": 1, "replicas": [1, 42]},  # unknown broker
            {"topic": "p", "partition": 1, "replicas": [1, 1]},  # duplicates
            {"topic": "p", "partition": 1, "replicas": []},  # empty
            {"topic": "p", "partition": "x", "replicas": [1]},  # malformed entry
        ],
    }
    zk = await cluster.zk()
    try:
        await zk.create(paths.REASSIGN_PARTITIONS, json.dumps(plan).encode())
        await eventually(lambda: reassignment_done(cluster, "p", 0, [2, 3]), 45, what="the valid entry to complete")

        async def plan_removed() -> bool:
            return await zk.exists(paths.REASSIGN_PARTITIONS) is None

        await eventually(plan_removed, 30, what="the plan znode to be emptied and removed")
        assert list((await partitions(cluster, "p"))[("p", 1)].replicas) == [1, 2]
        # A plan that is not JSON at all is removed too.
        await zk.create(paths.REASSIGN_PARTITIONS, b"{not json")
        await eventually(plan_removed, 30, what="the malformed plan to be removed")
    finally:
        await zk.close()
    log_text = (cluster.dir / "logs" / "controller-1.log").read_text()
    for reason in ("does not exist", "unknown brokers [42]", "duplicate replicas", "empty replica list", "not JSON"):
        assert reason in log_text, reason
    # The API answers the same problems with error codes.
    response = await client(cluster).alter_reassignments([("nope", 0, [1]), ("p", 1, [1, 42]), ("p", 1, [])])
    assert [p.error_code for p in response.partitions] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
    ]


# --- preferred and automatic election ----------------------------------------------------------


async def test_preferred_election_including_offline_preferred_replica(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=2, controller_overrides=NO_REBALANCE)
    await cluster.converged()
    assert (await create_topic(cluster, "pref", assignment={0: [1, 2]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "pref", [1, 2]), 30, what="online")
    await cluster.stop_node(cluster.broker(1))  # controlled shutdown moves leadership to 2
    assert (await partitions(cluster, "pref"))[("pref", 0)].leader == 2

    # Preferred replica offline: the ZooKeeper request is removed and the leader is unchanged.
    zk = await cluster.zk()
    try:
        await zk.create(
            paths.PREFERRED_REPLICA_ELECTION, b'{"version":1,"partitions":[{"topic":"pref","partition":0}]}'
        )

        async def request_removed() -> bool:
            return await zk.exists(paths.PREFERRED_REPLICA_ELECTION) is None

        await eventually(request_removed, 30, what="the preferred election request to be removed")
    finally:
        await zk.close()
    assert (await partitions(cluster, "pref"))[("pref", 0)].leader == 2
    result = await client(cluster).elect_leaders("preferred", [("pref", 0)])
    assert result.partitions[0].error_code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE

    cluster.start_node(cluster.broker(1))

    async def back_in_isr() -> bool:
        return 1 in (await partitions(cluster, "pref"))[("pref", 0)].isr

    await eventually(back_in_isr, 30, what="broker 1 to rejoin the ISR")
    elected = cli(cluster, "elect-leaders", "--election-type", "preferred", "--partition", "pref:0")
    assert elected.returncode == 0 and "pref-0: NONE (leader 1)" in elected.stdout, elected.stdout + elected.stderr
    # Back to back: the second is not needed.
    again = await client(cluster).elect_leaders("preferred", [("pref", 0)])
    assert again.partitions[0].error_code == ErrorCode.ELECTION_NOT_NEEDED
    unknown = await client(cluster).elect_leaders("preferred", [("ghost", 0)])
    assert unknown.partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    await eventually(lambda: brokers_agree_with_controller(cluster, "pref", [1, 2]), 30, what="agreement")


async def test_unclean_election_on_request(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=2, controller_overrides=NO_REBALANCE)
    await cluster.converged()
    assert (await create_topic(cluster, "u", assignment={0: [1, 2]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "u", [1, 2]), 30, what="online")
    import grpc

    from kcontroller.v1 import broker_pb2, broker_pb2_grpc

    async with grpc.aio.insecure_channel(cluster.broker(1)["grpc"]) as channel:
        await broker_pb2_grpc.BrokerControlStub(channel).SetReplicaLagging(
            broker_pb2.SetReplicaLaggingRequest(topic="u", partition=0, replica=2, lagging=True)
        )
    cluster.kill(cluster.broker(1))

    async def offline() -> bool:
        return (await partitions(cluster, "u"))[("u", 0)].leader == -1

    await eventually(offline, 30, what="u-0 to go offline")
    result = await client(cluster).elect_leaders("unclean", [("u", 0)])
    assert result.partitions[0].error_code == 0 and result.partitions[0].leader == 2
    again = await client(cluster).elect_leaders("unclean", [("u", 0)])
    assert again.partitions[0].error_code == ErrorCode.ELECTION_NOT_NEEDED


async def test_automatic_rebalance_after_a_broker_returns(cluster_factory) -> None:
    cluster = await cluster_factory(
        controllers=1, brokers=2, controller_overrides={"leader.imbalance.check.interval.seconds": "1"}
    )
    await cluster.converged()
    assert (await create_topic(cluster, "auto", assignment={0: [1, 2], 1: [1, 2]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "auto", [1, 2]), 30, what="online")
    cluster.kill(cluster.broker(1))

    async def led_by_2() -> bool:
        return all(p.leader == 2 for p in (await partitions(cluster, "auto")).values())

    await eventually(led_by_2, 30, what="broker 2 to lead everything")
    assert (await describe(cluster)).preferred_replica_imbalance_count == 2
    cluster.start_node(cluster.broker(1))

    async def rebalanced() -> bool:
        return all(p.leader == 1 for p in (await partitions(cluster, "auto")).values())

    await eventually(rebalanced, 45, what="the automatic rebalance to move leadership back to broker 1")
    assert (await describe(cluster)).preferred_replica_imbalance_count == 0
    elections = [
        r for r in cluster.records() if r["kind"] == "partition.leader_elected" and r["strategy"] == "preferred"
    ]
    assert len(elections) == 2


# --- controlled shutdown -----------------------------------------------------------------------


async def test_controlled_shutdown_of_each_broker_in_turn(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=3, controller_overrides=NO_REBALANCE)
    await cluster.converged()
    assert (await create_topic(cluster, "cs", assignment={0: [1, 2, 3]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "cs", [1, 2, 3]), 30, what="online")
    expected_leader = {1: 2, 2: 3}
    for broker_id in (1, 2):
        await cluster.stop_node(cluster.broker(broker_id))
        current = (await partitions(cluster, "cs"))[("cs", 0)]
        assert current.leader == expected_leader[broker_id], current
        records = cluster.records(f"broker-{broker_id}")
        assert any(r["kind"] == "broker.controlled_shutdown_succeeded" for r in records)
    # The last replica is told it still leads; it retries, then exits anyway.
    await cluster.stop_node(cluster.broker(3), timeout_s=30)
    records = cluster.records("broker-3")
    assert any(r["kind"] == "broker.controlled_shutdown_failed" for r in records)
    log_text = (cluster.dir / "logs" / "broker-3.log").read_text()
    assert "still leading 1 partitions" in log_text


async def test_controlled_shutdown_with_a_stale_broker_epoch_is_rejected(cluster_factory) -> None:
    import grpc

    cluster = await cluster_factory(controllers=1, brokers=2)
    snap = await cluster.converged()
    address = cluster.controller(snap.controller_id)["grpc"]
    async with grpc.aio.insecure_channel(address) as channel:
        stub = controller_pb2_grpc.ControllerStub(channel)
        stale = await stub.ControlledShutdown(
            controller_pb2.ControlledShutdownRequest(broker_id=1, broker_epoch=snap.brokers[1].broker_epoch - 1)
        )
        assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
        unknown = await stub.ControlledShutdown(controller_pb2.ControlledShutdownRequest(broker_id=9, broker_epoch=1))
        assert unknown.error_code == ErrorCode.BROKER_NOT_AVAILABLE
    # Nothing changed: broker 1 is not shutting down (it still gets leadership).
    assert (await create_topic(cluster, "after", assignment={0: [1, 2]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "after", [1, 2]), 30, what="online")
    assert (await partitions(cluster, "after"))[("after", 0)].leader == 1


# --- epoch lost mid-operation ------------------------------------------------------------------


async def test_controller_epoch_bumped_mid_operation_resigns_and_next_controller_finishes(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=2, brokers=3, controller_overrides=NO_REBALANCE)
    snap = await cluster.converged()
    assert (await create_topic(cluster, "mid", assignment={0: [1, 2]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "mid", [1, 2]), 30, what="online")
    await cluster.stop_node(cluster.broker(3))
    await submit_zk_plan(cluster, [("mid", 0, [1, 3])])  # waits for broker 3

    async def under_way() -> bool:
        return bool((await client(cluster).list_reassignments()).reassignments)

    await eventually(under_way, 30, what="the reassignment to start")
    zk = await cluster.zk()
    try:
        data, stat = await zk.get(paths.CONTROLLER_EPOCH)
        await zk.set_data(paths.CONTROLLER_EPOCH, data, stat.version)  # same epoch, new zkVersion
    finally:
        await zk.close()

    async def resigned() -> bool:
        return any(
            r["kind"] == "controller.resigned" and r["controller_epoch"] == snap.controller_epoch
            for r in cluster.records()
        )

    await eventually(resigned, 30, what="the controller to notice and resign")
    after = await cluster.converged(min_epoch=snap.controller_epoch + 1, brokers=[1, 2])
    assert after.controller_epoch == snap.controller_epoch + 1
    # Kafka's KafkaController gauges read 0 on every controller but the active one: the one that
    # resigned (whichever wins the re-election) no longer reports the pending reassignment.
    active_only = (
        "kafka_controller_kafkacontroller_activecontrollercount",
        "kafka_controller_kafkacontroller_reassigningpartitions",
        "kafka_controller_kafkacontroller_globalpartitioncount",
        "kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
    )

    (standby,) = (i for i in (1, 2) if i != after.controller_id)
    expected = {
        after.controller_id: (1, 1, 1, 0),  # active; 1 partition, its reassignment waits for broker 3
        standby: (0, 0, 0, 0),
    }

    async def gauges_follow_the_active_controller() -> bool:
        seen = {}
        for i in (1, 2):
            scraped = await asyncio.to_thread(scrape, cluster.controller(i)["metrics"])
            seen[i] = tuple(scraped[name] for name in active_only)
        assert seen == expected  # (eventually retries, and reports the last mismatch)
        return True

    await eventually(gauges_follow_the_active_controller, 20, what="active-only gauges on the active controller")
    cluster.start_node(cluster.broker(3))
    await eventually(lambda: reassignment_done(cluster, "mid", 0, [1, 3]), 45, what="the next controller to finish")
