"""ISR shrink and expand by a partition leader, the Kafka 2.x ZooKeeper way: the leader
writes the partition state conditionally on the zkVersion it knows, then leaves an
/isr_change_notification/isr_change_<seq> znode for the controller (Partition.
maybeShrinkIsr / maybeExpandIsr and ReplicaManager.propagateIsrChanges)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from broker_stub.state import BrokerState, PartitionRole
from controller_svc.errors import CorruptZnodeError, ErrorCode, ZkBadVersionError, ZkNoNodeError
from controller_svc.model import LeaderIsrAndControllerEpoch, TopicPartition
from controller_svc.zk import codecs, paths
from controller_svc.zk.client import MultiOpError, ZkClient

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class IsrChangeResult:
    error: ErrorCode
    message: str = ""
    isr: tuple[int, ...] = ()
    zk_version: int = -1


def proposed_isr(role: PartitionRole, broker_id: int, replica: int, lagging: bool) -> tuple[int, ...]:
    if lagging:
        if replica == broker_id:
            return role.isr  # the leader never removes itself
        return tuple(r for r in role.isr if r != replica)
    if replica in role.replicas and replica not in role.isr:
        return (*role.isr, replica)
    return role.isr


async def change_isr(
    zk: ZkClient, state: BrokerState, tp: TopicPartition, replica: int, lagging: bool
) -> IsrChangeResult:
    role = state.roles.get(tp)
    if role is None:
        return IsrChangeResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"broker {state.broker_id} has no replica of {tp}")
    if role.role != "leader":
        return IsrChangeResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {state.broker_id} does not lead {tp}")
    if replica not in role.replicas:
        return IsrChangeResult(ErrorCode.INVALID_REQUEST, f"{replica} is not a replica of {tp}")
    if lagging:
        state.lagging.add((tp, replica))
    else:
        state.lagging.discard((tp, replica))
    new_isr = proposed_isr(role, state.broker_id, replica, lagging)
    if new_isr == role.isr:
        return IsrChangeResult(ErrorCode.NONE, "ISR unchanged", role.isr, role.zk_version)
    path = paths.partition_state_path(tp.topic, tp.partition)
    got = await zk.get_or_none(path)
    if got is None:
        return IsrChangeResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{path} does not exist")
    try:
        current = codecs.decode_partition_state(path, got[0], got[1].version)
    except CorruptZnodeError as e:
        return IsrChangeResult(ErrorCode.UNKNOWN_SERVER_ERROR, str(e))
    if current.leader != state.broker_id or current.leader_epoch != role.leader_epoch:
        # The controller moved leadership; a LeaderAndIsr is on its way (FENCED_LEADER_EPOCH).
        return IsrChangeResult(
            ErrorCode.FENCED_LEADER_EPOCH,
            f"{tp} is now led by {current.leader} epoch {current.leader_epoch}; we have epoch {role.leader_epoch}",
        )
    updated = LeaderIsrAndControllerEpoch(
        current.leader, current.leader_epoch, new_isr, current.zk_version, current.controller_epoch
    )
    try:
        stat = await zk.set_data(path, codecs.encode_partition_state(updated), version=current.zk_version)
    except (ZkBadVersionError, ZkNoNodeError) as e:
        return IsrChangeResult(ErrorCode.INVALID_UPDATE_VERSION, f"{tp} changed while we updated its ISR: {e}")
    state.roles[tp] = PartitionRole(
        role.role, role.leader, role.leader_epoch, new_isr, role.replicas, role.controller_epoch, stat.version
    )
    notification = json.dumps(
        {"version": 1, "partitions": [{"topic": tp.topic, "partition": tp.partition}]}, separators=(",", ":")
    ).encode()
    try:
        await zk.create(f"{paths.ISR_CHANGE_NOTIFICATION}/isr_change_", notification, sequential=True)
    except MultiOpError as e:
        log.error("ISR of %s changed but the notification could not be written: %s", tp, e)
    log.info("broker %d: ISR of %s %s -> %s", state.broker_id, tp, list(role.isr), list(new_isr))
    return IsrChangeResult(ErrorCode.NONE, "", new_isr, stat.version)


async def write_log_dir_event(zk: ZkClient, broker_id: int) -> None:
    """LogDirFailureChannel -> /log_dir_event_notification/log_dir_event_<seq>."""
    data = json.dumps({"version": 1, "broker": broker_id, "event": 1}, separators=(",", ":")).encode()
    await zk.create(f"{paths.LOG_DIR_EVENT_NOTIFICATION}/log_dir_event_", data, sequential=True)
