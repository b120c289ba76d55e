"""What the active controller does to partitions when brokers, topics or ISRs change
(KafkaController.onBrokerStartup / onBrokerFailure / onReplicasBecomeOffline /
onNewPartitionCreation / onBrokerLogDirFailure and the failover start-up of both state
machines). Every operation runs inside one request batch, sent when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from controller_svc.common import metrics
from controller_svc.common.errors import ControllerMovedError, ErrorCode
from controller_svc.common.model import LeaderIsrAndControllerEpoch, PartitionAndReplica, TopicPartition
from controller_svc.common.pacing import Pacer
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.controller.partition_state_machine import PartitionState, PartitionStateMachine, PartitionStateStore
from controller_svc.controller.replica_state_machine import INITIALIZE_CHUNK, ReplicaState, ReplicaStateMachine
from controller_svc.controller.slices import SCAN_SLICE, keep_in_slices
from controller_svc.core.context import ControllerContext
from controller_svc.core.replica_epochs import MetadataDigests, ReplicaEpochs, topics_lacking
from controller_svc.core.request_batch import (
    BUILD_SLICE,
    RequestBatch,
    RequestSink,
    StopReplicaCallback,
    metadata_topic_digests,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FailoverSends:
    """What the failover's start-up sent and left out because brokers held it already."""

    leader_and_isr_sent: int
    leader_and_isr_skipped: int
    # partition states in UpdateMetadata, summed over brokers
    metadata_states_sent: int
    metadata_states_skipped: int


class PartitionManager:
    def __init__(
        self,
        controller_id: int,
        ctx: ControllerContext,
        store: PartitionStateStore,
        sink: RequestSink,
        state_log: StateChangeLog,
        unclean_default: Callable[[], bool],
        on_leader_and_isr_response: Callable[[int, str, Any], None] | None = None,
        on_stop_replica_response: StopReplicaCallback | None = None,
        controller_endpoint: str = "",
    ) -> None:
        self.controller_id = controller_id
        self.ctx = ctx
        self._state_machines_initialized = False
        self.sink = sink
        self.batch = RequestBatch(
            controller_id, ctx, on_leader_and_isr_response, on_stop_replica_response, controller_endpoint
        )
        self.psm = PartitionStateMachine(ctx, store, self.batch, state_log, controller_id, unclean_default)
        self.rsm = ReplicaStateMachine(ctx, store, self.batch, state_log, controller_id)

    def __repr__(self) -> str:
        return f"PartitionManager({self.psm!r}, {self.rsm!r})"

    @contextlib.asynccontextmanager
    async def operation(self, refresh_metrics: bool = True) -> AsyncIterator[RequestBatch]:
        """One request batch per operation. Requests already in the batch stand for ZooKeeper
        writes that succeeded, so they are sent even if the operation fails half-way; a
        controller that moved sends nothing. The gauges are recomputed after it (full scans:
        an operation made of several steps refreshes them once, at its end)."""
        self.batch.new_batch()
        try:
            yield self.batch
            built = await self._build()
        except ControllerMovedError:
            self.batch.clear()
            raise
        except BaseException:
            self.batch.send(self.sink)
            raise
        self.batch.send(self.sink, built)
        # The senders share this event loop: let them put the requests on the wire before
        # the next (possibly long, CPU-bound) step of the operation, the gauges' refresh
        # included (it held a broker failure's new leaders back by its recount).
        for _ in range(3):
            await asyncio.sleep(0)
        if refresh_metrics:
            await self.refresh_gauges()

    async def refresh_gauges(self) -> None:
        """The gauges after an operation. The imbalance gauge recounts every written topic: all
        of them at 1M partitions after a controlled shutdown (half a second in one step), so in
        steps."""
        done = self.ctx.recount_imbalance(BUILD_SLICE)
        while not done:
            await asyncio.sleep(0)
            done = self.ctx.recount_imbalance(BUILD_SLICE)
        self.update_metrics()

    async def _build(self) -> list[tuple[int, str, Any]]:
        """Build the batch's requests a part at a time, yielding between parts (nothing else
        changes the batch or the context meanwhile: this task owns both). A controlled shutdown
        at 1M partitions changed 600k states, whose encoding and requests, built in the one step
        of `send`, held the loop for seconds."""
        if self.batch.entry_count() < BUILD_SLICE:
            return self.batch.build()
        built: list[tuple[int, str, Any]] = []
        for _ in self.batch.build_steps(built):
            await asyncio.sleep(0)
        return built

    def update_metrics(self) -> None:
        metrics.OFFLINE_PARTITIONS.set(self.psm.offline_partition_count())
        metrics.PREFERRED_REPLICA_IMBALANCE.set(self.ctx.preferred_replica_imbalance_count())
        metrics.GLOBAL_TOPIC_COUNT.set(len(self.ctx.assignments))
        metrics.GLOBAL_PARTITION_COUNT.set(self.ctx.partition_count)

    # --- failover -------------------------------------------------------------------------------

    async def initialize_state_machines(self) -> None:
        """The failover's start of both state machines from the context (CPU only, yielding to
        the loop between chunks): may run before `start_up`, e.g. while the brokers' replica
        epochs are awaited."""
        # The partition state machine first: it reads the standby's keys, which the replica
        # state machine's start-up then takes.
        await self.psm.initialize()
        await self.rsm.initialize()
        self._state_machines_initialized = True

    async def start_up(
        self,
        reported: ReplicaEpochs | None = None,
        mark: Callable[[str], None] = lambda _phase: None,
        digests: MetadataDigests | None = None,
    ) -> FailoverSends:
        """Failover: UpdateMetadata to every live broker, replica state machine start-up
        (online replicas get LeaderAndIsr where their broker is behind, offline ones leave the
        ISR), then partition state machine start-up (New and Offline partitions elected with
        the offline strategy)."""
        metadata_sent, metadata_skipped = await self._update_metadata_at_failover(digests or {})
        mark("update_metadata")
        if not self._state_machines_initialized:
            await self.initialize_state_machines()
            mark("state_machines_init")
        self._state_machines_initialized = False
        offline = self.rsm.take_initially_offline()
        async with self.operation(refresh_metrics=False):
            sent, skipped = await self.rsm.resend_online(reported)
            await self.rsm.handle_state_changes(offline, ReplicaState.OFFLINE)
        mark("replicas_online_offline")
        # Gauges: refreshed by the failover's last step (TermOfOffice.open).
        async with self.operation(refresh_metrics=False):
            await self.psm.trigger_online_partition_state_change()
        mark("partitions_online")
        return FailoverSends(sent, skipped, metadata_sent, metadata_skipped)

    async def _update_metadata_at_failover(self, digests: MetadataDigests) -> tuple[int, int]:
        """Kafka's sendUpdateMetadataRequest(all live brokers, all partitions), except that a
        broker that reported its metadata digests gets only the topics where its cache differs
        (core/replica_epochs.topics_lacking says why that is safe); every broker gets an
        UpdateMetadata, if only for the live brokers and the new epoch. Brokers lacking the same
        topics share one request. Returns the partition states (sent, skipped) over all brokers."""
        ctx = self.ctx
        brokers = ctx.live_or_shutting_down_broker_ids
        topics = list(ctx.assignments)
        # A topic at a time, paced: after a cold load (or a standby without its digests) this
        # encodes every partition state (5 s in one step at 1M partitions, when the request's
        # build did it), which the request then reuses from the context's cache.
        ours: dict[str, bytes] = {}
        pacer = Pacer(INITIALIZE_CHUNK)
        for topic in topics:
            await pacer.before(len(ctx.assignments[topic]))
            ours.update(metadata_topic_digests(ctx, [topic]))
        groups: dict[frozenset[str], set[int]] = {}
        for broker_id in brokers:
            groups.setdefault(topics_lacking(topics, ours, digests.get(broker_id)), set()).add(broker_id)
        sent = skipped = 0
        for lacking, group in sorted(groups.items(), key=lambda item: sorted(item[1])):
            if len(lacking) == len(topics):
                partitions = ctx.all_partitions()
            else:
                partitions = [tp for topic in sorted(lacking) for tp in ctx.partitions_for_topic(topic)]
            async with self.operation(refresh_metrics=False) as batch:
                batch.add_update_metadata(group, partitions)
            sent += len(partitions) * len(group)
            skipped += (ctx.partition_count - len(partitions)) * len(group)
        return sent, skipped

    # --- brokers --------------------------------------------------------------------------------

    async def on_broker_startup(self, new_brokers: set[int]) -> None:
        for broker_id in new_brokers:
            self.ctx.replicas_on_offline_dirs.pop(broker_id, None)
        existing = self.ctx.live_or_shutting_down_broker_ids - new_brokers
        # Existing brokers learn about the new ones; new ones get full metadata first.
        async with self.operation() as batch:
            batch.add_update_metadata(existing, [])
        async with self.operation() as batch:
            batch.add_update_metadata(new_brokers, self.ctx.all_partitions())
        replicas = await self._replicas_on_brokers(new_brokers)
        deleting = self.ctx.topics_to_be_deleted
        async with self.operation():
            await self.rsm.handle_state_changes(
                await keep_in_slices(replicas, lambda r: r[0][0] not in deleting), ReplicaState.ONLINE
            )
            await self.psm.trigger_online_partition_state_change()

    async def on_broker_failure(self, dead_brokers: set[int]) -> None:
        for broker_id in dead_brokers:
            self.ctx.replicas_on_offline_dirs.pop(broker_id, None)
            self.ctx.shutting_down_broker_ids.discard(broker_id)
        await self.on_replicas_become_offline(await self._replicas_on_brokers(dead_brokers))

    async def _replicas_on_brokers(self, broker_ids: set[int]) -> list[PartitionAndReplica]:
        """`ctx.replicas_on_brokers`, a topic at a time, yielding every SCAN_SLICE replicas (a
        dead broker held 600k of a 1M-partition cluster)."""
        replicas: list[PartitionAndReplica] = []
        new = tuple.__new__  # the NamedTuple without its Python-level __new__
        made = 0
        for broker_id in sorted(broker_ids):
            for topic, partitions in self.ctx.partitions_on_broker_by_topic(broker_id):
                replicas.extend(
                    new(PartitionAndReplica, (new(TopicPartition, (topic, p)), broker_id)) for p in partitions
                )
                made += len(partitions)
                if made >= SCAN_SLICE:
                    made = 0
                    await asyncio.sleep(0)
        return replicas

    async def on_replicas_become_offline(self, offline: Collection[PartitionAndReplica]) -> None:
        """Partitions whose leader went offline go Offline and are re-elected; the offline
        replicas go OfflineReplica (leave the ISR)."""
        ctx = self.ctx
        deleting = ctx.topics_to_be_deleted
        states = self.psm.states
        partition_states = ctx.partition_states
        new = PartitionState.NEW
        # Kafka's partitionsWithOfflineLeader: a scan of every partition state, in slices.
        if any(ctx.replicas_on_offline_dirs.values()):

            def offline_leader(tp: TopicPartition) -> bool:
                return (
                    not ctx.is_replica_online(partition_states[tp].leader, tp)
                    and tp[0] not in deleting
                    and states.get(tp) is not new
                )

        else:
            # A leader is online when its broker is live and not shutting down: one set lookup
            # per partition, not a call.
            online = ctx.live_broker_ids

            def offline_leader(tp: TopicPartition) -> bool:
                return partition_states[tp].leader not in online and tp[0] not in deleting and states.get(tp) is not new

        with_offline_leader = await keep_in_slices(list(partition_states), offline_leader)
        # New leaders first, in their own batch, so brokers serve again before the (longer) ISR
        # clean-up of the offline followers is written; Kafka sends after each step too. The
        # gauges are refreshed once, after both (Kafka's updateMetrics, once per event): between
        # them their recount held the clean-up back (47 ms of a 10k-partition broker failure on
        # two busy cores).
        elected: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
        self.psm.written_log = elected
        try:
            async with self.operation(refresh_metrics=False):
                await self.psm.handle_state_changes(with_offline_leader, PartitionState.OFFLINE)
                await self.psm.trigger_online_partition_state_change()
        finally:
            self.psm.written_log = None
        async with self.operation() as batch:
            await self.rsm.handle_state_changes(
                await keep_in_slices(list(offline), lambda r: r[0][0] not in deleting),
                ReplicaState.OFFLINE,
                written_this_event=elected,
            )
            if not with_offline_leader:
                batch.add_update_metadata(self.ctx.live_or_shutting_down_broker_ids, [])

    async def on_log_dir_failure(self, brokers: set[int]) -> None:
        """A broker reported failed log dirs: send LeaderAndIsr for all its replicas; the ones
        on a failed dir answer KAFKA_STORAGE_ERROR and are then taken offline."""
        live = brokers & self.ctx.live_or_shutting_down_broker_ids
        async with self.operation():
            await self.rsm.handle_state_changes(self.ctx.replicas_on_brokers(live), ReplicaState.ONLINE)

    async def on_leader_and_isr_response(
        self, broker_id: int, partition_errors: Iterable[tuple[TopicPartition, int]]
    ) -> None:
        offline_dirs = self.ctx.replicas_on_offline_dirs.setdefault(broker_id, set())
        newly_offline = {
            tp
            for tp, code in partition_errors
            if code == ErrorCode.KAFKA_STORAGE_ERROR and tp not in offline_dirs and self.ctx.assignment(tp) is not None
        }
        if not newly_offline:
            return
        log.warning(
            "broker %d reports %d replicas on offline log dirs: %s",
            broker_id,
            len(newly_offline),
            sorted(str(tp) for tp in newly_offline)[:20],
        )
        offline_dirs.update(newly_offline)
        await self.on_replicas_become_offline({PartitionAndReplica(tp, broker_id) for tp in newly_offline})

    # --- topics ---------------------------------------------------------------------------------

    async def on_new_partitions(self, partitions: list[TopicPartition]) -> None:
        """New partitions: NewPartition, NewReplica, then OnlinePartition and OnlineReplica."""
        if not partitions:
            return
        replicas = self.ctx.all_replicas(partitions)
        async with self.operation():
            await self.psm.handle_state_changes(partitions, PartitionState.NEW)
            await self.rsm.handle_state_changes(replicas, ReplicaState.NEW)
            await self.psm.handle_state_changes(partitions, PartitionState.ONLINE)
            await self.rsm.handle_state_changes(replicas, ReplicaState.ONLINE)

    async def retry_offline_partitions(self, topics: set[str] | None = None) -> None:
        async with self.operation():
            await self.psm.trigger_online_partition_state_change(topics)

    async def send_update_metadata(self, brokers: Iterable[int], partitions: Iterable[TopicPartition]) -> None:
        async with self.operation() as batch:
            batch.add_update_metadata(brokers, partitions)
