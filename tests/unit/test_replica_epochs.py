"""The failover's differential LeaderAndIsr: what a broker reports (DescribeReplicaEpochs,
broker_stub/replica_manager.py) and the rule that skips a request it would refuse
(core/replica_epochs.py)."""

from __future__ import annotations

import random

import pytest

from broker_stub import fencing, replica_manager
from broker_stub.state import BrokerState, PartitionRole
from controller_svc.common.errors import ErrorCode
from controller_svc.common.model import LeaderIsrAndControllerEpoch, TopicPartition
from controller_svc.controller.replica_state_machine import ReplicaState, ReplicaStateMachine
from controller_svc.core.context import topic_replica_keys
from controller_svc.core.replica_epochs import already_held, held_epochs
from controller_svc.core.request_batch import RequestBatch
from kcontroller.v1 import broker_pb2
from tests.unit.fakes import FakePartitionStore, context, null_log


def _role(role: str, leader_epoch: int) -> PartitionRole:
    return PartitionRole(role, 1, leader_epoch, (1, 2), (1, 2), 3)


def _ask(controller_epoch: int, broker_epoch: int = 50) -> broker_pb2.DescribeReplicaEpochsRequest:
    return broker_pb2.DescribeReplicaEpochsRequest(
        controller_id=2, controller_epoch=controller_epoch, broker_epoch=broker_epoch
    )


def test_a_broker_reports_its_leader_and_follower_epochs_and_adopts_the_new_controller() -> None:
    state = BrokerState(broker_id=1, broker_epoch=50, controller_epoch=3, controller_id=1)
    state.roles = {
        TopicPartition("a", 0): _role("leader", 7),
        TopicPartition("a", 2): _role("follower", 4),
        TopicPartition("b", 1): _role("stopped", 9),  # a stopped replica gets its LeaderAndIsr again
        TopicPartition("c", 0): _role("deleted", 2),
    }
    result, answer = replica_manager.apply_describe_replica_epochs(state, _ask(4))
    assert result.error == ErrorCode.NONE
    assert held_epochs(answer.topics) == {"a": {0: 7, 2: 4}}
    assert (state.controller_epoch, state.controller_id) == (4, 2)
    # From now on the previous controller's requests are refused: what was reported stands.
    assert fencing.check_control_request(state.controller_epoch, state.broker_epoch, 3, 50) == (
        ErrorCode.STALE_CONTROLLER_EPOCH
    )


def test_replicas_on_a_failed_log_dir_are_not_reported() -> None:
    state = BrokerState(broker_id=1, broker_epoch=50, log_dirs=("/d1", "/d2"))
    tps = [TopicPartition("a", p) for p in range(8)]
    state.roles = {tp: _role("leader", 1) for tp in tps}
    state.offline_log_dirs = {"/d1"}
    _result, answer = replica_manager.apply_describe_replica_epochs(state, _ask(1))
    reported = held_epochs(answer.topics).get("a", {})
    assert set(reported) == {tp.partition for tp in tps if not state.is_on_offline_dir(tp)}
    assert len(reported) < len(tps)


def test_a_stale_question_is_refused_and_changes_nothing() -> None:
    state = BrokerState(broker_id=1, broker_epoch=50, controller_epoch=5, controller_id=3)
    state.roles = {TopicPartition("a", 0): _role("leader", 7)}
    for request, error in ((_ask(4), ErrorCode.STALE_CONTROLLER_EPOCH), (_ask(6, 49), ErrorCode.STALE_BROKER_EPOCH)):
        result, answer = replica_manager.apply_describe_replica_epochs(state, request)
        assert result.error == error and answer.topics == [] and answer.metadata_digests == []
        assert (state.controller_epoch, state.controller_id) == (5, 3)


def test_only_a_leader_and_isr_the_broker_would_refuse_is_skipped() -> None:
    reported = {1: {"a": {0: 7, 1: 3}}}
    assert already_held(reported, 1, "a", 0, 7)  # same epoch: refused by the broker
    assert already_held(reported, 1, "a", 0, 6)
    assert not already_held(reported, 1, "a", 1, 4)  # behind: it missed a request
    assert not already_held(reported, 1, "a", 2, 0)  # not held at all
    assert not already_held(reported, 1, "b", 0, 0)
    assert not already_held(reported, 2, "a", 0, 7)  # a broker that did not report
    # The rule is the broker's own refusal rule.
    role = _role("leader", 7)
    for leader_epoch in (6, 7, 8):
        refused = fencing.check_leader_and_isr_partition(1, role.replicas, role.leader_epoch, leader_epoch) != (
            ErrorCode.NONE
        )
        assert refused == already_held(reported, 1, "a", 0, leader_epoch)


@pytest.mark.parametrize("seed", range(40))
async def test_the_failover_sends_exactly_what_the_rule_does_not_skip(seed: int) -> None:
    """ReplicaStateMachine.resend_online (the rule inlined, per topic) against the rule itself
    over the state machine's own states: random assignments, leader epochs, reports (missing,
    behind, equal, ahead, a broker that did not answer, a broker holding everything), dead,
    shutting-down brokers and failed log dirs (which take replicas out of Online), with and
    without a warm standby's keys (which take the per-broker comparison)."""
    rng = random.Random(seed)
    brokers = [1, 2, 3, 4, 5]
    assignments = {
        f"t{t}": {p: rng.sample(brokers, 3) for p in range(rng.randrange(1, 8))} for t in range(rng.randrange(1, 6))
    }
    # Half the runs without dead or shutting-down brokers and failed log dirs: those keep every
    # replica Online, where the standby's keys count.
    faults = rng.random() < 0.5
    live = [b for b in brokers if not faults or rng.random() < 0.85]
    ctx = context(live, assignments)
    if faults and rng.random() < 0.3 and live:
        ctx.shutting_down_broker_ids.add(rng.choice(live))
    for topic, parts in assignments.items():
        for partition, replicas in parts.items():
            tp = TopicPartition(topic, partition)
            if rng.random() < 0.95:
                ctx.partition_states[tp] = LeaderIsrAndControllerEpoch(
                    replicas[0], rng.randrange(0, 5), tuple(replicas), 0, 3
                )
            if faults and rng.random() < 0.1:
                ctx.replicas_on_offline_dirs.setdefault(rng.choice(replicas), set()).add(tp)
    reported: dict[int, dict[str, dict[int, int]]] = {}
    for broker_id in live:
        if rng.random() < 0.2:
            continue  # did not answer
        if rng.random() < 0.5:  # holds every leader epoch, some of them ahead
            reported[broker_id] = {
                topic: {
                    p: (state.leader_epoch if (state := ctx.partition_states.get(TopicPartition(topic, p))) else 0)
                    + (rng.random() < 0.1)
                    for p, replicas in parts.items()
                    if broker_id in replicas
                }
                for topic, parts in assignments.items()
            }
            continue
        reported[broker_id] = {
            topic: {
                p: rng.randrange(-1, 6) for p, replicas in parts.items() if broker_id in replicas and rng.random() < 0.8
            }
            for topic, parts in assignments.items()
            if rng.random() < 0.9
        }
    if rng.random() < 0.6:
        ctx.replica_keys_hint = {t: topic_replica_keys(t, parts) for t, parts in ctx.assignments.items()}
    batch = RequestBatch(9, ctx)
    rsm = ReplicaStateMachine(ctx, FakePartitionStore(), batch, null_log(), 9)
    await rsm.initialize()
    not_online = sorted(r for r, s in rsm.states.items() if s is not ReplicaState.ONLINE)
    assert sorted(rsm.take_initially_offline()) == not_online
    expected = {
        (replica.replica, replica.tp)
        for replica, state in rsm.states.items()
        if state is ReplicaState.ONLINE
        and (partition_state := ctx.partition_states.get(replica.tp)) is not None
        and not already_held(
            reported, replica.replica, replica.tp.topic, replica.tp.partition, partition_state.leader_epoch
        )
    }
    batch.new_batch()
    sent, skipped = await rsm.resend_online(reported, chunk=2)
    got = {(broker_id, tp) for broker_id, entries in batch.leader_and_isr.items() for tp in entries}
    batch.clear()
    assert got == expected
    assert sent == len(expected)
    online_with_state = sum(
        1 for r, s in rsm.states.items() if s is ReplicaState.ONLINE and r.tp in ctx.partition_states
    )
    assert skipped == online_with_state - sent
