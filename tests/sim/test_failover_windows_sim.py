"""Failover-window regressions on the simulated cluster: the real controller and broker code on
the ZooKeeper model, in one process. Each scenario places its fault in the window it names and
checks the cluster's safety invariants as it goes and its convergence at the end; each failed
before the fix it is named after (the failover-windows issue, section 1)."""

from __future__ import annotations

import asyncio
import json

from controller_svc.adapters.zk import paths
from controller_svc.common.model import TopicPartition
from controller_svc.controller import events as ev
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
            lambda: all(
                set(cluster.brokers[b].state.roles[T0].replicas) == {1, 2, 3} for b in (1, 2)
            ),
            what="the brokers to see the move",
        )
        reply = asyncio.get_running_loop().create_future()
        await controller.submit(ev.ApiPartitionReassignment(reply=reply, requests=(("t", 0, None),)))
        reverted = cluster.replicas_in_zookeeper(T0)
        assert set(reverted) == {1, 2}
        await cluster.until(
            lambda: all(cluster.brokers[b].state.roles[T0].replicas == reverted for b in (1, 2))
            and all(tuple(cluster.brokers[b].state.metadata[T0].replicas) == reverted for b in (1, 2)),
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
        await cluster.until(
            lambda: cluster.state_in_zookeeper(T0).leader not in (-1, leader), what="t-0 re-elected"
        )
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
        await cluster.until(
            lambda: controller.is_active and controller.context.epoch > first_epoch, what="a new term"
        )
        assert first_term is not None and first_term.closed
        assert cluster.sender_bugs[2] == 0, "the fault did not land"
        u0 = TopicPartition("u", 0)
        await cluster.until(
            lambda: cluster.brokers[2].state.roles.get(u0) is not None
            and cluster.brokers[2].state.controller_epoch == controller.context.epoch,
            what="broker 2 served by the new term",
        )
        cluster.safety()
    finally:
        await cluster.stop_all()
