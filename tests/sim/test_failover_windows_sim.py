"""Failover-window regressions on the simulated cluster: the real controller and broker code on
the ZooKeeper model, in one process. Each scenario places its fault in the window it names and
checks the cluster's safety invariants as it goes and its convergence at the end; each failed
before the fix it is named after (the failover-windows issue, section 1)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from broker_stub.isr import change_isr
from controller_svc.adapters.zk import codecs, paths
from controller_svc.common.model import BrokerInfo, EndPoint, TopicPartition
from controller_svc.controller import events as ev
from controller_svc.controller.partition_manager import PartitionManager
from kcontroller.v1 import common_pb2
from tests.sim.cluster import SimCluster

T0 = TopicPartition("t", 0)


async def converged(cluster: SimCluster, tp: TopicPartition, replicas: tuple[int, ...]) -> None:
    """The reassignment done as Kafka leaves it, and every live replica on the controller's state."""

    def done() -> bool:
        state = cluster.state_in_zookeeper(tp)
        active = cluster.active()
        return (
            active is not None
            and cluster.replicas_in_zookeeper(tp) == replicas
            and state is not None
            and set(state.isr) == set(replicas)
            and not active.context.partitions_being_reassigned
            and paths.REASSIGN_PARTITIONS not in cluster.model.nodes
            and all(
                cluster.brokers[b].state.roles.get(tp) is not None
                and cluster.brokers[b].state.roles[tp].leader_epoch == state.leader_epoch
                for b in replicas
            )
        )

    await cluster.until(done, what=f"{tp} on replicas {replicas}")
    cluster.safety()


async def test_plan_written_while_no_controller_runs_is_carried_out() -> None:
    """initializePartitionReassignments -> processZkPartitionReassignment."""
    cluster = SimCluster(brokers=4, auto_leader_rebalance_enable=False)
    try:
        await cluster.start_brokers()
        await cluster.start_controller(1)
        await cluster.create_topic("t", {0: [1, 2]})
        await cluster.until(lambda: cluster.state_in_zookeeper(T0) is not None, what="t-0 online")
        await cluster.stop_controller(1)
        assert paths.CONTROLLER not in cluster.model.nodes
        admin = await cluster.admin()
        plan = {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [3, 4]}]}
        await admin.create(paths.REASSIGN_PARTITIONS, json.dumps(plan).encode())
        await cluster.start_controller(2)
        await converged(cluster, T0, (3, 4))
    finally:
        await cluster.stop_all()


async def test_cancel_reverts_the_replicas_on_every_broker() -> None:
    """onPartitionReassignment's phase B for a cancel: LeaderAndIsr with the reverted set."""
    cluster = SimCluster(brokers=3, auto_leader_rebalance_enable=False)
    try:
        await cluster.start_brokers()
        controller = await cluster.start_controller(1)
        await cluster.create_topic("t", {0: [1, 2]})
        await cluster.until(lambda: cluster.state_in_zookeeper(T0) is not None, what="t-0 online")
        await cluster.brokers[3].kill()
        admin = await cluster.admin()
        plan = {"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [3, 2]}]}
        await admin.create(paths.REASSIGN_PARTITIONS, json.dumps(plan).encode())
        await cluster.until(lambda: bool(controller.context.partitions_being_reassigned), what="the move to start")
        await cluster.until(
            lambda: all(set(cluster.brokers[b].state.roles[T0].replicas) == {1, 2, 3} for b in (1, 2)),
            what="the brokers to see the move",
        )
        reply = asyncio.get_running_loop().create_future()
        await controller.submit(ev.ApiPartitionReassignment(reply=reply, requests=(("t", 0, None),)))
        reverted = cluster.replicas_in_zookeeper(T0)
        assert set(reverted) == {1, 2}
        await cluster.until(
            lambda: (
                all(cluster.brokers[b].state.roles[T0].replicas == reverted for b in (1, 2))
                and all(tuple(cluster.brokers[b].state.metadata[T0].replicas) == reverted for b in (1, 2))
            ),
            what="both replicas and their metadata to hold the reverted set",
        )
        cluster.safety()
    finally:
        await cluster.stop_all()


async def test_deletion_request_found_at_failover_with_deletion_disabled() -> None:
    """TopicDeletionManager.init with delete.topic.enable=false."""
    cluster = SimCluster(brokers=2, auto_leader_rebalance_enable=False, delete_topic_enable=False)
    try:
        await cluster.start_brokers()
        await cluster.start_controller(1)
        await cluster.create_topic("t", {0: [1, 2]})
        await cluster.until(lambda: cluster.state_in_zookeeper(T0) is not None, what="t-0 online")
        await cluster.stop_controller(1)
        admin = await cluster.admin()
        await admin.create(f"{paths.DELETE_TOPICS}/t")
        controller = await cluster.start_controller(2)
        await cluster.until(
            lambda: f"{paths.DELETE_TOPICS}/t" not in cluster.model.nodes, what="the request to be removed"
        )
        assert not controller.context.topics_to_be_deleted
        leader = cluster.state_in_zookeeper(T0).leader
        await cluster.brokers[leader].kill()
        await cluster.until(lambda: cluster.state_in_zookeeper(T0).leader not in (-1, leader), what="t-0 re-elected")
        cluster.safety()
    finally:
        await cluster.stop_all()


async def test_lost_reply_of_a_fenced_write_is_retried_and_its_requests_go_out() -> None:
    """A hung server: the broker failure's state write is applied but its reply lost; the
    retry on the same session meets a version conflict, re-reads, and the brokers still learn
    the new leader (retryRequestsUntilConnected)."""
    cluster = SimCluster(brokers=3, auto_leader_rebalance_enable=False)
    try:
        await cluster.start_brokers()
        controller = await cluster.start_controller(1)
        await cluster.create_topic("t", {0: [1, 2, 3]})
        await cluster.until(lambda: cluster.state_in_zookeeper(T0) is not None, what="t-0 online")
        before = cluster.state_in_zookeeper(T0)
        controller.zk.lose_next_write_replies(1)  # type: ignore[attr-defined]
        await cluster.brokers[before.leader].kill()

        def moved() -> bool:
            state = cluster.state_in_zookeeper(T0)
            return state.leader not in (-1, before.leader) and all(
                cluster.brokers[b].state.roles[T0].leader == state.leader
                and cluster.brokers[b].state.roles[T0].leader_epoch == state.leader_epoch
                for b in (1, 2, 3)
                if b != before.leader
            )

        await cluster.until(moved, what="the surviving replicas to follow the new leader")
        assert controller.is_active
        cluster.safety()
    finally:
        await cluster.stop_all()


async def test_a_dead_request_sender_makes_the_controller_resign_and_a_new_term_repairs_the_broker() -> None:
    """A background task of the term that dies (here the sender to broker 2) must not leave the
    controller running without it: the controller resigns and releases /controller (Kafka's
    triggerControllerMove), the next term opens new channels and the broker is served again."""
    cluster = SimCluster(brokers=3, auto_leader_rebalance_enable=False)
    try:
        await cluster.start_brokers()
        controller = await cluster.start_controller(1)
        await cluster.create_topic("t", {0: [1, 2]})
        await cluster.until(lambda: cluster.state_in_zookeeper(T0) is not None, what="t-0 online")
        first_epoch = controller.context.epoch
        first_term = controller.term
        cluster.sender_bugs[2] = 1
        await cluster.create_topic("u", {0: [2, 3]})  # a LeaderAndIsr for broker 2: its sender dies
        await cluster.until(lambda: controller.is_active and controller.context.epoch > first_epoch, what="a new term")
        assert first_term is not None and first_term.closed
        assert cluster.sender_bugs[2] == 0, "the fault did not land"
        u0 = TopicPartition("u", 0)
        await cluster.until(
            lambda: (
                cluster.brokers[2].state.roles.get(u0) is not None
                and cluster.brokers[2].state.controller_epoch == controller.context.epoch
            ),
            what="broker 2 served by the new term",
        )
        cluster.safety()
    finally:
        await cluster.stop_all()


async def test_create_topics_failing_part_way_brings_the_written_topics_online() -> None:
    """Item 4 (Kafka finds new topics by diffing ZooKeeper against its context): a topic whose
    znode was written is brought online although a later topic of the same request fails."""
    cluster = SimCluster(brokers=2, auto_leader_rebalance_enable=False)
    try:
        await cluster.start_brokers()
        controller = await cluster.start_controller(1)
        controller.zk.refused_prefixes.add(paths.topic_path("refused"))  # type: ignore[attr-defined]
        reply = asyncio.get_running_loop().create_future()
        results = await controller.submit(
            ev.CreateTopics(
                reply=reply,
                topics=(ev.NewTopic("written", 1, 2), ev.NewTopic("refused", 1, 2), ev.NewTopic("after", 1, 2)),
            )
        )
        codes = {r.name: r.error_code for r in results}
        assert codes["written"] == 0 and codes["after"] == 0 and codes["refused"] != 0, codes
        for topic in ("written", "after"):
            tp = TopicPartition(topic, 0)
            await cluster.until(
                lambda tp=tp: (
                    cluster.state_in_zookeeper(tp) is not None
                    and all(cluster.brokers[b].state.roles.get(tp) is not None for b in (1, 2))
                ),
                what=f"{topic} online on both replicas",
            )
        assert paths.topic_path("refused") not in cluster.model.nodes
        cluster.safety()
    finally:
        await cluster.stop_all()


async def test_unclean_permission_is_read_from_zookeeper_at_each_election() -> None:
    """Item 6 (Kafka reads the topic config at each election): a config enabling unclean
    election whose change notification the controller never saw still allows it."""
    cluster = SimCluster(brokers=2, auto_leader_rebalance_enable=False)
    try:
        await cluster.start_brokers()
        await cluster.start_controller(1)
        await cluster.create_topic("t", {0: [1, 2]})
        await cluster.until(
            lambda: cluster.state_in_zookeeper(T0) is not None and cluster.state_in_zookeeper(T0).isr == (1, 2),
            what="t-0 online with both replicas in sync",
        )
        await cluster.brokers[2].kill()
        await cluster.until(lambda: cluster.state_in_zookeeper(T0).isr == (1,), what="2 out of the ISR")
        admin = await cluster.admin()
        config = {"version": 1, "config": {"unclean.leader.election.enable": "true"}}
        await admin.create(f"{paths.CONFIG_TOPICS}/t", json.dumps(config).encode())  # no notification
        await admin.close()
        await cluster.brokers[1].kill()
        await cluster.until(lambda: cluster.state_in_zookeeper(T0).leader == -1, what="t-0 offline")
        await cluster.brokers[2].restart(cluster)
        await cluster.until(lambda: cluster.state_in_zookeeper(T0).leader == 2, what="an unclean election of 2")
        cluster.safety()
    finally:
        await cluster.stop_all()


async def test_a_lost_election_reply_leaves_the_winner_active() -> None:
    """Item 8 (KAFKA-13407's symptom): the election multi is applied but its reply lost; the
    controller resolves it by re-reading and is active, /controller naming its own session,
    with the epoch bumped once."""
    cluster = SimCluster(brokers=1, auto_leader_rebalance_enable=False)
    try:
        await cluster.start_brokers()
        controller = await cluster.start_controller(1, before_start=lambda zk: zk.lose_next_write_replies(1))
        await cluster.until(lambda: controller.is_active, what="the controller to be active")
        assert cluster.model.landed["write_reply_lost"] == 1, "the fault did not land"
        owner = cluster.model.nodes[paths.CONTROLLER].ephemeral_owner
        assert owner == controller.zk.session_id and controller.context.epoch == cluster.zk_epoch() == 1
    finally:
        await cluster.stop_all()


async def test_resignation_closes_the_term_and_the_next_term_holds_the_same_watches() -> None:
    """Item 9: resignation undoes all that failover set up; a second term holds exactly what
    the first held (before, every term stacked more watch callbacks)."""
    cluster = SimCluster(brokers=2, auto_leader_rebalance_enable=False)
    try:
        await cluster.start_brokers()
        controller = await cluster.start_controller(1)
        await cluster.create_topic("t", {0: [1, 2]})
        await cluster.until(lambda: cluster.state_in_zookeeper(T0) is not None, what="t-0 online")
        first_term, first_watches = controller.term, controller.zk.watch_counts()  # type: ignore[attr-defined]
        admin = await cluster.admin()
        await admin.set_data(paths.CONTROLLER_EPOCH, b"7")  # another party moves the epoch
        await admin.close()
        await cluster.until(
            lambda: controller.term is not None and controller.term is not first_term and controller.context.epoch == 8,
            what="a resignation and a new term",
        )
        assert first_term is not None and first_term.closed and first_term.channels is None
        await cluster.until(
            lambda: controller.events.current is None and controller.events.queue_size == 0, what="the queue to drain"
        )
        assert controller.zk.watch_counts() == first_watches  # type: ignore[attr-defined]
        cluster.safety()
    finally:
        await cluster.stop_all()


async def test_an_endpoint_change_keeps_the_broker_live_with_its_channel() -> None:
    """Item 11 (processBrokerModification): a broker whose registration changes its endpoint
    stays live (no failure, no bounce); its channel moves to the new endpoint and it keeps
    getting requests."""
    cluster = SimCluster(brokers=2, auto_leader_rebalance_enable=False)
    records: list[tuple[str, dict[str, Any]]] = []
    cluster.on_record = lambda _node, kind, fields: records.append((kind, fields))
    try:
        await cluster.start_brokers()
        controller = await cluster.start_controller(1)
        await cluster.create_topic("t", {0: [1, 2]})
        await cluster.until(lambda: cluster.state_in_zookeeper(T0) is not None, what="t-0 online")
        moved = BrokerInfo(2, (EndPoint("PLAINTEXT", "moved", 9999, "PLAINTEXT"),), None, -1)
        admin = await cluster.admin()
        await admin.set_data(paths.broker_path(2), codecs.encode_broker_registration(moved, 0))
        await admin.close()
        await cluster.until(
            lambda: controller.context.live_brokers[2].endpoints[0].port == 9999, what="the new endpoint"
        )
        changes = [f for kind, f in records if kind == "broker.change"]
        assert changes and all(not f["dead"] and not f["bounced"] for f in changes), changes
        assert changes[-1]["endpoints_changed"] == [2]
        leader = cluster.state_in_zookeeper(T0).leader
        await cluster.brokers[1 if leader == 1 else 2].kill()
        if leader == 1:
            await cluster.until(
                lambda: cluster.brokers[2].state.roles[T0].role == "leader", what="broker 2 told it leads"
            )
        cluster.safety()
    finally:
        await cluster.stop_all()


async def test_an_isr_change_made_while_the_new_controller_starts_reaches_every_broker() -> None:
    """Item 5 (onControllerFailover's order): the ISR-change notifications are cleared before
    the metadata load, so a change made while the new controller starts is either read by the
    load or seen as a new notification. The window: the new controller's first read of the
    notifications hangs, and the leader expands the ISR during it. Cleared after the load (as
    before), the load read the old ISR and the clear deleted the change's notification."""
    cluster = SimCluster(brokers=3, auto_leader_rebalance_enable=False)
    try:
        await cluster.start_brokers()
        await cluster.start_controller(1)
        standby = await cluster.start_controller(2)
        await cluster.create_topic("t", {0: [1, 2, 3]})
        await cluster.until(lambda: cluster.state_in_zookeeper(T0) is not None, what="t-0 online")
        await cluster.until(lambda: cluster.state_in_zookeeper(T0).isr == (1, 2, 3), what="every replica in sync")
        leader = cluster.brokers[cluster.state_in_zookeeper(T0).leader]
        follower = next(b for b in (1, 2, 3) if b != leader.broker_id)
        await change_isr(leader.zk, leader.state, T0, follower, lagging=True)  # type: ignore[arg-type]
        shrunk = tuple(b for b in (1, 2, 3) if b != follower)
        await cluster.until(
            lambda: all(tuple(b.state.metadata[T0].isr) == shrunk for b in cluster.brokers.values()),
            what="every broker to learn the shrunk ISR",
        )
        standby.zk.hang_next_read(paths.ISR_CHANGE_NOTIFICATION, 1.0)  # type: ignore[attr-defined]
        await cluster.stop_controller(1)
        await cluster.until(lambda: cluster.model.landed["next_read_hung"] == 1, what="the failover inside its window")
        await change_isr(leader.zk, leader.state, T0, follower, lagging=False)  # type: ignore[arg-type]
        assert set(cluster.state_in_zookeeper(T0).isr) == {1, 2, 3}
        await cluster.until(
            lambda: (
                standby.is_active
                and T0 in standby.context.partition_states
                and set(standby.context.partition_states[T0].isr) == {1, 2, 3}
                and all(set(b.state.metadata[T0].isr) == {1, 2, 3} for b in cluster.brokers.values())
            ),
            what="the new controller and every broker to know the expanded ISR",
        )
        cluster.safety()
    finally:
        await cluster.stop_all()


def _failovers(cluster: SimCluster) -> list[dict[str, Any]]:
    completed: list[dict[str, Any]] = []
    previous = cluster.on_record

    def observe(node: str, kind: str, fields: dict[str, Any]) -> None:
        if kind == "controller.failover_completed":
            completed.append(fields)
        if previous is not None:
            previous(node, kind, fields)

    cluster.on_record = observe
    return completed


async def _topic_t_online(cluster: SimCluster, partitions: int) -> list[TopicPartition]:
    """Brokers 1-3 and controller 1 running, topic t (every partition on 1, 2, 3) online."""
    await cluster.start_brokers()
    await cluster.start_controller(1)
    await cluster.create_topic("t", {p: [1, 2, 3] for p in range(partitions)})
    tps = [TopicPartition("t", p) for p in range(partitions)]
    await cluster.until(lambda: all(cluster.state_in_zookeeper(tp) is not None for tp in tps), what="t online")
    return tps


async def test_failover_sends_only_the_leader_and_isr_brokers_lack_and_repairs_what_they_missed() -> None:
    """Failover with DescribeReplicaEpochs (core/replica_epochs.py): a broker that missed the
    previous controller's LeaderAndIsr (one replica an epoch behind, one never received) gets
    exactly those; every replica a broker already holds at ZooKeeper's epoch is skipped. The
    same for UpdateMetadata, per topic: a broker whose cache missed an ISR change of t gets
    t's partition states again, and no broker gets those of u, which all of them hold."""
    cluster = SimCluster(brokers=3, auto_leader_rebalance_enable=False)
    completed = _failovers(cluster)
    try:
        tps = await _topic_t_online(cluster, 6)
        await cluster.create_topic("u", {0: [1, 2, 3], 1: [2, 3, 1]})
        u = [TopicPartition("u", 0), TopicPartition("u", 1)]

        def cached_as_in_zookeeper(broker_id: int, tp: TopicPartition) -> bool:
            cached, state = cluster.brokers[broker_id].state.metadata.get(tp), cluster.state_in_zookeeper(tp)
            return (
                cached is not None
                and state is not None
                and (cached.leader, cached.leader_epoch, tuple(cached.isr))
                == (state.leader, state.leader_epoch, tuple(state.isr))
            )

        def all_applied() -> bool:
            return all(
                cluster.state_in_zookeeper(tp) is not None
                and all(
                    cluster.brokers[b].state.roles.get(tp) is not None
                    and cluster.brokers[b].state.roles[tp].leader_epoch == cluster.state_in_zookeeper(tp).leader_epoch
                    for b in (1, 2, 3)
                )
                for tp in tps
            )

        await cluster.until(all_applied, what="every replica on its leader epoch")
        await cluster.until(
            lambda: all(cached_as_in_zookeeper(b, tp) for b in (1, 2, 3) for tp in [*tps, *u]),
            what="every broker's metadata cache current",
        )
        await cluster.start_controller(2)
        # What lost requests leave behind: broker 3 one epoch behind on t-1, without t-2, and
        # its metadata cache without the last ISR change of t-3.
        broker = cluster.brokers[3].state
        role = broker.roles[tps[1]]
        broker.roles[tps[1]] = role._replace(leader_epoch=role.leader_epoch - 1)
        del broker.roles[tps[2]]
        stale = common_pb2.PartitionState()
        stale.CopyFrom(broker.metadata[tps[3]])
        del stale.isr[-1]
        broker.metadata[tps[3]] = stale
        await cluster.stop_controller(1)
        await cluster.until(lambda: len(completed) == 2, what="controller 2's failover")
        failover = completed[-1]
        assert failover["brokers_reported"] == [1, 2, 3]
        assert (failover["leader_and_isr_sent"], failover["leader_and_isr_skipped"]) == (2, 22)
        # t's six states to broker 3; u's two and t's six to nobody else.
        assert (failover["metadata_states_sent"], failover["metadata_states_skipped"]) == (6, 18)
        await cluster.until(all_applied, what="broker 3 repaired")
        await cluster.until(lambda: cached_as_in_zookeeper(3, tps[3]), what="broker 3's metadata cache repaired")
        epoch = cluster.zk_epoch()
        assert all(b.state.controller_epoch == epoch and b.state.controller_id == 2 for b in cluster.brokers.values())
        cluster.safety()
    finally:
        await cluster.stop_all()


@pytest.mark.parametrize("enabled", [True, False])
async def test_failover_sends_every_leader_and_isr_to_a_broker_that_does_not_report(enabled: bool) -> None:
    """A broker whose answer does not come within failover.replica.epochs.timeout.ms (its
    requests are delayed) gets every LeaderAndIsr, as Kafka sends them; so does every broker
    when the feature is off."""
    cluster = SimCluster(
        brokers=3,
        auto_leader_rebalance_enable=False,
        failover_replica_epochs_enable=enabled,
        failover_replica_epochs_timeout_s=0.5,
    )
    completed = _failovers(cluster)
    try:
        await _topic_t_online(cluster, 4)
        await cluster.start_controller(2)
        slow = cluster.brokers[2].service.DescribeReplicaEpochs

        async def answer_late(request: Any, context: Any) -> Any:
            await asyncio.sleep(2.0)
            return await slow(request, context)

        cluster.brokers[2].service.DescribeReplicaEpochs = answer_late  # type: ignore[method-assign]
        await cluster.stop_controller(1)
        await cluster.until(lambda: len(completed) == 2, what="controller 2's failover")
        failover = completed[-1]
        if enabled:
            assert failover["brokers_reported"] == [1, 3]
            assert (failover["leader_and_isr_sent"], failover["leader_and_isr_skipped"]) == (4, 8)
            assert (failover["metadata_states_sent"], failover["metadata_states_skipped"]) == (4, 8)
        else:
            assert failover["brokers_reported"] == []
            assert (failover["leader_and_isr_sent"], failover["leader_and_isr_skipped"]) == (12, 0)
            assert (failover["metadata_states_sent"], failover["metadata_states_skipped"]) == (12, 0)
        cluster.safety()
    finally:
        await cluster.stop_all()


async def test_answers_that_came_in_time_count_when_the_start_up_outlasts_the_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The state machines' start-up runs while the brokers answer DescribeReplicaEpochs. At 1M
    partitions it outlasted the timeout and held the loop meanwhile, so every answer, although
    it had come in time, was dropped and 3M LeaderAndIsr were sent. The start-up now yields as
    it goes: here it takes (virtual) 2 s against a 0.5 s timeout, and the answers still count."""
    cluster = SimCluster(brokers=3, auto_leader_rebalance_enable=False, failover_replica_epochs_timeout_s=0.5)
    completed = _failovers(cluster)
    try:
        await _topic_t_online(cluster, 4)
        await cluster.start_controller(2)
        start_up = PartitionManager.initialize_state_machines
        slow_start_ups = []

        async def slow_start_up(self: PartitionManager) -> None:
            slow_start_ups.append(self.controller_id)
            for _ in range(20):
                await asyncio.sleep(0.1)
            await start_up(self)

        monkeypatch.setattr(PartitionManager, "initialize_state_machines", slow_start_up)
        await cluster.stop_controller(1)
        await cluster.until(lambda: len(completed) == 2, what="controller 2's failover")
        failover = completed[-1]
        assert slow_start_ups == [2]
        assert failover["replica_epochs_ms"] >= 2000
        assert failover["brokers_reported"] == [1, 2, 3]
        assert (failover["leader_and_isr_sent"], failover["leader_and_isr_skipped"]) == (0, 12)
        cluster.safety()
    finally:
        await cluster.stop_all()


async def test_a_broker_without_the_question_still_gets_its_requests_at_failover() -> None:
    """A broker that cannot answer DescribeReplicaEpochs (an older version: UNIMPLEMENTED)
    must not hold up its queue: the question gets one attempt, then the broker gets the
    UpdateMetadata and every LeaderAndIsr behind it (a retried question would block them for
    ever)."""
    cluster = SimCluster(brokers=3, auto_leader_rebalance_enable=False)
    completed = _failovers(cluster)
    try:
        await _topic_t_online(cluster, 4)
        await cluster.start_controller(2)

        async def unimplemented(request: Any, context: Any) -> Any:
            raise NotImplementedError("DescribeReplicaEpochs: UNIMPLEMENTED")

        cluster.brokers[2].service.DescribeReplicaEpochs = unimplemented  # type: ignore[method-assign]
        await cluster.stop_controller(1)
        await cluster.until(lambda: len(completed) == 2, what="controller 2's failover")
        failover = completed[-1]
        assert failover["brokers_reported"] == [1, 3]
        assert (failover["leader_and_isr_sent"], failover["leader_and_isr_skipped"]) == (4, 8)
        assert (failover["metadata_states_sent"], failover["metadata_states_skipped"]) == (4, 8)
        epoch = cluster.zk_epoch()
        await cluster.until(
            lambda: (
                cluster.brokers[2].state.controller_epoch == epoch
                and cluster.brokers[2].state.update_metadata_count >= 2
            ),
            what="broker 2 on the new controller's epoch and metadata",
        )
        cluster.safety()
    finally:
        await cluster.stop_all()
