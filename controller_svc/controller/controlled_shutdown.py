"""Controlled shutdown, controller side (KafkaController.doControlledShutdown).

The broker is marked shutting down; partitions it leads (RF > 1, not being deleted) move with
the controlled-shutdown election; its follower replicas go OfflineReplica (StopReplica, out of
the ISR). The answer lists what it still leads, and the broker retries until that is empty.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat

from controller_svc.common.errors import ErrorCode
from controller_svc.common.model import PartitionAndReplica, TopicPartition
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.controller.partition_manager import PartitionManager
from controller_svc.controller.partition_state_machine import PartitionState
from controller_svc.controller.replica_state_machine import ReplicaState
from controller_svc.controller.slices import SCAN_SLICE, keep_in_slices
from controller_svc.core.context import ControllerContext
from controller_svc.core.election import ElectionStrategy

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ShutdownOutcome:
    error_code: int
    message: str = ""
    remaining: tuple[TopicPartition, ...] = ()


async def replicated_partitions_led_by(ctx: ControllerContext, broker_id: int) -> list[TopicPartition]:
    """The partitions `broker_id` leads with more than one replica, not being deleted, in order
    (KafkaController.replicatedPartitionsBrokerLeads): every partition state is examined, as
    there, a topic at a time, yielding every SCAN_SLICE partitions. The answer to the broker
    waits for this scan: a topic's states are looked up in C loops and only the partitions the
    broker leads are examined further."""
    led: list[TopicPartition] = []
    states = ctx.partition_states
    examined = 0
    for topic in sorted(ctx.assignments):
        parts = ctx.assignments.get(topic)
        if not parts or ctx.is_topic_queued_for_deletion(topic):
            continue
        tps = list(map(tuple.__new__, repeat(TopicPartition), zip(repeat(topic), sorted(parts))))
        for tp, state in zip(tps, map(states.get, tps), strict=True):
            if state is not None and state.leader == broker_id and len(parts[tp.partition].replicas) > 1:
                led.append(tp)
        examined += len(parts)
        if examined >= SCAN_SLICE:
            examined = 0
            await asyncio.sleep(0)
    return led


async def _replicated_on_broker(
    ctx: ControllerContext, broker_id: int
) -> tuple[list[TopicPartition], list[TopicPartition]]:
    """(led, followed): the partitions with a replica on `broker_id`, more than one replica, a
    state and a topic not being deleted, split by whether the broker leads them, in order;
    yielding every SCAN_SLICE partitions."""
    leading: list[TopicPartition] = []
    following: list[TopicPartition] = []
    states = ctx.partition_states
    new = tuple.__new__
    examined = 0
    for topic, partitions in ctx.partitions_on_broker_by_topic(broker_id):
        parts = ctx.assignments.get(topic)
        if not parts or ctx.is_topic_queued_for_deletion(topic):
            continue
        for partition in partitions:
            assignment = parts.get(partition)
            tp = new(TopicPartition, (topic, partition))
            state = states.get(tp)
            if assignment is None or state is None or len(assignment.replicas) <= 1:
                continue
            (leading if state.leader == broker_id else following).append(tp)
        examined += len(partitions)
        if examined >= SCAN_SLICE:
            examined = 0
            await asyncio.sleep(0)
    return leading, following


async def _not_yet_offline(
    partitions: PartitionManager, broker_id: int, followed: list[TopicPartition]
) -> list[PartitionAndReplica]:
    """The broker's replicas of `followed` that are not Offline yet (a retry finds most of them
    done)."""
    state = partitions.rsm.state
    offline = ReplicaState.OFFLINE
    replicas = [PartitionAndReplica(tp, broker_id) for tp in followed]
    return await keep_in_slices(replicas, lambda replica: state(replica) is not offline)


async def controlled_shutdown(
    ctx: ControllerContext,
    partitions: PartitionManager,
    state_log: StateChangeLog,
    broker_id: int,
    broker_epoch: int,
    answer: Callable[[ShutdownOutcome], None] = lambda outcome: None,
) -> ShutdownOutcome:
    """Move what `broker_id` leads and stop what it follows; `answer` is called with the
    outcome as soon as it is known (see below), and the outcome is returned too."""
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
    leading, followed = await _replicated_on_broker(ctx, broker_id)
    # The gauges are the caller's to refresh once the broker has its answer (they are not part
    # of it, and recounting the written topics before answering kept the broker waiting).
    async with partitions.operation(refresh_metrics=False):
        await partitions.psm.handle_state_changes(leading, PartitionState.ONLINE, ElectionStrategy.CONTROLLED_SHUTDOWN)
        await partitions.rsm.handle_state_changes(
            await _not_yet_offline(partitions, broker_id, followed), ReplicaState.OFFLINE
        )
        # The states are written and the context holds them: what the broker still leads is
        # known now, before the batch's requests are built and queued.
        remaining = tuple(await replicated_partitions_led_by(ctx, broker_id))
        outcome = ShutdownOutcome(ErrorCode.NONE, "", remaining)
        # Answered before the batch is built, with a loop turn for the RPC to write it: the
        # broker acts on its answer (deregisters and exits) while this controller encodes the
        # requests and its senders put them on the wire. They still go out in this event,
        # before any other is handled; only the order of two concurrent sends changes, as in
        # Kafka, whose RequestSendThreads and the response's network send run concurrently
        # (KafkaController.doControlledShutdown answers through its callback once the state
        # changes are queued). Building the batch first left the broker waiting for the
        # encoding of 10k partitions' UpdateMetadata and LeaderAndIsr, and for the senders.
        answer(outcome)
        await asyncio.sleep(0)
    log.info(
        "controlled shutdown of broker %d: %d partitions moved, %d still led",
        broker_id,
        len(leading) - len(remaining),
        len(remaining),
    )
    return outcome
