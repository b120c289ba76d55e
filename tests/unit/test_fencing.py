from __future__ import annotations

import pytest

from broker_stub import fencing, replica_manager
from broker_stub.state import BrokerState
from controller_svc.common.errors import ErrorCode
from controller_svc.common.model import TopicPartition
from kcontroller.v1 import broker_pb2, common_pb2

E = ErrorCode


@pytest.mark.parametrize(
    ("highest_controller_epoch", "own_broker_epoch", "req_controller_epoch", "req_broker_epoch", "expected"),
    [
        (0, 10, 1, 10, E.NONE),  # first controller
        (3, 10, 3, 10, E.NONE),  # same controller again
        (3, 10, 4, 10, E.NONE),  # newer controller
        (3, 10, 2, 10, E.STALE_CONTROLLER_EPOCH),  # zombie controller
        (3, 10, 3, 9, E.STALE_BROKER_EPOCH),  # meant for our previous incarnation (KIP-380)
        (3, 10, 2, 9, E.STALE_BROKER_EPOCH),  # broker epoch is checked first, as in KafkaApis
        (3, 10, 3, 11, E.NONE),  # a newer broker epoch than we know is not stale
        (3, 10, 3, -1, E.NONE),  # -1: unknown epoch, not checked
    ],
)
def test_control_request_fencing(
    highest_controller_epoch: int,
    own_broker_epoch: int,
    req_controller_epoch: int,
    req_broker_epoch: int,
    expected: ErrorCode,
) -> None:
    assert (
        fencing.check_control_request(
            highest_controller_epoch, own_broker_epoch, req_controller_epoch, req_broker_epoch
        )
        == expected
    )


@pytest.mark.parametrize(
    ("replicas", "current", "requested", "expected"),
    [
        ((1, 2), None, 0, E.NONE),
        ((1, 2), 4, 5, E.NONE),
        ((1, 2), 5, 5, E.STALE_CONTROLLER_EPOCH),
        ((1, 2), 6, 5, E.STALE_CONTROLLER_EPOCH),
        ((2, 3), None, 0, E.UNKNOWN_TOPIC_OR_PARTITION),
    ],
)
def test_leader_and_isr_partition_fencing(
    replicas: tuple[int, ...], current: int | None, requested: int, expected: ErrorCode
) -> None:
    assert fencing.check_leader_and_isr_partition(1, replicas, current, requested) == expected


@pytest.mark.parametrize(
    ("current", "requested", "expected"),
    [
        (None, 3, E.NONE),
        (3, 4, E.NONE),
        (3, 3, E.FENCED_LEADER_EPOCH),
        (3, 2, E.FENCED_LEADER_EPOCH),
        (3, -1, E.NONE),
        (3, -2, E.NONE),
    ],
)
def test_stop_replica_partition_fencing(current: int | None, requested: int, expected: ErrorCode) -> None:
    assert fencing.check_stop_replica_partition(current, requested) == expected


def test_rejected_update_metadata_changes_nothing() -> None:
    state = BrokerState(broker_id=1, broker_epoch=50, controller_epoch=4, controller_id=2)
    state.live_brokers = {1: common_pb2.LiveBroker(id=1)}
    stale = broker_pb2.UpdateMetadataRequest(
        controller_id=9, controller_epoch=3, broker_epoch=50, live_brokers=[common_pb2.LiveBroker(id=7)]
    )
    result = replica_manager.apply_update_metadata(state, stale)
    assert result.error == E.STALE_CONTROLLER_EPOCH
    assert state.controller_id == 2 and state.controller_epoch == 4 and list(state.live_brokers) == [1]
    assert state.update_metadata_count == 0


def test_leader_and_isr_applies_roles_per_partition_with_epoch_fencing() -> None:
    state = BrokerState(broker_id=1, broker_epoch=50)

    def request(leader_epoch: int, leader: int, controller_epoch: int = 1) -> broker_pb2.LeaderAndIsrRequest:
        return broker_pb2.LeaderAndIsrRequest(
            controller_id=1,
            controller_epoch=controller_epoch,
            broker_epoch=50,
            partition_states=[
                common_pb2.PartitionState(
                    topic="t", partition=0, leader=leader, leader_epoch=leader_epoch, isr=[1, 2], replicas=[1, 2]
                ),
                common_pb2.PartitionState(topic="t", partition=1, leader=3, leader_epoch=0, isr=[3], replicas=[2, 3]),
            ],
        )

    first = replica_manager.apply_leader_and_isr(state, request(0, 1))
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    assert first.partition_errors == {tp0: E.NONE, tp1: E.UNKNOWN_TOPIC_OR_PARTITION}
    assert state.roles[tp0].role == "leader" and tp1 not in state.roles
    stale = replica_manager.apply_leader_and_isr(state, request(0, 2))
    assert stale.partition_errors[tp0] == E.STALE_CONTROLLER_EPOCH and state.roles[tp0].role == "leader"
    newer = replica_manager.apply_leader_and_isr(state, request(1, 2, controller_epoch=2))
    assert newer.partition_errors[tp0] == E.NONE
    assert state.roles[tp0].role == "follower" and state.roles[tp0].leader_epoch == 1
    assert state.controller_epoch == 2
