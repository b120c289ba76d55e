"""Controlled shutdown, controller side (KafkaController.doControlledShutdown).

The broker is marked shutting down; partitions it leads (RF > 1, not being deleted) move with
the controlled-shutdown election; its follower replicas go OfflineReplica (StopReplica, out of
the ISR). The answer lists what it still leads, and the broker retries until that is empty.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from controller_svc.common.errors import ErrorCode
from controller_svc.common.model import PartitionAndReplica, TopicPartition, sorted_partitions
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.controller.partition_manager import PartitionManager
from controller_svc.controller.partition_state_machine import PartitionState
from controller_svc.controller.replica_state_machine import ReplicaState
from controller_svc.core.context import ControllerContext
from controller_svc.core.election import ElectionStrategy

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ShutdownOutcome:
    error_code: int
    message: str = ""
    remaining: tuple[TopicPartition, ...] = ()


def replicated_partitions_led_by(ctx: ControllerContext, broker_id: int) -> list[TopicPartition]:
    return sorted(
        tp
        for tp, state in ctx.partition_states.items()
        if state.leader == broker_id and len(ctx.replicas(tp)) > 1 and not ctx.is_topic_queued_for_deletion(tp.topic)
    )


async def controlled_shutdown(
    ctx: ControllerContext, partitions: PartitionManager, state_log: StateChangeLog, broker_id: int, broker_epoch: int
) -> ShutdownOutcome:
    current_epoch = ctx.broker_epoch(broker_id)
    if broker_id not in ctx.live_brokers:
        return ShutdownOutcome(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not registered")
    if broker_epoch != -1 and broker_epoch < current_epoch:
        return ShutdownOutcome(
            ErrorCode.STALE_BROKER_EPOCH,
            f"broker epoch {broker_epoch} is older than broker {broker_id}'s current epoch {current_epoch}",
        )
    if broker_id not in ctx.shutting_down_broker_ids:
        log.info("broker %d is shutting down (controlled shutdown)", broker_id)
        state_log.record(
            "broker.controlled_shutdown", broker_id=broker_id, broker_epoch=current_epoch, controller_epoch=ctx.epoch
        )
    ctx.shutting_down_broker_ids.add(broker_id)
    on_broker = [
        tp
        for tp in ctx.partitions_on_brokers([broker_id])
        if len(ctx.replicas(tp)) > 1 and tp in ctx.partition_states and not ctx.is_topic_queued_for_deletion(tp.topic)
    ]
    # sorted_partitions: 1M-partition sorts otherwise hold the GIL for seconds (common/model.py)
    leading = sorted_partitions(tp for tp in on_broker if ctx.partition_states[tp].leader == broker_id)
    following = [
        PartitionAndReplica(tp, broker_id)
        for tp in sorted_partitions(on_broker)
        if ctx.partition_states[tp].leader != broker_id
    ]
    async with partitions.operation():
        await partitions.psm.handle_state_changes(leading, PartitionState.ONLINE, ElectionStrategy.CONTROLLED_SHUTDOWN)
        await partitions.rsm.handle_state_changes(
            [r for r in following if partitions.rsm.state(r) is not ReplicaState.OFFLINE], ReplicaState.OFFLINE
        )
    remaining = tuple(replicated_partitions_led_by(ctx, broker_id))
    log.info(
        "controlled shutdown of broker %d: %d partitions moved, %d still led",
        broker_id,
        len(leading) - len(remaining),
        len(remaining),
    )
    return ShutdownOutcome(ErrorCode.NONE, "", remaining)
