"""One term of office of an active controller: everything a failover sets up and a resignation
takes down, in one object. It owns the broker channels, the managers, the timers and the
ZooKeeper watch table; `open()` is KafkaController.onControllerFailover after the election,
`close()` is onControllerResignation, and `handle()` runs the events only an active
controller handles. A term is never reused: the next election builds a new one, so nothing of
a previous term (a timer, a watch callback, a manager's cache) can act in a later one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, assert_never

from controller_svc.adapters.channel_manager import ApiKind, ChannelManager, ClientFactory
from controller_svc.adapters.zk import paths
from controller_svc.adapters.zk.client import CreateOp, WatchKind
from controller_svc.common import metrics
from controller_svc.common.errors import ErrorCode, ZkNodeExistsError
from controller_svc.common.model import TopicPartition
from controller_svc.common.self_stop import SelfStop
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.common.tasks import cancel_and_wait, spawn
from controller_svc.controller import events as ev
from controller_svc.controller.controlled_shutdown import ShutdownOutcome, controlled_shutdown
from controller_svc.controller.leader_balance import LeaderBalancer
from controller_svc.controller.notifications import NotificationProcessor
from controller_svc.controller.notifications import clear_before_load as clear_notifications_before_load
from controller_svc.controller.partition_manager import PartitionManager
from controller_svc.controller.partition_state_machine import PartitionStateStore
from controller_svc.controller.ports import ControllerStore, StandbyCopy
from controller_svc.controller.reassignment import ReassignmentManager
from controller_svc.controller.settings import ControllerSettings
from controller_svc.controller.topic_admin import TopicAdmin
from controller_svc.controller.topic_deletion import TopicDeletionManager
from controller_svc.core.context import ControllerContext, diff_brokers
from controller_svc.core.replica_epochs import MetadataDigests, ReplicaEpochs, held_epochs
from kcontroller.v1 import broker_pb2

log = logging.getLogger(__name__)

T = TypeVar("T")
WatchCallback = Callable[[WatchKind, str], None]


def hold_event_loop(seconds: float) -> None:
    """Compute in pure Python for `seconds` without yielding, holding the GIL as real work does
    (time.sleep would release it): the fault `debug.failover.hold.loop.ms` injects."""
    log.warning("fault injection: holding the event loop for %.0f ms", seconds * 1000)
    deadline = time.monotonic() + seconds
    spins = 0
    while time.monotonic() < deadline:
        spins += sum(range(1000)) & 1


class PhaseClock:
    """Milliseconds per named phase of a failover, for `controller.failover_completed`: where a
    slow failover spent its time, without a profiler."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._last = time.monotonic()

    def __repr__(self) -> str:
        return f"PhaseClock({self.phases})"

    def mark(self, phase: str) -> None:
        now = time.monotonic()
        self.phases[phase] = round(self.phases.get(phase, 0.0) + (now - self._last) * 1000, 1)
        self._last = now


@dataclass(frozen=True, slots=True)
class FailoverTimings:
    load_ms: float
    total_ms: float
    live_brokers: tuple[int, ...]
    # LeaderAndIsr of the start-up: sent, and skipped because the broker held the epoch
    leader_and_isr_sent: int = 0
    leader_and_isr_skipped: int = 0
    # UpdateMetadata's partition states, summed over brokers: sent, and left out because the
    # broker's metadata digest of their topic matched
    metadata_states_sent: int = 0
    metadata_states_skipped: int = 0
    brokers_reported: tuple[int, ...] = ()
    replica_epochs_ms: float = 0.0
    # "warm": from the standby copy (warm_reread znodes re-read to verify it); "cold": read
    # from ZooKeeper, for cold_reason.
    load_mode: str = "cold"
    warm_reread: int = 0
    cold_reason: str = ""
    phases_ms: dict[str, float] = dataclasses.field(default_factory=dict)


class TermOfOffice:
    def __init__(
        self,
        settings: ControllerSettings,
        ctx: ControllerContext,
        store: ControllerStore,
        partition_states: PartitionStateStore,
        state_log: StateChangeLog,
        client_factory: ClientFactory,
        put: Callable[[ev.ControllerEvent], object],
        self_stop: SelfStop | None = None,
        standby: StandbyCopy | None = None,
    ) -> None:
        self._self_stop = self_stop
        self._standby = standby
        self.settings = settings
        self.id = settings.controller_id
        self.ctx = ctx
        self.store = store
        self.partition_states = partition_states
        self.state_log = state_log
        self._client_factory = client_factory
        self._put = put
        self.epoch = ctx.epoch
        self.closed = False
        self.channels: ChannelManager | None = None
        self._managers: _Managers | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self._watched_brokers: set[int] = set()

    def __repr__(self) -> str:
        return f"TermOfOffice(controller={self.id}, epoch={self.epoch}, closed={self.closed})"

    @property
    def managers(self) -> _Managers:
        if self._managers is None:
            raise RuntimeError("the term of office is not open")
        return self._managers

    @property
    def partitions(self) -> PartitionManager | None:
        return self._managers.partitions if self._managers is not None else None

    # --- the watch table: failover registers it, resignation removes the same one -------------

    def watches(self) -> tuple[tuple[bool, str, WatchCallback], ...]:
        """(children?, path, callback) of every watch a term holds (KafkaController's
        childChangeHandlers and nodeChangeHandlers registered by onControllerFailover and
        unregistered by onControllerResignation). Per-broker and per-topic data watches follow
        the brokers and topics themselves."""
        return (
            (True, paths.BROKER_IDS, self._enqueue(ev.BrokerChange)),
            (True, paths.BROKER_TOPICS, self._enqueue(ev.TopicChange)),
            (True, paths.ISR_CHANGE_NOTIFICATION, self._enqueue(ev.IsrChangeNotification)),
            (True, paths.LOG_DIR_EVENT_NOTIFICATION, self._enqueue(ev.LogDirEventNotification)),
            (True, paths.CONFIG_CHANGES, self._enqueue(ev.TopicConfigChange)),
            (True, paths.DELETE_TOPICS, self._enqueue(ev.TopicDeletion)),
            # Every kind of event is enqueued, deletion included: the handler's read re-arms the
            # watch (as an exists watch once the znode is gone), so the next request is seen.
            (False, paths.REASSIGN_PARTITIONS, self._enqueue(ev.ZkPartitionReassignment)),
            (False, paths.PREFERRED_REPLICA_ELECTION, self._enqueue(ev.ZkPreferredReplicaElection)),
        )

    def _enqueue(self, kind: Callable[[], ev.TermEvent]) -> WatchCallback:
        def callback(_kind: WatchKind, _path: str) -> None:
            if not self.closed:
                self._put(kind())

        return callback

    def _on_broker_data(self, kind: WatchKind, path: str) -> None:
        if kind == WatchKind.DATA_CHANGED and not self.closed:
            self._put(ev.BrokerModifications(broker_id=int(path.rsplit("/", 1)[1])))

    def _on_topic_data(self, kind: WatchKind, path: str) -> None:
        if kind == WatchKind.DATA_CHANGED and not self.closed:
            self._put(ev.PartitionModifications(topic=path.rsplit("/", 1)[1]))

    def _watch_broker_data(self, broker_ids: set[int]) -> None:
        for broker_id in broker_ids - self._watched_brokers:
            self.store.watch_data(paths.broker_path(broker_id), self._on_broker_data)
        for broker_id in self._watched_brokers - broker_ids:
            self.store.unwatch(paths.broker_path(broker_id))
        self._watched_brokers = set(broker_ids)

    def _on_task_death(self, name: str, error: BaseException) -> None:
        if not self.closed:
            self._put(ev.TermTaskDied(task_name=name, error=repr(error), epoch=self.epoch))

    # --- open and close ---------------------------------------------------------------------

    async def open(self) -> FailoverTimings:
        """KafkaController.onControllerFailover after the election: watches, metadata, channels,
        managers, then the start-up of the state machines, reassignments and deletions."""
        for children, path, callback in self.watches():
            (self.store.watch_children if children else self.store.watch_data)(path, callback)
        started = time.monotonic()
        clock = PhaseClock()
        last_config_change = await clear_notifications_before_load(self.store)
        brokers = await self.store.load_brokers(watch=True)
        self.ctx.live_brokers = dict(brokers)
        self.ctx.known_broker_ids.update(brokers)
        self._watch_broker_data(set(brokers))
        clock.mark("notifications_and_brokers")
        warm = await self._standby.take(self.ctx) if self._standby is not None else "disabled"
        if isinstance(warm, str):
            metrics.FAILOVER_LOADS.labels("cold").inc()
            await self.store.load_all(self.ctx)
        clock.mark("load")
        loaded = time.monotonic()
        if self.settings.debug_failover_hold_loop_s > 0:
            hold_event_loop(self.settings.debug_failover_hold_loop_s)
        self.channels = ChannelManager(
            self.ctx.epoch,
            self.state_log,
            self.settings.request_timeout_s,
            self.settings.retry_backoff_s,
            self._client_factory,
            on_sender_death=self._on_task_death,
            self_stop=self._self_stop,
        )
        for info in brokers.values():
            self.channels.add_broker(info)
        m = self._managers = _Managers.build(self, last_config_change)
        m.topic_admin.watch_topics(set(self.ctx.assignments) | set(self.ctx.malformed_topics))
        # Topics queued for deletion must be known before the state machines start up
        # (TopicDeletionManager.init). With delete.topic.enable=false none is queued: they stay
        # online, and process_requests below removes the requests from ZooKeeper.
        pending_deletions = set(await self.store.children(paths.DELETE_TOPICS, watch=True))
        if self.settings.delete_topic_enable:
            self.ctx.topics_to_be_deleted.update(pending_deletions & set(self.ctx.assignments))
        clock.mark("channels_and_managers")
        asked = time.monotonic()
        reported: ReplicaEpochs | None = None
        digests: MetadataDigests | None = None
        if self.settings.failover_replica_epochs_enable:
            # The state machines' start-up (pure, CPU) runs while the brokers compose their answers.
            reported, digests = await self._replica_epochs(
                set(brokers), while_waiting=m.partitions.initialize_state_machines
            )
            clock.mark("replica_epochs_and_state_machines_init")
        replica_epochs_ms = (time.monotonic() - asked) * 1000
        sends = await m.partitions.start_up(reported, clock.mark, digests)
        # The failover's steps each end in a batch; the gauges (full scans) once, after the last.
        await self.in_operation(m.reassignment.abandon(self.ctx.topics_to_be_deleted), refresh_metrics=False)
        # Kafka's fetchTopicDeletionsInProgress: topics with a replica on a dead broker or a
        # partition being reassigned are ineligible before anything else runs, so that a
        # reassignment completing as it resumes below cannot start their deletion early.
        m.deletion.mark_ineligible(
            {tp.topic for tp in self.ctx.partitions_being_reassigned}
            | {
                r.tp.topic
                for topic in self.ctx.topics_to_be_deleted
                for r in self.ctx.all_replicas(self.ctx.partitions_for_topic(topic))
                if not self.ctx.is_replica_online(r.replica, r.tp, include_shutting_down=True)
            }
        )
        await self.in_operation(m.reassignment.start_up(), refresh_metrics=False)
        clock.mark("reassignments")
        await self.in_operation(m.deletion.process_requests(pending_deletions), refresh_metrics=False)
        # Kafka's onControllerFailover ends with tryTopicDeletion: the topics queued above were
        # already known to process_requests (not "fresh"), so nothing else would start them.
        await self.in_operation(m.deletion.resume(), refresh_metrics=False)
        clock.mark("deletions")
        await self.in_operation(m.balancer.process_zk_request())
        clock.mark("preferred_elections")
        if self.settings.auto_leader_rebalance_enable:
            self._rebalance_task = spawn(self._auto_rebalance_timer(), "auto-leader-rebalance", self._on_task_death)
        return FailoverTimings(
            load_ms=round((loaded - started) * 1000, 3),
            total_ms=round((time.monotonic() - started) * 1000, 3),
            live_brokers=tuple(sorted(brokers)),
            leader_and_isr_sent=sends.leader_and_isr_sent,
            leader_and_isr_skipped=sends.leader_and_isr_skipped,
            metadata_states_sent=sends.metadata_states_sent,
            metadata_states_skipped=sends.metadata_states_skipped,
            brokers_reported=tuple(sorted(reported or ())),
            replica_epochs_ms=round(replica_epochs_ms, 3),
            load_mode="cold" if isinstance(warm, str) else "warm",
            warm_reread=0 if isinstance(warm, str) else warm.reread,
            cold_reason=warm if isinstance(warm, str) else "",
            phases_ms=clock.phases,
        )

    async def _replica_epochs(
        self, broker_ids: set[int], while_waiting: Callable[[], Awaitable[None]] | None = None
    ) -> tuple[ReplicaEpochs, MetadataDigests]:
        """DescribeReplicaEpochs to every live broker, first in its queue; the answers that
        arrive within the timeout, and the metadata digests of those that sent them
        (core/replica_epochs.py says what they allow). A broker that refuses, fails or is slow
        is left out: it gets every LeaderAndIsr and every partition's UpdateMetadata. `while_waiting` runs
        once the questions are on their way; it must yield to the loop as it goes, so that
        answers arriving meanwhile are taken (at 1M partitions the state machines' start-up
        alone outlasted the timeout, which held the loop until the deadline had passed: every
        answer was then dropped, and 3M LeaderAndIsr sent)."""
        assert self.channels is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.failover_replica_epochs_timeout_s
        answers: dict[int, asyncio.Future[Any]] = {}
        for broker_id in sorted(broker_ids):
            answer: asyncio.Future[Any] = loop.create_future()
            request = broker_pb2.DescribeReplicaEpochsRequest(
                controller_id=self.id,
                controller_epoch=self.ctx.epoch,
                broker_epoch=self.ctx.broker_epoch(broker_id),
                metadata_digests=self.settings.failover_metadata_digests_enable,
            )
            if self.channels.send(
                broker_id,
                ApiKind.DESCRIBE_REPLICA_EPOCHS.value,
                request,
                _resolve(answer),
                single_attempt_timeout_s=self.settings.failover_replica_epochs_timeout_s,
            ):
                answers[broker_id] = answer
        for _ in range(3):
            await asyncio.sleep(0)  # the senders put the questions on the wire
        if while_waiting is not None:
            await while_waiting()
        if answers:
            await asyncio.wait(answers.values(), timeout=max(0.0, deadline - loop.time()))
        reported: dict[int, dict[str, dict[int, int]]] = {}
        digests: dict[int, dict[str, bytes]] = {}
        for broker_id, answer in sorted(answers.items()):
            if not answer.done():
                log.warning(
                    "broker %d did not report its replica epochs within %.1f s: it gets every LeaderAndIsr",
                    broker_id,
                    self.settings.failover_replica_epochs_timeout_s,
                )
                continue
            response = answer.result()
            if response is None:
                continue  # the one attempt failed (logged by the sender)
            if response.error_code:
                log.warning(
                    "broker %d refused to report its replica epochs (error %d): it gets every LeaderAndIsr",
                    broker_id,
                    response.error_code,
                )
                continue
            reported[broker_id] = held_epochs(response.topics)
            if self.settings.failover_metadata_digests_enable:
                # An empty list from a broker with an empty cache, or one that does not know the
                # field (then it gets every topic, as each digest is missing).
                digests[broker_id] = {d.topic: d.digest for d in response.metadata_digests}
            await asyncio.sleep(0)  # 600k replicas per broker at 1M partitions
        return reported, digests

    async def close(self) -> None:
        """KafkaController.onControllerResignation: every watch of the table, the per-broker and
        per-topic watches, the timers, the channels. Idempotent."""
        if self.closed:
            return
        self.closed = True
        for _children, path, _callback in self.watches():
            self.store.unwatch(path)
        await cancel_and_wait(self._rebalance_task)
        self._rebalance_task = None
        self._watch_broker_data(set())
        if self._managers is not None:
            self._managers.topic_admin.watch_topics(set())
            self._managers = None
        channels, self.channels = self.channels, None
        if channels is not None:
            await channels.close()

    async def _auto_rebalance_timer(self) -> None:
        await asyncio.sleep(self.settings.first_rebalance_delay_s)
        while True:
            self._put(ev.AutoPreferredReplicaLeaderElection())
            await asyncio.sleep(self.settings.leader_imbalance_check_interval_s)

    async def in_operation(self, work: Awaitable[T], refresh_metrics: bool = True) -> T:
        """Run a manager's step inside one request batch (sent when it ends); the gauges are
        recomputed after it unless a later step of the same operation will."""
        async with self.managers.partitions.operation(refresh_metrics):
            return await work

    # --- the events of an active controller ------------------------------------------------

    async def handle(self, event: ev.TermEvent) -> None:
        m = self.managers
        match event:
            case ev.BrokerChange() | ev.BrokerModifications():
                await self._process_broker_change()
            case ev.TopicChange():
                await m.topic_admin.process_topic_change()
            case ev.PartitionModifications():
                await m.topic_admin.process_partition_modifications(event.topic)
            case ev.CreateTopics():
                results = await m.topic_admin.create_topics(event.topics, event.validate_only)
                _answer(event, results)
            case ev.IsrChangeNotification():
                changed = await m.notifications.process_isr_changes()
                # Read once: a property (it used to be a full scan per changed partition).
                being_reassigned = self.ctx.partitions_being_reassigned
                reassigning = [tp for tp in changed if tp in being_reassigned]
                if reassigning:
                    await self.in_operation(m.reassignment.on_isr_change(reassigning))
            case ev.LogDirEventNotification():
                await m.notifications.process_log_dir_events()
            case ev.TopicConfigChange():
                await m.notifications.process_config_changes()
            case ev.LeaderAndIsrResponseReceived():
                await m.partitions.on_leader_and_isr_response(
                    event.broker_id, [(TopicPartition(t, p), code) for t, p, code in event.partition_errors]
                )
            case ev.TopicDeletion():
                requested = set(await self.store.children(paths.DELETE_TOPICS, watch=True))
                await self._abandon_reassignments_of(requested)
                await self.in_operation(m.deletion.process_requests(requested))
            case ev.DeleteTopics():
                _answer(event, await self._delete_topics(event.topics))
            case ev.StopReplicaResponseReceived():
                if event.broker_epoch not in (-1, self.ctx.broker_epoch(event.broker_id)):
                    # Sent to a previous incarnation of the broker (it bounced since; its answer,
                    # often STALE_BROKER_EPOCH, must not fail the deletion restarted for the new one).
                    log.info("ignoring a StopReplica answer from broker %d's previous incarnation", event.broker_id)
                    return
                answers = [(TopicPartition(t, p), code) for t, p, code in event.partition_errors]
                await self.in_operation(m.deletion.on_stop_replica_response(event.broker_id, event.error_code, answers))
            case ev.ZkPartitionReassignment():
                await self.in_operation(m.reassignment.process_zk_plan())
            case ev.ApiPartitionReassignment():
                requests = [(TopicPartition(t, p), r) for t, p, r in event.requests]
                _answer(event, await self.in_operation(m.reassignment.alter(requests)))
            case ev.ListPartitionReassignments():
                _answer(event, m.reassignment.list([TopicPartition(t, p) for t, p in event.partitions]))
            case ev.ZkPreferredReplicaElection():
                await self.in_operation(m.balancer.process_zk_request())
            case ev.ElectLeaders():
                wanted = [TopicPartition(t, p) for t, p in event.partitions] or None
                _answer(event, await self.in_operation(m.balancer.elect(wanted, event.election_type)))
            case ev.AutoPreferredReplicaLeaderElection():
                await self.in_operation(m.balancer.auto_rebalance())
            case ev.ControlledShutdown():
                outcome: ShutdownOutcome = await controlled_shutdown(
                    self.ctx,
                    m.partitions,
                    self.state_log,
                    event.broker_id,
                    event.broker_epoch,
                    answer=functools.partial(_answer, event),
                )
                _answer(event, outcome)  # the refusals (a success was answered already)
                # The gauges after the answer, once its handler has had the loop: the broker acts
                # on it meanwhile (recounting the written topics first kept it waiting).
                for _ in range(3):
                    await asyncio.sleep(0)
                await m.partitions.refresh_gauges()
            case _:
                assert_never(event)

    # --- brokers --------------------------------------------------------------------------

    async def _process_broker_change(self) -> None:
        m = self.managers
        assert self.channels is not None
        current = await self.store.load_brokers(watch=True)
        self._watch_broker_data(set(current))
        diff = diff_brokers(self.ctx.live_brokers, current)
        if not diff:
            return
        log.info(
            "broker change: new %s, dead %s, bounced %s, endpoints changed %s",
            sorted(diff.new),
            sorted(diff.dead),
            sorted(diff.bounced),
            sorted(diff.changed_endpoints),
        )
        self.state_log.record(
            "broker.change",
            new=sorted(diff.new),
            dead=sorted(diff.dead),
            bounced=sorted(diff.bounced),
            endpoints_changed=sorted(diff.changed_endpoints),
            controller_epoch=self.ctx.epoch,
        )
        failed = diff.dead | diff.bounced
        for broker_id in failed:
            self.channels.remove_broker(broker_id)
            self.ctx.live_brokers.pop(broker_id, None)
        # An endpoint change is no failure (processBrokerModification): the broker stays live,
        # its channel moves to the new endpoint with its queue.
        for broker_id in diff.changed_endpoints:
            self.ctx.live_brokers[broker_id] = current[broker_id]
            self.channels.update_broker(current[broker_id])
        self.ctx.known_broker_ids.update(current)
        if failed:
            await m.partitions.on_broker_failure(set(failed))
            deleting = self.ctx.replicas_on_brokers(failed, self.ctx.topics_to_be_deleted)
            if deleting:
                await self.in_operation(m.deletion.fail_replica_deletion(deleting))
        started = diff.new | diff.bounced
        for broker_id in started:
            self.ctx.live_brokers[broker_id] = current[broker_id]
            self.channels.add_broker(current[broker_id])
        if diff.changed_endpoints and not started:
            # BrokerModifications: only endpoints changed; everyone learns the new ones.
            await m.partitions.send_update_metadata(self.ctx.live_or_shutting_down_broker_ids, [])
        if started:
            await m.partitions.on_broker_startup(set(started))
            await self.in_operation(m.reassignment.resume_for_brokers(set(started)))
            topics = self.ctx.topics_on_brokers(started)
            await self.in_operation(m.deletion.resume_for(topics))

    def _on_stop_replica_response(
        self, broker_id: int, response: Any, deleted: frozenset[TopicPartition], broker_epoch: int = -1
    ) -> None:
        """Kafka's StopReplica callback: only the partitions this request deleted (delete=true)
        answer for topic deletion; a request-level error answers for each of them. A response to
        a StopReplica(delete=false) of the same replica must not count as its deletion."""
        top_level = int(response.error_code)
        if top_level:
            answers = [(tp.topic, tp.partition, top_level) for tp in sorted(deleted)]
        else:
            answers = [
                (e.topic, e.partition, int(e.error_code))
                for e in response.partition_errors
                if TopicPartition(e.topic, e.partition) in deleted
            ]
        if answers and not self.closed:
            self._put(
                ev.StopReplicaResponseReceived(
                    broker_id=broker_id,
                    broker_epoch=broker_epoch,
                    error_code=top_level,
                    partition_errors=tuple(answers),
                )
            )

    def _on_leader_and_isr_response(self, broker_id: int, _api: str, response: Any) -> None:
        if self.closed:
            return
        # Only the partitions answered with an error travel on: the controller acts on
        # KAFKA_STORAGE_ERROR alone, and a response lists every partition of its request (30k
        # entries for a 10k-partition controlled shutdown, all NONE), which this callback, on
        # the controller's loop, turned into tuples one by one.
        self._put(
            ev.LeaderAndIsrResponseReceived(
                broker_id=broker_id,
                error_code=int(response.error_code),
                partition_errors=tuple(
                    (e.topic, e.partition, e.error_code) for e in response.partition_errors if e.error_code
                ),
            )
        )

    # --- topic deletion requests -----------------------------------------------------------

    async def _abandon_reassignments_of(self, topics: set[str]) -> None:
        if self.settings.delete_topic_enable:
            await self.in_operation(self.managers.reassignment.abandon(topics & set(self.ctx.assignments)))

    async def _delete_topics(self, topics: tuple[str, ...]) -> list[tuple[str, int, str]]:
        """DeleteTopics RPC: queue through /admin/delete_topics, exactly as kafka-topics does,
        so a controller that fails over finds the request in ZooKeeper."""
        results: list[tuple[str, int, str]] = []
        queue: list[str] = []
        for topic in topics:
            if topic not in self.ctx.assignments:
                results.append((topic, int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), f"topic {topic!r} does not exist"))
            elif not self.settings.delete_topic_enable:
                results.append((topic, int(ErrorCode.TOPIC_DELETION_DISABLED), "delete.topic.enable is false"))
            else:
                results.append((topic, 0, ""))
                queue.append(topic)
        for topic, code, message in results:
            if code:
                metrics.ADMIN_REQUEST_ERRORS.labels("DeleteTopics", ErrorCode(code).name).inc()
                log.warning("DeleteTopics %s refused: %s", topic, message)
        for topic in queue:
            try:
                await self.store.fenced_multi([CreateOp(f"{paths.DELETE_TOPICS}/{topic}")])
            except ZkNodeExistsError:
                pass  # already requested
        await self._abandon_reassignments_of(set(queue))
        await self.in_operation(self.managers.deletion.process_requests(set(queue)))
        return results


def _resolve(future: asyncio.Future[Any]) -> Callable[[int, str, Any], None]:
    def callback(_broker_id: int, _api: str, response: Any) -> None:
        if not future.done():
            future.set_result(response)

    return callback


def _answer(event: ev.ReplyEvent, result: object) -> None:
    if not event.reply.done():
        event.reply.set_result(result)


@dataclass(frozen=True, slots=True)
class _Managers:
    """The managers of one term, built together once the metadata is loaded."""

    partitions: PartitionManager
    topic_admin: TopicAdmin
    notifications: NotificationProcessor
    deletion: TopicDeletionManager
    reassignment: ReassignmentManager
    balancer: LeaderBalancer

    @staticmethod
    def build(term: TermOfOffice, last_config_change: str) -> _Managers:
        settings, ctx, store, state_log = term.settings, term.ctx, term.store, term.state_log
        assert term.channels is not None
        partitions = PartitionManager(
            term.id,
            ctx,
            term.partition_states,
            term.channels,
            state_log,
            lambda: settings.unclean_leader_election_enable,
            on_leader_and_isr_response=term._on_leader_and_isr_response,
            on_stop_replica_response=term._on_stop_replica_response,
            controller_endpoint=settings.grpc_endpoint,
        )
        deletion = TopicDeletionManager(term.id, ctx, store, partitions, state_log, settings.delete_topic_enable)
        return _Managers(
            partitions=partitions,
            topic_admin=TopicAdmin(term.id, ctx, store, partitions, term._on_topic_data),
            notifications=NotificationProcessor(term.id, ctx, store, partitions, last_config_change),
            deletion=deletion,
            reassignment=ReassignmentManager(term.id, ctx, store, partitions, deletion, state_log),
            balancer=LeaderBalancer(
                term.id, ctx, store, partitions, state_log, settings.leader_imbalance_per_broker_percentage
            ),
        )
