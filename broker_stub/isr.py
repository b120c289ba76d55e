"""ISR shrink and expand by a partition leader, the Kafka 2.x ZooKeeper way: the leader
writes the partition state conditionally on the zkVersion it knows, then leaves an
/isr_change_notification/isr_change_<seq> znode for the controller (Partition.
maybeShrinkIsr / maybeExpandIsr and ReplicaManager.propagateIsrChanges)."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from broker_stub.state import BrokerState, PartitionRole
from controller_svc.adapters.zk import codecs, paths
from controller_svc.adapters.zk.client import ZkClient
from controller_svc.common.errors import (
    CorruptZnodeError,
    ErrorCode,
    ZkBadVersionError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkNotAuthorizedError,
)
from controller_svc.common.model import LeaderIsrAndControllerEpoch, TopicPartition

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
    """The debug RPC: mark `replica` lagging (shrink) or caught up (expand)."""
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
    return (await update_isrs(zk, state, {tp: new_isr}))[tp]


async def update_isrs(
    zk: ZkClient, state: BrokerState, changes: dict[TopicPartition, tuple[int, ...]]
) -> dict[TopicPartition, IsrChangeResult]:
    """Write new ISRs of partitions this broker leads (pipelined conditional writes), then one
    ISR change notification naming the partitions that changed."""
    partitions = sorted(changes)
    state_paths = [paths.partition_state_path(tp.topic, tp.partition) for tp in partitions]
    reads = await zk.get_many(state_paths)
    results: dict[TopicPartition, IsrChangeResult] = {}
    writes: list[tuple[TopicPartition, str, LeaderIsrAndControllerEpoch]] = []
    for tp, path, got in zip(partitions, state_paths, reads, strict=True):
        role = state.roles.get(tp)
        if got is None or role is None:
            results[tp] = IsrChangeResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{path} does not exist")
            continue
        try:
            current = codecs.decode_partition_state(path, got[0], got[1].version)
        except CorruptZnodeError as e:
            results[tp] = IsrChangeResult(ErrorCode.UNKNOWN_SERVER_ERROR, str(e))
            continue
        if current.leader != state.broker_id or current.leader_epoch != role.leader_epoch:
            # The controller moved leadership; a LeaderAndIsr is on its way.
            results[tp] = IsrChangeResult(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"{tp} is now led by {current.leader} epoch {current.leader_epoch}; we have epoch {role.leader_epoch}",
            )
            continue
        updated = LeaderIsrAndControllerEpoch(
            current.leader, current.leader_epoch, changes[tp], current.zk_version, current.controller_epoch
        )
        writes.append((tp, path, updated))

    async def write(tp: TopicPartition, path: str, updated: LeaderIsrAndControllerEpoch) -> None:
        role = state.roles[tp]
        try:
            stat = await zk.set_data(path, codecs.encode_partition_state(updated), version=updated.zk_version)
        except (ZkBadVersionError, ZkNoNodeError) as e:
            results[tp] = IsrChangeResult(ErrorCode.INVALID_UPDATE_VERSION, f"{tp} changed under us: {e}")
            return
        if state.roles.get(tp) is role:
            state.roles[tp] = role._replace(isr=updated.isr, zk_version=stat.version)
        results[tp] = IsrChangeResult(ErrorCode.NONE, "", updated.isr, stat.version)
        log.info("broker %d: ISR of %s %s -> %s", state.broker_id, tp, list(role.isr), list(updated.isr))

    await zk.pipelined([functools.partial(write, tp, path, updated) for tp, path, updated in writes])
    changed = [tp for tp in partitions if results[tp].error == ErrorCode.NONE]
    if changed:
        notification = codecs.encode_isr_change_notification(changed)
        try:
            await zk.create(f"{paths.ISR_CHANGE_NOTIFICATION}/isr_change_", notification, sequential=True)
        except (ZkNoNodeError, ZkNodeExistsError, ZkNotAuthorizedError) as e:
            log.error("ISRs of %d partitions changed but the notification could not be written: %s", len(changed), e)
    return results


def under_replicated_led(state: BrokerState) -> set[TopicPartition]:
    """Partitions this broker leads whose ISR lacks some replica (kept by the role table as
    roles change, not a scan)."""
    return state.under_replicated_led()


def waits_for_a_follower(state: BrokerState, tp: TopicPartition) -> bool:
    """Pure: whether the ISR maintenance has anything to watch in `tp`: we lead it, it is not
    on a failed log dir, and some replica out of its ISR is live and not marked lagging (the
    conditions under which `caught_up_followers` starts or continues a follower's wait)."""
    role = state.roles.get(tp)
    if role is None or role.role != "leader" or state.is_on_offline_dir(tp):
        return False
    me, live, lagging = state.broker_id, state.live_brokers, state.lagging
    return any(r != me and r not in role.isr and r in live and (tp, r) not in lagging for r in role.replicas)


def expansion_candidates(state: BrokerState) -> set[TopicPartition]:
    """Pure: the partitions `waits_for_a_follower`, from the role table's index of led
    partitions by the replica missing from their ISR, taking only live followers' (the
    maintenance round used to look at every under-replicated partition, five times a second:
    with a broker dead, all those it followed, for as long as it stayed dead)."""
    candidates: set[TopicPartition] = set()
    for replica in state.live_brokers:
        if replica == state.broker_id:
            continue
        missing = state.led_missing(replica)
        if not missing:
            continue
        if state.lagging or state.offline_log_dirs:
            candidates.update(tp for tp in missing if waits_for_a_follower(state, tp))
        else:
            candidates.update(missing)
    return candidates


def caught_up_followers(
    state: BrokerState,
    first_seen: dict[tuple[TopicPartition, int], float],
    now: float,
    delay_s: float,
    candidates: set[TopicPartition] | None = None,
) -> dict[TopicPartition, tuple[int, ...]]:
    """Pure: ISR expansions due now. A follower out of the ISR counts as caught up once it has
    been live (in our metadata cache) and not marked lagging for `delay_s`; `first_seen`
    remembers since when. `candidates` limits the look to under-replicated partitions."""
    due: dict[TopicPartition, tuple[int, ...]] = {}
    still_waiting: set[tuple[TopicPartition, int]] = set()
    for tp in candidates if candidates is not None else under_replicated_led(state):
        role = state.roles.get(tp)
        if role is None or role.role != "leader" or state.is_on_offline_dir(tp):
            continue
        joining = []
        for replica in role.replicas:
            key = (tp, replica)
            if replica in role.isr or replica == state.broker_id or key in state.lagging:
                continue
            if replica not in state.live_brokers:
                continue
            still_waiting.add(key)
            since = first_seen.setdefault(key, now)
            if now - since >= delay_s:
                joining.append(replica)
        if joining:
            due[tp] = tuple(r for r in role.replicas if r in role.isr or r in joining)
    for key in list(first_seen):
        if key not in still_waiting:
            del first_seen[key]
    return due


def registered_only(
    state: BrokerState,
    due: dict[TopicPartition, tuple[int, ...]],
    registered: set[int],
    first_seen: dict[tuple[TopicPartition, int], float],
) -> dict[TopicPartition, tuple[int, ...]]:
    """Pure: the expansions of `due` with only followers ZooKeeper still has registered. Our
    live brokers come from the last UpdateMetadata, which reaches a new leader after the
    LeaderAndIsr that made it one: in between, a broker that just died still looks live, and
    in Kafka it could never catch up (a dead broker does not fetch). Such a follower's wait
    starts again (`first_seen`) once it is registered."""
    kept: dict[TopicPartition, tuple[int, ...]] = {}
    for tp, isr in due.items():
        role = state.roles.get(tp)
        if role is None:
            continue
        joining = [r for r in isr if r not in role.isr]
        for r in joining:
            if r not in registered:
                first_seen.pop((tp, r), None)
        new_isr = tuple(r for r in isr if r in role.isr or r in registered)
        if new_isr != role.isr:
            kept[tp] = new_isr
    return kept


async def write_log_dir_event(zk: ZkClient, broker_id: int) -> None:
    """LogDirFailureChannel -> /log_dir_event_notification/log_dir_event_<seq>."""
    data = codecs.encode_log_dir_event(broker_id)
    await zk.create(f"{paths.LOG_DIR_EVENT_NOTIFICATION}/log_dir_event_", data, sequential=True)
