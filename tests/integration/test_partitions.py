"""Issue 3: partition leadership on real ZooKeeper, real processes, real gRPC."""

from __future__ import annotations

import asyncio
import json
import re
import signal

import grpc
import pytest

from controller_svc.adapters.zk import paths
from controller_svc.common.errors import ErrorCode
from kcontroller.v1 import broker_pb2, broker_pb2_grpc
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


async def broker_stub(cluster, broker_id: int):  # type: ignore[no-untyped-def]
    channel = grpc.aio.insecure_channel(cluster.broker(broker_id)["grpc"])
    return channel, broker_pb2_grpc.BrokerControlStub(channel)


async def test_topic_creation_with_all_brokers_live(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=2, brokers=3)
    await cluster.converged()
    result = await create_topic(cluster, "orders", partitions=6, replication_factor=3)
    assert result.error_code == 0 and len(result.assignments) == 6
    # Round robin: every broker leads two partitions and holds all six.
    leaders = [a.replicas[0] for a in result.assignments]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]

    await eventually(
        lambda: brokers_agree_with_controller(cluster, "orders", [1, 2, 3]),
        30,
        what="brokers to apply the new partitions",
    )
    current = await partitions(cluster, "orders")
    for description in current.values():
        assert description.leader == description.replicas[0] and description.leader_epoch == 0
        assert list(description.isr) == list(description.replicas)
    zk = await cluster.zk()
    try:
        topic, _ = await zk.get(paths.topic_path("orders"))
        state, _ = await zk.get(paths.partition_state_path("orders", 0))
    finally:
        await zk.close()
    znode = json.loads(topic)
    assert znode["version"] == 3 and re.fullmatch(r"[A-Za-z0-9_-]{22}", znode["topic_id"])
    assert znode["adding_replicas"] == {} and znode["removing_replicas"] == {}
    expected = current[("orders", 0)]
    assert state == (
        b'{"controller_epoch":1,"leader":%d,"version":1,"leader_epoch":0,"isr":[%s]}'
        % (expected.leader, ",".join(map(str, expected.isr)).encode())
    )
    # Every broker's metadata cache has all partitions.
    for broker_id in (1, 2, 3):
        description = await cluster.describe_broker(broker_id)
        assert description is not None and len(description.metadata_partitions) == 6
    records = [r for r in cluster.records() if r["kind"] == "partition.leader_elected"]
    assert len(records) == 6 and all(r["strategy"] == "new" and not r["unclean"] for r in records)


async def test_topic_written_by_a_zookeeper_tool_with_one_broker_down(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=3)
    await cluster.converged()
    await cluster.stop_node(cluster.broker(3))
    zk = await cluster.zk()
    try:
        # Exactly what Kafka 2.x's kafka-topics.sh --zookeeper writes (version 1 JSON).
        await zk.create(paths.topic_path("tool"), b'{"version":1,"partitions":{"0":[3,1,2],"1":[1,2,3]}}')

        async def online() -> bool:
            current = await partitions(cluster, "tool")
            return len(current) == 2 and all(p.leader >= 0 for p in current.values())

        await eventually(online, 30, what="the tool-created topic to come online")
        current = await partitions(cluster, "tool")
        assert current[("tool", 0)].leader == 1 and list(current[("tool", 0)].isr) == [1, 2]
        assert current[("tool", 1)].leader == 1 and list(current[("tool", 1)].isr) == [1, 2]
        assert list(current[("tool", 0)].offline_replicas) == [3]

        # The RPC refuses a replication factor above the live broker count.
        refused = await create_topic(cluster, "too-wide", partitions=1, replication_factor=3)
        assert refused.error_code == ErrorCode.INVALID_REPLICATION_FACTOR

        # Broker 3 returns: it becomes a follower of both partitions.
        cluster.start_node(cluster.broker(3))

        async def broker3_follows() -> bool:
            mine = await roles(cluster, 3)
            return all(mine.get(("tool", p)) is not None and mine[("tool", p)].role == "follower" for p in (0, 1))

        await eventually(broker3_follows, 30, what="broker 3 to follow its partitions")
    finally:
        await zk.close()


async def test_partition_expansion_by_rewriting_the_topic_znode(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=3)
    await cluster.converged()
    assert (await create_topic(cluster, "grow", partitions=2, replication_factor=2)).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "grow", [1, 2, 3]), 30, what="grow online")
    zk = await cluster.zk()
    try:
        data, stat = await zk.get(paths.topic_path("grow"))
        znode = json.loads(data)
        znode["partitions"]["2"] = [3, 1]
        znode["partitions"]["3"] = [1, 2]
        await zk.set_data(paths.topic_path("grow"), json.dumps(znode).encode(), stat.version)
    finally:
        await zk.close()

    async def grown() -> bool:
        current = await partitions(cluster, "grow")
        return len(current) == 4 and current[("grow", 2)].leader == 3 and current[("grow", 3)].leader == 1

    await eventually(grown, 30, what="the new partitions to get leaders")
    await eventually(lambda: brokers_agree_with_controller(cluster, "grow", [1, 2, 3]), 30, what="brokers to agree")


async def test_kill9_of_a_leading_broker_moves_leadership_within_the_isr(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=2, brokers=3)
    await cluster.converged()
    assert (await create_topic(cluster, "t", partitions=6, replication_factor=3)).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "t", [1, 2, 3]), 30, what="t online")
    before = await partitions(cluster, "t")
    led_by_2 = {k for k, p in before.items() if p.leader == 2}
    assert led_by_2
    cluster.kill(cluster.broker(2))

    async def moved() -> bool:
        current = await partitions(cluster, "t")
        return all(p.leader in (1, 3) and 2 not in p.isr for p in current.values())

    await eventually(moved, 30, what="leaders to move off broker 2")
    after = await partitions(cluster, "t")
    for key in led_by_2:
        assert after[key].leader in before[key].isr
        assert after[key].leader_epoch == before[key].leader_epoch + 1
    await eventually(lambda: brokers_agree_with_controller(cluster, "t", [1, 3]), 30, what="brokers 1, 3 to agree")
    elections = [r for r in cluster.records() if r["kind"] == "partition.leader_elected" and r["strategy"] == "offline"]
    assert {(r["topic"], r["partition"]) for r in elections} == led_by_2
    assert not any(r["unclean"] for r in elections)

    # Broker 2 returns, follows, catches up and rejoins every ISR (the leaders expand them).
    cluster.start_node(cluster.broker(2))

    async def rejoined() -> bool:
        current = await partitions(cluster, "t")
        return all(2 in p.isr for p in current.values())

    await eventually(rejoined, 30, what="broker 2 to rejoin the ISRs")
    await eventually(lambda: brokers_agree_with_controller(cluster, "t", [1, 2, 3]), 30, what="agreement")
    leader_epochs_never_regress(cluster.records())


async def test_whole_isr_down_goes_offline_then_comes_back(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=3)
    await cluster.converged()
    assert (await create_topic(cluster, "solo", assignment={0: [2, 3], 1: [1, 3]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "solo", [1, 2, 3]), 30, what="solo online")
    cluster.kill(cluster.broker(2))
    cluster.kill(cluster.broker(3))

    async def offline() -> bool:
        current = await partitions(cluster, "solo")
        return current[("solo", 0)].leader == -1 and (await describe(cluster)).offline_partition_count == 1

    await eventually(offline, 30, what="partition 0 to go offline")
    current = await partitions(cluster, "solo")
    # The last ISR member is kept (Kafka keeps a one-member ISR when its replica goes offline).
    assert len(current[("solo", 0)].isr) == 1 and current[("solo", 0)].isr[0] in (2, 3)
    assert current[("solo", 1)].leader == 1
    last_isr = current[("solo", 0)].isr[0]
    offline_records = [r for r in cluster.records() if r["kind"] == "partition.offline"]
    assert any(r["topic"] == "solo" and r["partition"] == 0 for r in offline_records)

    cluster.start_node(cluster.broker(last_isr))

    async def back() -> bool:
        p = (await partitions(cluster, "solo"))[("solo", 0)]
        return p.leader == last_isr and (await describe(cluster)).offline_partition_count == 0

    await eventually(back, 30, what="partition 0 to come back with its last ISR member")
    await eventually(lambda: brokers_agree_with_controller(cluster, "solo", [1, last_isr]), 30, what="agreement")
    leader_epochs_never_regress(cluster.records())


async def test_unclean_election_only_when_enabled_for_the_topic(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=2)
    await cluster.converged()
    assert (await create_topic(cluster, "risky", assignment={0: [1, 2]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "risky", [1, 2]), 30, what="risky online")
    channel, stub = await broker_stub(cluster, 1)
    async with channel:
        shrunk = await stub.SetReplicaLagging(
            broker_pb2.SetReplicaLaggingRequest(topic="risky", partition=0, replica=2, lagging=True)
        )
    assert shrunk.error_code == 0 and list(shrunk.isr) == [1]
    await eventually(lambda: _isr_is(cluster, "risky", 0, [1]), 30, what="the controller to learn the shrunk ISR")
    cluster.kill(cluster.broker(1))

    async def offline() -> bool:
        return (await partitions(cluster, "risky"))[("risky", 0)].leader == -1

    await eventually(offline, 30, what="risky-0 to go offline (2 is not in the ISR)")
    await asyncio.sleep(1)
    assert (await partitions(cluster, "risky"))[("risky", 0)].leader == -1  # no unclean election by default

    zk = await cluster.zk()
    try:
        # What kafka-configs.sh --zookeeper --alter does: rewrite the config, announce the change.
        await zk.set_data(
            f"{paths.CONFIG_TOPICS}/risky", b'{"version":1,"config":{"unclean.leader.election.enable":"true"}}'
        )
        await zk.create(
            f"{paths.CONFIG_CHANGES}/config_change_", b'{"version":2,"entity_path":"topics/risky"}', sequential=True
        )
    finally:
        await zk.close()

    async def unclean_leader() -> bool:
        p = (await partitions(cluster, "risky"))[("risky", 0)]
        return p.leader == 2 and list(p.isr) == [2]

    await eventually(unclean_leader, 30, what="an unclean election of broker 2")
    elections = [r for r in cluster.records() if r["kind"] == "partition.leader_elected" and r["topic"] == "risky"]
    assert elections[-1]["unclean"] is True and elections[-1]["prev_isr"] == [1]
    await eventually(lambda: brokers_agree_with_controller(cluster, "risky", [2]), 30, what="broker 2 to lead")
    # UncleanLeaderElectionsPerSec, named as the JMX exporter names a Meter's Count.
    active = await cluster.snapshot()
    scraped = await asyncio.to_thread(scrape, cluster.controller(active.controller_id)["metrics"])
    assert scraped["kafka_controller_controllerstats_uncleanleaderelections_total"] == 1


async def test_fast_broker_bounce_is_detected_and_reinitialised(cluster_factory) -> None:
    # No controlled shutdown: it would wait for the paused controller. A long session timeout:
    # the pause must stay well inside it for the restart to be a bounce (asserted below).
    cluster = await cluster_factory(
        controllers=1,
        brokers=3,
        broker_overrides={"controlled.shutdown.enable": "false"},
        session_timeout_ms=12000,
    )
    snap = await cluster.converged()
    assert (await create_topic(cluster, "b", partitions=3, replication_factor=3)).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "b", [1, 2, 3]), 30, what="b online")
    controller = cluster.controller(snap.controller_id)
    # Pause the controller (shorter than its session timeout) while broker 2 restarts, so the
    # controller's next look at /brokers/ids sees the same id with a higher czxid.
    cluster.signal(controller, signal.SIGSTOP)
    try:
        await cluster.stop_node(cluster.broker(2))
        cluster.start_node(cluster.broker(2))

        async def reregistered() -> bool:
            d = await cluster.describe_broker(2)
            return d is not None and d.registered

        await eventually(reregistered, 10, what="broker 2 to re-register")
    finally:
        cluster.signal(controller, signal.SIGCONT)

    async def bounced() -> bool:
        return any(r["kind"] == "broker.change" and r["bounced"] == [2] for r in cluster.records())

    await eventually(bounced, 30, what="the controller to see broker 2 bounce")
    await eventually(
        lambda: brokers_agree_with_controller(cluster, "b", [1, 2, 3]),
        30,
        what="the bounced broker to be re-initialised with its partitions",
    )
    d = await cluster.describe_broker(2)
    assert d is not None and d.broker_epoch > snap.brokers[2].broker_epoch and len(d.roles) == 3


async def test_isr_shrink_and_expand_through_notifications(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=3)
    await cluster.converged()
    assert (await create_topic(cluster, "isr", assignment={0: [1, 2, 3]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "isr", [1, 2, 3]), 30, what="isr online")
    channel, stub = await broker_stub(cluster, 1)
    async with channel:
        shrunk = await stub.SetReplicaLagging(
            broker_pb2.SetReplicaLaggingRequest(topic="isr", partition=0, replica=3, lagging=True)
        )
        assert shrunk.error_code == 0 and list(shrunk.isr) == [1, 2]
        await eventually(lambda: _isr_is(cluster, "isr", 0, [1, 2]), 30, what="controller sees the shrink")
        await eventually(
            lambda: _metadata_isr_is(cluster, [1, 2, 3], "isr", 0, [1, 2]),
            30,
            what="every broker's metadata to show the shrunk ISR",
        )
        expanded = await stub.SetReplicaLagging(
            broker_pb2.SetReplicaLaggingRequest(topic="isr", partition=0, replica=3, lagging=False)
        )
        assert expanded.error_code == 0 and list(expanded.isr) == [1, 2, 3]
        await eventually(
            lambda: _metadata_isr_is(cluster, [1, 2, 3], "isr", 0, [1, 2, 3]),
            30,
            what="every broker's metadata to show the expanded ISR",
        )
        # A follower cannot change the ISR.
        channel2, stub2 = await broker_stub(cluster, 2)
        async with channel2:
            refused = await stub2.SetReplicaLagging(
                broker_pb2.SetReplicaLaggingRequest(topic="isr", partition=0, replica=3, lagging=True)
            )
        assert refused.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

    async def notifications_consumed() -> bool:
        zk = await cluster.zk()
        try:
            return not await zk.get_children(paths.ISR_CHANGE_NOTIFICATION)
        finally:
            await zk.close()

    await eventually(notifications_consumed, 30, what="the controller to delete the ISR notifications")


async def test_log_dir_failure_moves_replicas_offline(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=3)
    await cluster.converged()
    assert (await create_topic(cluster, "disk", partitions=12, replication_factor=2)).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "disk", [1, 2, 3]), 30, what="disk online")
    description = await cluster.describe_broker(1)
    assert description is not None
    on_dir0 = {(r.topic, r.partition) for r in description.roles if r.log_dir == description.log_dirs[0]}
    assert on_dir0, "the hash spreads twelve partitions over both log dirs"
    channel, stub = await broker_stub(cluster, 1)
    async with channel:
        failed = await stub.FailLogDir(broker_pb2.FailLogDirRequest(log_dir=description.log_dirs[0]))
        assert failed.error_code == 0
        bad = await stub.FailLogDir(broker_pb2.FailLogDirRequest(log_dir="no-such-dir"))
        assert bad.error_code == ErrorCode.INVALID_REQUEST

    async def moved() -> bool:
        current = await partitions(cluster, "disk")
        return all(1 not in current[k].isr and current[k].leader != 1 for k in on_dir0)

    await eventually(moved, 30, what="replicas on the failed dir to leave the ISR and leadership")
    current = await partitions(cluster, "disk")
    for key in on_dir0:
        assert current[key].leader >= 0, f"{key} should have a leader on its other replica"
    # Replicas on the healthy dir of broker 1 are untouched.
    healthy = {(r.topic, r.partition) for r in description.roles} - on_dir0
    assert all(1 in current[k].isr for k in healthy)


async def test_controller_killed_while_moving_leaders_converges(cluster_factory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The controller dies between the two writes of a broker failure (Kafka's onBrokerFailure:
    new leaders for the partitions the broker led, then the broker out of the other ISRs). It
    stops itself right there (debug.self.stop.dir) and is killed while stopped, so the fault
    lands in the middle every time; the next controller finishes the move."""
    stops = tmp_path / "stops"
    stops.mkdir()
    cluster = await cluster_factory(controllers=2, brokers=3, controller_overrides={"debug.self.stop.dir": str(stops)})
    snap = await cluster.converged()
    assert (await create_topic(cluster, "many", partitions=150, replication_factor=3)).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "many", [1, 2, 3]), 60, what="many online")
    before = await partitions(cluster, "many")
    led_by_3 = {tp for tp, p in before.items() if p.leader == 3}
    followed_by_3 = {tp for tp, p in before.items() if p.leader != 3 and 3 in p.isr}
    assert led_by_3 and followed_by_3
    controller = cluster.controller(snap.controller_id)
    # Let the first partition-state write go (the new leaders), stop before the second.
    (stops / f"controller-{controller['id']}.before-fenced-write").write_text("skip=1 match=/state")
    cluster.kill(cluster.broker(3))

    async def stopped_in_the_middle() -> bool:
        return any(r["kind"] == "debug.self_stop" for r in cluster.records(f"controller-{controller['id']}"))

    await eventually(stopped_in_the_middle, 30, what="the controller to stop between its two writes")
    zk = await cluster.zk()
    try:
        states = {}
        for topic, partition in before:
            data, _stat = await zk.get(paths.partition_state_path(topic, partition))
            states[(topic, partition)] = json.loads(data)
    finally:
        await zk.close()
    # In the middle: every partition broker 3 led has a new leader, and the ISRs it followed
    # in still name it.
    assert all(states[tp]["leader"] in (1, 2) for tp in led_by_3)
    assert all(3 in states[tp]["isr"] for tp in followed_by_3)
    cluster.kill(controller)  # SIGKILL ends a stopped process too

    async def converged() -> bool:
        current = await partitions(cluster, "many")
        return len(current) == 150 and all(p.leader in (1, 2) and 3 not in p.isr for p in current.values())

    await eventually(converged, 60, what="the next controller to finish moving leaders")
    await eventually(lambda: brokers_agree_with_controller(cluster, "many", [1, 2]), 60, what="brokers to agree")
    assert (await describe(cluster)).controller_epoch == snap.controller_epoch + 1
    leader_epochs_never_regress(cluster.records())


async def _isr_is(cluster, topic: str, partition: int, isr: list[int]) -> bool:  # type: ignore[no-untyped-def]
    return list((await partitions(cluster, topic))[(topic, partition)].isr) == isr


async def _metadata_isr_is(cluster, brokers: list[int], topic: str, partition: int, isr: list[int]) -> bool:  # type: ignore[no-untyped-def]
    for broker_id in brokers:
        d = await cluster.describe_broker(broker_id)
        if d is None:
            return False
        match = [p for p in d.metadata_partitions if p.topic == topic and p.partition == partition]
        if not match or list(match[0].isr) != isr:
            return False
    return True
