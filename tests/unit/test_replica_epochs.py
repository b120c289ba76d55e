"""The failover's differential LeaderAndIsr: what a broker reports (DescribeReplicaEpochs,
broker_stub/replica_manager.py) and the rule that skips a request it would refuse
(core/replica_epochs.py)."""

from __future__ import annotations

from broker_stub import fencing, replica_manager
from broker_stub.state import BrokerState, PartitionRole
from controller_svc.common.errors import ErrorCode
from controller_svc.common.model import TopicPartition
from controller_svc.core.replica_epochs import already_held, held_epochs
from kcontroller.v1 import broker_pb2


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
    result, topics = replica_manager.apply_describe_replica_epochs(state, _ask(4))
    assert result.error == ErrorCode.NONE
    assert held_epochs(topics) == {"a": {0: 7, 2: 4}}
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
    _result, topics = replica_manager.apply_describe_replica_epochs(state, _ask(1))
    reported = held_epochs(topics).get("a", {})
    assert set(reported) == {tp.partition for tp in tps if not state.is_on_offline_dir(tp)}
    assert len(reported) < len(tps)


def test_a_stale_question_is_refused_and_changes_nothing() -> None:
    state = BrokerState(broker_id=1, broker_epoch=50, controller_epoch=5, controller_id=3)
    state.roles = {TopicPartition("a", 0): _role("leader", 7)}
    for request, error in ((_ask(4), ErrorCode.STALE_CONTROLLER_EPOCH), (_ask(6, 49), ErrorCode.STALE_BROKER_EPOCH)):
        result, topics = replica_manager.apply_describe_replica_epochs(state, request)
        assert result.error == error and topics == []
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
