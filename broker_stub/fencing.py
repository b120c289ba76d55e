"""Fencing rules a broker applies to every control request on receipt (pure functions).

- KIP-380: a broker epoch lower than ours is from a request meant for our previous
  incarnation -> STALE_BROKER_EPOCH (77). -1 means "unknown" and is not checked.
- A controller epoch lower than the highest we have seen is from a zombie controller
  -> STALE_CONTROLLER_EPOCH (11). Nothing of a rejected request is applied.
- Per partition, LeaderAndIsr for a replica on a failed log dir gets KAFKA_STORAGE_ERROR;
  otherwise it needs a newer leader epoch (Kafka 2.8 answers
  STALE_CONTROLLER_EPOCH for an old one); StopReplica too (FENCED_LEADER_EPOCH), unless its
  leader epoch is -1 (no epoch) or -2 (the topic is being deleted).
"""

from __future__ import annotations

from controller_svc.common.errors import ErrorCode

NO_EPOCH = -1
EPOCH_DURING_DELETE = -2


def check_control_request(
    highest_controller_epoch: int,
    own_broker_epoch: int,
    request_controller_epoch: int,
    request_broker_epoch: int,
) -> ErrorCode:
    if request_broker_epoch != NO_EPOCH and request_broker_epoch < own_broker_epoch:
        return ErrorCode.STALE_BROKER_EPOCH
    if request_controller_epoch < highest_controller_epoch:
        return ErrorCode.STALE_CONTROLLER_EPOCH
    return ErrorCode.NONE


def check_leader_and_isr_partition(
    broker_id: int,
    replicas: tuple[int, ...],
    current_leader_epoch: int | None,
    request_leader_epoch: int,
    on_offline_log_dir: bool = False,
) -> ErrorCode:
    """ReplicaManager.becomeLeaderOrFollower's order: an offline log dir first, then the
    leader epoch, then whether this broker is a replica at all."""
    if on_offline_log_dir:
        return ErrorCode.KAFKA_STORAGE_ERROR
    if current_leader_epoch is not None and request_leader_epoch <= current_leader_epoch:
        return ErrorCode.STALE_CONTROLLER_EPOCH
    if broker_id not in replicas:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE


def check_stop_replica_partition(current_leader_epoch: int | None, request_leader_epoch: int) -> ErrorCode:
    if request_leader_epoch in (NO_EPOCH, EPOCH_DURING_DELETE) or current_leader_epoch is None:
        return ErrorCode.NONE
    if request_leader_epoch <= current_leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    return ErrorCode.NONE
