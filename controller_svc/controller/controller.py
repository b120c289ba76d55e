"""The controller: event dispatch and the controller's lifecycle (election, failover,
resignation). Decisions about partitions live in their own modules; this one wires them.

Mirrors KafkaController's election paths (reference section 5): Startup, ControllerChange,
Reelect, Expire, RegisterBrokerAndReelect, and maybeResign.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from controller_svc.adapters.channel_manager import ChannelManager, ClientFactory, grpc_client_factory
from controller_svc.adapters.zk import codecs, paths
from controller_svc.adapters.zk.client import CreateOp, MultiOpError, WatchKind, ZkClient
from controller_svc.adapters.zk.loads import load_all, load_brokers
from controller_svc.adapters.zk.partition_store import ZkPartitionStateStore
from controller_svc.adapters.zk.store import ControllerZkStore
from controller_svc.common import logging_setup, metrics
from controller_svc.common.errors import (
    ControllerEpochCorruptError,
    ControllerError,
    ControllerMovedError,
    CorruptZnodeError,
    ErrorCode,
    IllegalStateError,
    NotControllerError,
    ZkNodeExistsError,
    ZkUnavailableError,
)
from controller_svc.common.model import TopicPartition
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.common.tasks import cancel_and_wait, spawn
from controller_svc.controller import events as ev
from controller_svc.controller.controlled_shutdown import ShutdownOutcome, controlled_shutdown
from controller_svc.controller.leader_balance import LeaderBalancer
from controller_svc.controller.notifications import NotificationProcessor
from controller_svc.controller.notifications import clear_before_load as clear_notifications_before_load
from controller_svc.controller.partition_manager import PartitionManager
from controller_svc.controller.reassignment import ReassignmentManager
from controller_svc.controller.topic_admin import TopicAdmin
from controller_svc.controller.topic_deletion import TopicDeletionManager
from controller_svc.core.context import ControllerContext, diff_brokers

log = logging.getLogger(__name__)

T = TypeVar("T")


def hold_event_loop(seconds: float) -> None:
    """Compute in pure Python for `seconds` without yielding, holding the GIL as real work does
    (time.sleep would release it): the fault `debug.failover.hold.loop.ms` injects."""
    log.warning("fault injection: holding the event loop for %.0f ms", seconds * 1000)
    deadline = time.monotonic() + seconds
    spins = 0
    while time.monotonic() < deadline:
        spins += sum(range(1000)) & 1


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    controller_id: int
    grpc_endpoint: str
    metrics_endpoint: str
    request_timeout_s: float = 30.0
    retry_backoff_s: float = 0.1
    election_retry_s: float = 2.0
    unclean_leader_election_enable: bool = False
    delete_topic_enable: bool = True
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_s: float = 300.0
    # Kafka runs the first automatic rebalance 5 s after failover.
    first_rebalance_delay_s: float = 5.0
    # Fault injection: hold the event loop this long after the failover's load (0: off).
    debug_failover_hold_loop_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    responder_id: int
    active: bool
    active_controller_id: int
    active_controller_endpoint: str
    controller_epoch: int
    live_brokers: tuple[Any, ...]
    topic_count: int
    partition_count: int
    offline_partition_count: int = 0
    preferred_replica_imbalance_count: int = 0
    partitions: tuple[tuple[TopicPartition, Any, Any], ...] = ()  # (tp, assignment, state)
    topic_ids: tuple[tuple[str, str], ...] = ()


class Controller:
    def __init__(
        self,
        settings: ControllerSettings,
        zk: ZkClient,
        state_log: StateChangeLog,
        client_factory: ClientFactory = grpc_client_factory,
    ) -> None:
        self.settings = settings
        self.id = settings.controller_id
        self.zk = zk
        self.store = ControllerZkStore(zk)
        self.state_log = state_log
        self.context = ControllerContext()
        self.events = ev.EventManager(self._process)
        self._client_factory = client_factory
        self.channels: ChannelManager | None = None
        self.partitions: PartitionManager | None = None
        self.topic_admin: TopicAdmin | None = None
        self.notifications: NotificationProcessor | None = None
        self.deletion: TopicDeletionManager | None = None
        self.reassignment: ReassignmentManager | None = None
        self.balancer: LeaderBalancer | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self.active_controller_id = -1
        self.is_active = False
        self.election_blocked: str | None = None
        # When this process first saw /controller missing (ms): the cluster's loss of its controller,
        # recorded with our election for the failover timelines of the analytics.
        self.vacancy_seen_ms: int | None = None
        self._retry_task: asyncio.Task[None] | None = None
        self._endpoint_task: asyncio.Task[None] | None = None
        self._watched_brokers: set[int] = set()
        # Called when this controller becomes active / resigns (e.g. gRPC health status).
        self.on_role_change: Callable[[bool], None] | None = None

    def __repr__(self) -> str:
        return (
            f"Controller(id={self.id}, active={self.is_active}, epoch={self.context.epoch}, "
            f"active_controller_id={self.active_controller_id})"
        )

    # --- lifecycle ------------------------------------------------------------------------------

    def wire_zk_callbacks(self) -> None:
        """Hooks for the ZooKeeper client; they only enqueue (KafkaController's handlers)."""
        self.zk.watch_data(paths.CONTROLLER, self._on_controller_znode)
        self.zk.watch_data(paths.CONTROLLER_EPOCH, self._on_epoch_znode)

    def on_session_lost(self) -> None:
        self.events.clear_and_put(ev.Expire())

    def on_new_session(self) -> ev.QueuedEvent:
        return self.events.put(ev.RegisterBrokerAndReelect())

    def _on_controller_znode(self, kind: WatchKind, _path: str) -> None:
        if kind == WatchKind.DELETED and self.vacancy_seen_ms is None:
            self.vacancy_seen_ms = int(time.time() * 1000)
        self.events.put(ev.Reelect() if kind == WatchKind.DELETED else ev.ControllerChange())

    def _on_epoch_znode(self, kind: WatchKind, _path: str) -> None:
        if kind != WatchKind.DELETED:
            self.events.put(ev.ControllerEpochChange())

    def _on_broker_ids(self, _kind: WatchKind, _path: str) -> None:
        self.events.put(ev.BrokerChange())

    def _on_broker_data(self, kind: WatchKind, path: str) -> None:
        if kind == WatchKind.DATA_CHANGED:
            self.events.put(ev.BrokerModifications(broker_id=int(path.rsplit("/", 1)[1])))

    def _watch_broker_data(self, broker_ids: set[int]) -> None:
        for broker_id in broker_ids - self._watched_brokers:
            self.zk.watch_data(paths.broker_path(broker_id), self._on_broker_data)
        for broker_id in self._watched_brokers - broker_ids:
            self.zk.unwatch(paths.broker_path(broker_id))
        self._watched_brokers = set(broker_ids)

    def start(self) -> ev.QueuedEvent:
        self.wire_zk_callbacks()
        self.events.start()
        return self.events.put(ev.Startup())

    async def shutdown(self) -> None:
        """Resign, stop the event thread and background tasks (KafkaController.shutdown)."""
        await self.events.close()
        await cancel_and_wait(self._retry_task, self._endpoint_task, self._rebalance_task)
        if self.is_active:
            await self._on_resignation("shutdown")

    async def describe(self, include_partitions: bool = False, topics: tuple[str, ...] = ()) -> ClusterDescription:
        reply: asyncio.Future[ClusterDescription] = asyncio.get_running_loop().create_future()
        self.events.put(ev.DescribeCluster(reply=reply, include_partitions=include_partitions, topics=topics))
        return await reply

    async def submit(self, event: ev.ReplyEvent) -> Any:
        """Queue an event that answers through its reply future, and wait for the answer."""
        self.events.put(event)
        return await event.reply

    # --- dispatch --------------------------------------------------------------------------------

    async def _process(self, event: ev.Event) -> None:
        try:
            await self._dispatch(event)
        except ControllerMovedError as e:
            log.warning("controller %d: %s; resigning", self.id, e)
            await self._resign_after_moved(str(e))
            event.preempt()
        except IllegalStateError as e:
            # A bug in the controller's own bookkeeping (e.g. a request batch left pending):
            # Kafka resigns rather than act on state it cannot trust; the next controller
            # (possibly this one again) starts from ZooKeeper.
            log.exception("controller %d: illegal state while processing %r; resigning", self.id, event)
            if self.partitions is not None:
                self.partitions.batch.clear()
            await self._resign_after_moved(f"illegal state: {e}")
            event.preempt()

    async def _dispatch(self, event: ev.Event) -> None:
        match event:
            case ev.Startup():
                self._register_endpoint_in_background()
                await self._elect()
            case ev.ControllerChange():
                await self._maybe_resign()
            case ev.Reelect():
                await self._maybe_resign()
                await self._elect()
            case ev.Expire():
                self.active_controller_id = -1
                if self.is_active:
                    await self._on_resignation("zookeeper session expired")
            case ev.RegisterBrokerAndReelect():
                self._register_endpoint_in_background()
                await self._maybe_resign()
                await self._elect()
            case ev.ControllerEpochChange() | ev.RetryElection():
                if self.election_blocked is not None or (not self.is_active and self.active_controller_id == -1):
                    await self._elect()
                elif self.is_active:
                    await self._check_epoch_fence()
                    await self._maybe_resign()
            case ev.DescribeCluster():
                await self._describe(event)
            case ev.ReplyEvent() if not self.is_active:
                event.reply.set_exception(NotControllerError(active_controller_id=self.active_controller_id))
            case _ if not self.is_active:
                log.debug("controller %d is not active: ignoring %r", self.id, event)
            case ev.BrokerChange() | ev.BrokerModifications():
                await self._process_broker_change()
            case ev.TopicChange():
                assert self.topic_admin is not None
                await self.topic_admin.process_topic_change()
            case ev.PartitionModifications():
                assert self.topic_admin is not None
                await self.topic_admin.process_partition_modifications(event.topic)
            case ev.CreateTopics():
                assert self.topic_admin is not None
                results = await self.topic_admin.create_topics(event.topics, event.validate_only)
                if not event.reply.done():
                    event.reply.set_result(results)
            case ev.IsrChangeNotification():
                assert self.notifications is not None and self.reassignment is not None
                changed = await self.notifications.process_isr_changes()
                reassigning = [tp for tp in changed if tp in self.context.partitions_being_reassigned]
                if reassigning:
                    await self._in_operation(self.reassignment.on_isr_change(reassigning))
            case ev.TopicDeletion():
                await self._process_topic_deletion()
            case ev.DeleteTopics():
                deleted = await self._delete_topics(event.topics)
                if not event.reply.done():
                    event.reply.set_result(deleted)
            case ev.StopReplicaResponseReceived() if event.broker_epoch not in (-1, self.context.broker_epoch(
                event.broker_id
            )):
                # Sent to a previous incarnation of the broker (it bounced since; its answer,
                # often STALE_BROKER_EPOCH, must not fail the deletion restarted for the new one).
                log.info("ignoring a StopReplica answer from broker %d's previous incarnation", event.broker_id)
            case ev.StopReplicaResponseReceived():
                assert self.deletion is not None
                await self._in_operation(
                    self.deletion.on_stop_replica_response(
                        event.broker_id,
                        event.error_code,
                        [(TopicPartition(t, p), code) for t, p, code in event.partition_errors],
                    )
                )
            case ev.ZkPartitionReassignment():
                assert self.reassignment is not None
                await self._in_operation(self.reassignment.process_zk_plan())
            case ev.ApiPartitionReassignment():
                assert self.reassignment is not None
                requests = [(TopicPartition(t, p), r) for t, p, r in event.requests]
                alter_results = await self._in_operation(self.reassignment.alter(requests))
                if not event.reply.done():
                    event.reply.set_result(alter_results)
            case ev.ListPartitionReassignments():
                assert self.reassignment is not None
                listing = self.reassignment.list([TopicPartition(t, p) for t, p in event.partitions])
                if not event.reply.done():
                    event.reply.set_result(listing)
            case ev.ZkPreferredReplicaElection():
                assert self.balancer is not None
                await self._in_operation(self.balancer.process_zk_request())
            case ev.ElectLeaders():
                assert self.balancer is not None
                wanted = [TopicPartition(t, p) for t, p in event.partitions] or None
                outcomes = await self._in_operation(self.balancer.elect(wanted, event.election_type))
                if not event.reply.done():
                    event.reply.set_result(outcomes)
            case ev.AutoPreferredReplicaLeaderElection():
                assert self.balancer is not None
                await self._in_operation(self.balancer.auto_rebalance())
            case ev.ControlledShutdown():
                assert self.partitions is not None
                outcome: ShutdownOutcome = await controlled_shutdown(
                    self.context, self.partitions, self.state_log, event.broker_id, event.broker_epoch
                )
                if not event.reply.done():
                    event.reply.set_result(outcome)
            case ev.LogDirEventNotification():
                assert self.notifications is not None
                await self.notifications.process_log_dir_events()
            case ev.TopicConfigChange():
                assert self.notifications is not None
                await self.notifications.process_config_changes()
            case ev.LeaderAndIsrResponseReceived():
                assert self.partitions is not None
                await self.partitions.on_leader_and_isr_response(
                    event.broker_id, [(TopicPartition(t, p), code) for t, p, code in event.partition_errors]
                )
            case _:
                log.error("unknown event %r", event)
                event.preempt()

    # --- election (reference section 5) ----------------------------------------------------------

    async def _read_active_controller(self) -> int:
        active = await self.store.read_active_controller(watch=True)
        if active is None:
            self.active_controller_id = -1
            if self.vacancy_seen_ms is None:
                self.vacancy_seen_ms = int(time.time() * 1000)
            return -1
        if active.controller_id == self.id and active.ephemeral_owner == self.zk.session_id and not self.is_active:
            # /controller names us from before a resignation of this same session (for
            # instance the epoch was bumped behind our back): release it so a real election runs.
            log.warning("controller %d: /controller is ours but we are not active; deleting it", self.id)
            await self.store.delete_controller_if_owned()
            self.active_controller_id = -1
            return -1
        self.active_controller_id = active.controller_id
        self.vacancy_seen_ms = None
        return active.controller_id

    async def _elect(self) -> None:
        if await self._read_active_controller() != -1:
            log.debug("controller %d: %d is already the controller", self.id, self.active_controller_id)
            self._set_election_blocked(None)
            return
        try:
            fence = await self.store.register_controller_and_increment_epoch(self.id)
        except ControllerEpochCorruptError as e:
            self._set_election_blocked(str(e))
            return
        except ControllerMovedError as e:
            self._set_election_blocked(None)
            self.vacancy_seen_ms = None
            log.info("controller %d lost the election: %s", self.id, e)
            await self._maybe_resign()
            return
        except ZkUnavailableError as e:
            log.warning("controller %d: election failed for now (%s); retrying", self.id, e)
            self._schedule_election_retry()
            return
        self._set_election_blocked(None)
        self.active_controller_id = self.id
        self.context.epoch = fence.epoch
        self.context.epoch_zk_version = fence.zk_version
        logging_setup.set_controller_epoch(fence.epoch)  # from this line on, logs carry the new epoch
        log.info("controller %d elected with epoch %d (epoch zkVersion %d)", self.id, fence.epoch, fence.zk_version)
        try:
            await self._on_controller_failover()
        except ControllerMovedError:
            raise
        except Exception as e:
            # Kafka's triggerControllerMove: give the role up rather than run half-initialised.
            log.exception("controller %d: failover failed; resigning and releasing /controller", self.id)
            await self._resign_after_moved(f"failover failed: {e}")

    def _set_election_blocked(self, reason: str | None) -> None:
        if reason is None:
            if self.election_blocked is not None:
                log.warning("controller %d: elections resume", self.id)
            self.election_blocked = None
            metrics.ELECTION_BLOCKED.set(0)
            return
        if self.election_blocked != reason:
            log.error("controller %d: refusing to elect a controller: %s", self.id, reason)
        self.election_blocked = reason
        metrics.ELECTION_BLOCKED.set(1)
        self._schedule_election_retry()

    def _schedule_election_retry(self) -> None:
        if self._retry_task is not None and not self._retry_task.done():
            return

        async def retry_later() -> None:
            await asyncio.sleep(self.settings.election_retry_s)
            self.events.put(ev.RetryElection())

        self._retry_task = spawn(retry_later(), "controller-election-retry")

    async def _check_epoch_fence(self) -> None:
        """/controller_epoch changed while we are active: if it is no longer at the version we
        set, another controller (or an operator) moved it; resign now rather than at our next
        write."""
        fence = self.store.fence
        got = await self.zk.get_or_none(paths.CONTROLLER_EPOCH, watch=True)
        if fence is not None and (got is None or got[1].version != fence.zk_version):
            raise ControllerMovedError(
                f"{paths.CONTROLLER_EPOCH} changed behind our back (version "
                f"{got[1].version if got else 'gone'}, ours {fence.zk_version})"
            )

    async def _maybe_resign(self) -> None:
        was_active = self.is_active
        active = await self.store.read_active_controller(watch=True)
        self.active_controller_id = active.controller_id if active else -1
        still_ours = (
            active is not None and active.controller_id == self.id and (active.ephemeral_owner == self.zk.session_id)
        )
        if was_active and not still_ours:
            await self._on_resignation(
                f"/controller now names {self.active_controller_id}" if active else "/controller was deleted"
            )

    async def _resign_after_moved(self, reason: str) -> None:
        if self.is_active:
            await self._on_resignation(reason)
        self.active_controller_id = -1
        try:
            if await self.store.delete_controller_if_owned():
                log.info("controller %d released /controller so that a new election runs", self.id)
            else:
                await self._read_active_controller()
        except ControllerError as e:
            log.warning("controller %d: could not check /controller after resigning: %s", self.id, e)

    def _term_watches(self) -> tuple[tuple[bool, str, Callable[[WatchKind, str], None]], ...]:
        """(children?, path, callback) of every watch a term of office holds: failover registers
        this table, resignation removes the same one (KafkaController.onControllerFailover's
        childChangeHandlers and nodeChangeHandlers, unregistered by onControllerResignation).
        Per-broker and per-topic data watches follow the brokers and topics themselves."""
        return (
            (True, paths.BROKER_IDS, self._on_broker_ids),
            (True, paths.BROKER_TOPICS, self._on_topics),
            (True, paths.ISR_CHANGE_NOTIFICATION, self._on_isr_change),
            (True, paths.LOG_DIR_EVENT_NOTIFICATION, self._on_log_dir_event),
            (True, paths.CONFIG_CHANGES, self._on_config_change),
            (True, paths.DELETE_TOPICS, self._on_delete_topics),
            (False, paths.REASSIGN_PARTITIONS, self._on_reassign_partitions),
            (False, paths.PREFERRED_REPLICA_ELECTION, self._on_preferred_election),
        )

    async def _on_controller_failover(self) -> None:
        """KafkaController.onControllerFailover: watches, metadata, channels, UpdateMetadata."""
        self.is_active = True
        metrics.ACTIVE_CONTROLLER_COUNT.set(1)
        metrics.CONTROLLER_EPOCH.set(self.context.epoch)
        logging_setup.set_controller_epoch(self.context.epoch)
        metrics.ELECTIONS_WON.inc()
        self.state_log.record(
            "controller.elected",
            controller_id=self.id,
            controller_epoch=self.context.epoch,
            vacancy_ts=self.vacancy_seen_ms,
        )
        self.vacancy_seen_ms = None
        if self.on_role_change is not None:
            self.on_role_change(True)
        for children, path, callback in self._term_watches():
            (self.zk.watch_children if children else self.zk.watch_data)(path, callback)
        started = time.monotonic()
        last_config_change = await clear_notifications_before_load(self.store)
        brokers = await load_brokers(self.zk, watch=True)
        self.context.live_brokers = dict(brokers)
        self.context.known_broker_ids.update(brokers)
        self._watch_broker_data(set(brokers))
        await load_all(self.zk, self.context)
        loaded = time.monotonic()
        if self.settings.debug_failover_hold_loop_s > 0:
            hold_event_loop(self.settings.debug_failover_hold_loop_s)
        self.channels = ChannelManager(
            self.context.epoch,
            self.state_log,
            self.settings.request_timeout_s,
            self.settings.retry_backoff_s,
            self._client_factory,
        )
        for info in brokers.values():
            self.channels.add_broker(info)
        self.partitions = PartitionManager(
            self.id,
            self.context,
            ZkPartitionStateStore(self.store),
            self.channels,
            self.state_log,
            lambda: self.settings.unclean_leader_election_enable,
            on_leader_and_isr_response=self._on_leader_and_isr_response,
            on_stop_replica_response=self._on_stop_replica_response,
            controller_endpoint=self.settings.grpc_endpoint,
        )
        self.topic_admin = TopicAdmin(self.id, self.context, self.store, self.partitions, self._on_topic_data)
        self.notifications = NotificationProcessor(
            self.id, self.context, self.store, self.partitions, last_config_change
        )
        self.topic_admin.watch_topics(set(self.context.assignments) | set(self.context.malformed_topics))
        self.deletion = TopicDeletionManager(
            self.id, self.context, self.store, self.partitions, self.state_log, self.settings.delete_topic_enable
        )
        self.reassignment = ReassignmentManager(
            self.id, self.context, self.store, self.partitions, self.deletion, self.state_log
        )
        self.balancer = LeaderBalancer(
            self.id,
            self.context,
            self.store,
            self.partitions,
            self.state_log,
            self.settings.leader_imbalance_per_broker_percentage,
        )
        # Topics queued for deletion must be known before the state machines start up
        # (TopicDeletionManager.init). With delete.topic.enable=false none is queued: they stay
        # online, and process_requests below removes the requests from ZooKeeper.
        pending_deletions = set(await self.zk.get_children_or_empty(paths.DELETE_TOPICS, watch=True))
        if self.settings.delete_topic_enable:
            self.context.topics_to_be_deleted.update(pending_deletions & set(self.context.assignments))
        await self.partitions.start_up()
        await self._in_operation(self.reassignment.abandon(self.context.topics_to_be_deleted))
        # Kafka's fetchTopicDeletionsInProgress: topics with a replica on a dead broker or a
        # partition being reassigned are ineligible before anything else runs, so that a
        # reassignment completing as it resumes below cannot start their deletion early.
        self.deletion.mark_ineligible(
            {tp.topic for tp in self.context.partitions_being_reassigned}
            | {
                r.tp.topic
                for r in self.context.all_replicas(self.context.all_partitions())
                if r.tp.topic in self.context.topics_to_be_deleted
                and not self.context.is_replica_online(r.replica, r.tp, include_shutting_down=True)
            }
        )
        await self._in_operation(self.reassignment.start_up())
        await self._in_operation(self.deletion.process_requests(pending_deletions))
        # Kafka's onControllerFailover ends with tryTopicDeletion: the topics queued above were
        # already known to process_requests (not "fresh"), so nothing else would start them.
        await self._in_operation(self.deletion.resume())
        await self._in_operation(self.balancer.process_zk_request())
        if self.settings.auto_leader_rebalance_enable:
            self._rebalance_task = spawn(self._auto_rebalance_timer(), "auto-leader-rebalance")
        self.state_log.record(
            "controller.failover_completed",
            controller_id=self.id,
            controller_epoch=self.context.epoch,
            load_ms=round((loaded - started) * 1000, 3),
            total_ms=round((time.monotonic() - started) * 1000, 3),
            partitions=self.context.partition_count,
            live_brokers=sorted(brokers),
        )
        log.info(
            "controller %d is active: epoch %d, %d live brokers, %d topics, %d partitions (loaded in %.0f ms)",
            self.id,
            self.context.epoch,
            len(brokers),
            len(self.context.assignments),
            self.context.partition_count,
            (loaded - started) * 1000,
        )

    async def _on_resignation(self, reason: str) -> None:
        """KafkaController.onControllerResignation: drop watches, channels and the context."""
        epoch = self.context.epoch
        self.is_active = False
        self.store.clear_fence()
        for _children, path, _callback in self._term_watches():
            self.zk.unwatch(path)
        await cancel_and_wait(self._rebalance_task)
        self._rebalance_task = None
        self._watch_broker_data(set())
        if self.topic_admin is not None:
            self.topic_admin.watch_topics(set())
        self.partitions = None
        self.topic_admin = None
        self.notifications = None
        self.deletion = None
        self.reassignment = None
        self.balancer = None
        channels, self.channels = self.channels, None
        if channels is not None:
            await channels.close()
        self.context.reset()
        metrics.reset_active_controller_gauges()
        metrics.RESIGNATIONS.inc()
        self.state_log.record("controller.resigned", controller_id=self.id, controller_epoch=epoch, reason=reason)
        log.warning("controller %d resigned (epoch %d): %s", self.id, epoch, reason)
        logging_setup.set_controller_epoch(-1)  # after the line that names the epoch we leave
        if self.on_role_change is not None:
            self.on_role_change(False)

    # --- brokers --------------------------------------------------------------------------------

    async def _process_broker_change(self) -> None:
        current = await load_brokers(self.zk, watch=True)
        self._watch_broker_data(set(current))
        diff = diff_brokers(self.context.live_brokers, current)
        if not diff:
            return
        log.info(
            "broker change: new %s, dead %s, bounced %s, endpoints changed %s",
            sorted(diff.new),
            sorted(diff.dead),
            sorted(diff.bounced),
            sorted(diff.changed_endpoints),
        )
        assert self.channels is not None and self.partitions is not None
        self.state_log.record(
            "broker.change",
            new=sorted(diff.new),
            dead=sorted(diff.dead),
            bounced=sorted(diff.bounced),
            endpoints_changed=sorted(diff.changed_endpoints),
            controller_epoch=self.context.epoch,
        )
        failed = diff.dead | diff.bounced
        for broker_id in failed:
            self.channels.remove_broker(broker_id)
            self.context.live_brokers.pop(broker_id, None)
        # An endpoint change is no failure (processBrokerModification): the broker stays live,
        # its channel moves to the new endpoint with its queue.
        for broker_id in diff.changed_endpoints:
            self.context.live_brokers[broker_id] = current[broker_id]
            self.channels.update_broker(current[broker_id])
        self.context.known_broker_ids.update(current)
        if failed:
            await self.partitions.on_broker_failure(set(failed))
            assert self.deletion is not None
            deleting = {
                r
                for r in self.context.replicas_on_brokers(failed)
                if self.context.is_topic_queued_for_deletion(r.tp.topic)
            }
            if deleting:
                await self._in_operation(self.deletion.fail_replica_deletion(deleting))
        started = diff.new | diff.bounced
        for broker_id in started:
            self.context.live_brokers[broker_id] = current[broker_id]
            self.channels.add_broker(current[broker_id])
        if diff.changed_endpoints and not (diff.new | diff.bounced):
            # BrokerModifications: only endpoints changed; everyone learns the new ones.
            await self.partitions.send_update_metadata(self.context.live_or_shutting_down_broker_ids, [])
        if diff.new | diff.bounced:
            await self.partitions.on_broker_startup(set(diff.new | diff.bounced))
            assert self.deletion is not None
            assert self.reassignment is not None
            await self._in_operation(self.reassignment.resume_for_brokers(set(diff.new | diff.bounced)))
            topics = {tp.topic for tp in self.context.partitions_on_brokers(diff.new | diff.bounced)}
            await self._in_operation(self.deletion.resume_for(topics))

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
        if answers:
            self.events.put(
                ev.StopReplicaResponseReceived(
                    broker_id=broker_id,
                    broker_epoch=broker_epoch,
                    error_code=top_level,
                    partition_errors=tuple(answers),
                )
            )

    def _on_leader_and_isr_response(self, broker_id: int, api: str, response: Any) -> None:
        self.events.put(
            ev.LeaderAndIsrResponseReceived(
                broker_id=broker_id,
                error_code=int(response.error_code),
                partition_errors=tuple((e.topic, e.partition, e.error_code) for e in response.partition_errors),
            )
        )

    async def _in_operation(self, work: Awaitable[T]) -> T:
        """Run a manager's step inside one request batch (sent when it ends)."""
        assert self.partitions is not None
        async with self.partitions.operation():
            return await work

    async def _process_topic_deletion(self) -> None:
        assert self.deletion is not None
        requested = set(await self.zk.get_children_or_empty(paths.DELETE_TOPICS, watch=True))
        await self._abandon_reassignments_of(requested)
        await self._in_operation(self.deletion.process_requests(requested))

    async def _abandon_reassignments_of(self, topics: set[str]) -> None:
        if self.settings.delete_topic_enable:
            assert self.reassignment is not None
            await self._in_operation(self.reassignment.abandon(topics & set(self.context.assignments)))

    async def _delete_topics(self, topics: tuple[str, ...]) -> list[tuple[str, int, str]]:
        """DeleteTopics RPC: queue through /admin/delete_topics, exactly as kafka-topics does,
        so a controller that fails over finds the request in ZooKeeper."""
        assert self.deletion is not None
        results: list[tuple[str, int, str]] = []
        queue: list[str] = []
        for topic in topics:
            if topic not in self.context.assignments:
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
            except MultiOpError as e:
                if not isinstance(e.cause, ZkNodeExistsError):
                    raise
        await self._abandon_reassignments_of(set(queue))
        await self._in_operation(self.deletion.process_requests(set(queue)))
        return results

    async def _auto_rebalance_timer(self) -> None:
        await asyncio.sleep(self.settings.first_rebalance_delay_s)
        while True:
            self.events.put(ev.AutoPreferredReplicaLeaderElection())
            await asyncio.sleep(self.settings.leader_imbalance_check_interval_s)

    def _on_delete_topics(self, _kind: WatchKind, _path: str) -> None:
        self.events.put(ev.TopicDeletion())

    # Every kind of event is enqueued, deletion included: the handler's read re-arms the watch
    # (as an exists watch once the znode is gone), so the next request is seen.
    def _on_reassign_partitions(self, _kind: WatchKind, _path: str) -> None:
        self.events.put(ev.ZkPartitionReassignment())

    def _on_preferred_election(self, _kind: WatchKind, _path: str) -> None:
        self.events.put(ev.ZkPreferredReplicaElection())

    def _on_topics(self, _kind: WatchKind, _path: str) -> None:
        self.events.put(ev.TopicChange())

    def _on_topic_data(self, kind: WatchKind, path: str) -> None:
        if kind == WatchKind.DATA_CHANGED:
            self.events.put(ev.PartitionModifications(topic=path.rsplit("/", 1)[1]))

    def _on_isr_change(self, _kind: WatchKind, _path: str) -> None:
        self.events.put(ev.IsrChangeNotification())

    def _on_log_dir_event(self, _kind: WatchKind, _path: str) -> None:
        self.events.put(ev.LogDirEventNotification())

    def _on_config_change(self, _kind: WatchKind, _path: str) -> None:
        self.events.put(ev.TopicConfigChange())

    # --- controller endpoints (for NOT_CONTROLLER answers and discovery) ------------------------

    def _register_endpoint_in_background(self) -> None:
        if self._endpoint_task is not None and not self._endpoint_task.done():
            self._endpoint_task.cancel()
        self._endpoint_task = spawn(self._register_endpoint(), "controller-endpoint-registration")

    async def _register_endpoint(self) -> None:
        path = paths.controller_endpoint_path(self.id)
        data = codecs.encode_controller_endpoint(self.id, self.settings.grpc_endpoint, self.settings.metrics_endpoint)
        while True:
            try:
                await self.zk.ensure_path(paths.CONTROLLER_ENDPOINTS)
                await self.zk.create(path, data, ephemeral=True)
                return
            except MultiOpError as e:
                if not isinstance(e.cause, ZkNodeExistsError):
                    log.warning("registering controller endpoint failed: %s", e)
            except ZkUnavailableError as e:
                log.warning("registering controller endpoint failed: %s", e)
            got = await self.zk.get_or_none(path)
            if got is not None and got[1].ephemeral_owner == self.zk.session_id:
                return
            if got is not None and self.is_active:
                # We hold /controller, so the id is ours: the old entry is from a previous run
                # of this controller whose session has not expired yet. Replace it.
                log.info("replacing %s left by session 0x%x", path, got[1].ephemeral_owner)
                try:
                    await self.zk.delete(path, version=got[1].version)
                except ControllerError:
                    pass
                continue
            if got is not None:
                log.warning(
                    "%s is held by another session (a previous run of controller %d?); waiting for it to expire",
                    path,
                    self.id,
                )
            await asyncio.sleep(1.0)

    async def controller_endpoint(self, controller_id: int) -> str:
        if controller_id < 0:
            return ""
        got = await self.zk.get_or_none(paths.controller_endpoint_path(controller_id))
        if got is None:
            return ""
        try:
            return codecs.decode_controller_endpoint(paths.controller_endpoint_path(controller_id), got[0])
        except CorruptZnodeError as e:
            log.warning("%s", e)
            return ""

    async def _describe(self, event: ev.DescribeCluster) -> None:
        if event.reply.done():
            return
        ctx = self.context
        active_id = self.id if self.is_active else self.active_controller_id
        partitions: tuple[tuple[TopicPartition, Any, Any], ...] = ()
        if event.include_partitions and self.is_active:
            wanted = set(event.topics)
            partitions = tuple(
                (tp, ctx.assignment(tp), ctx.partition_states.get(tp))
                for tp in sorted(ctx.all_partitions())
                if not wanted or tp.topic in wanted
            )
        description = ClusterDescription(
            responder_id=self.id,
            active=self.is_active,
            active_controller_id=active_id,
            active_controller_endpoint=(
                self.settings.grpc_endpoint if self.is_active else await self.controller_endpoint(active_id)
            ),
            controller_epoch=ctx.epoch,
            live_brokers=tuple(ctx.live_brokers[b] for b in sorted(ctx.live_brokers)),
            topic_count=len(ctx.assignments),
            partition_count=ctx.partition_count,
            offline_partition_count=self.partitions.psm.offline_partition_count() if self.partitions else 0,
            preferred_replica_imbalance_count=ctx.preferred_replica_imbalance_count() if self.is_active else 0,
            partitions=partitions,
            topic_ids=tuple(sorted(ctx.topic_ids.items())),
        )
        if not event.reply.done():
            event.reply.set_result(description)
