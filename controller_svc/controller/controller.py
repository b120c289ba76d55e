"""The controller: event dispatch and the controller's lifecycle (election, failover,
resignation). What an active controller sets up and does lives in its term of office
(`term.py`); decisions about partitions live in the managers.

Mirrors KafkaController's election paths (reference section 5): Startup, ControllerChange,
Reelect, Expire, RegisterBrokerAndReelect, and maybeResign.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from controller_svc.adapters.channel_manager import ClientFactory, grpc_client_factory
from controller_svc.adapters.zk import paths
from controller_svc.adapters.zk.client import WatchKind, ZkClient
from controller_svc.adapters.zk.partition_store import ZkPartitionStateStore
from controller_svc.adapters.zk.standby import StandbyMetadata
from controller_svc.adapters.zk.store import ControllerZkStore
from controller_svc.common import logging_setup, metrics
from controller_svc.common.errors import (
    ControllerEpochCorruptError,
    ControllerError,
    ControllerMovedError,
    IllegalStateError,
    NotControllerError,
    ZkUnavailableError,
)
from controller_svc.common.self_stop import SelfStop
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.common.tasks import cancel_and_wait, spawn
from controller_svc.controller import events as ev
from controller_svc.controller.endpoints import ClusterDescription, describe_cluster, read_endpoint, register_endpoint
from controller_svc.controller.ports import ControllerStore
from controller_svc.controller.replica_state_machine import ReplicaState
from controller_svc.controller.settings import ControllerSettings
from controller_svc.controller.term import TermOfOffice
from controller_svc.core.context import ControllerContext

log = logging.getLogger(__name__)

__all__ = ["ClusterDescription", "Controller", "ControllerSettings"]


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
        self.self_stop = (
            SelfStop(settings.debug_self_stop_dir, f"controller-{self.id}", state_log)
            if settings.debug_self_stop_dir
            else None
        )
        self._zk_store = ControllerZkStore(zk, self_stop=self.self_stop)
        self.store: ControllerStore = self._zk_store
        self.state_log = state_log
        self.context = ControllerContext()
        self.events = ev.EventManager(self._process)
        self._client_factory = client_factory
        # The term of office while this controller is active (None otherwise).
        self.term: TermOfOffice | None = None
        self.active_controller_id = -1
        self.election_blocked: str | None = None
        # When this process first saw /controller missing (ms): the cluster's loss of its controller,
        # recorded with our election for the failover timelines of the analytics.
        self.vacancy_seen_ms: int | None = None
        self._retry_task: asyncio.Task[None] | None = None
        self._endpoint_task: asyncio.Task[None] | None = None
        # The metadata copy kept while standing by, taken over at failover (None: load cold).
        self.standby = (
            StandbyMetadata(zk, settings.standby_refresh_interval_s, self.id, online_replica=ReplicaState.ONLINE)
            if settings.standby_warm_enable
            else None
        )
        # Called when this controller becomes active / resigns (e.g. gRPC health status).
        self.on_role_change: Callable[[bool], None] | None = None

    def __repr__(self) -> str:
        return (
            f"Controller(id={self.id}, active={self.is_active}, epoch={self.context.epoch}, "
            f"active_controller_id={self.active_controller_id})"
        )

    @property
    def is_active(self) -> bool:
        return self.term is not None

    # --- lifecycle ------------------------------------------------------------------------------

    def wire_zk_callbacks(self) -> None:
        """Hooks for the ZooKeeper client; they only enqueue (KafkaController's handlers)."""
        self.store.watch_data(paths.CONTROLLER, self._on_controller_znode)
        self.store.watch_data(paths.CONTROLLER_EPOCH, self._on_epoch_znode)

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

    def start(self) -> ev.QueuedEvent:
        self.wire_zk_callbacks()
        self.events.start()
        if self.standby is not None:
            self.standby.follow()
        return self.events.put(ev.Startup())

    async def shutdown(self) -> None:
        """Resign, stop the event thread and background tasks (KafkaController.shutdown)."""
        await self.events.close()
        await cancel_and_wait(self._retry_task, self._endpoint_task)
        if self.is_active:
            await self._on_resignation("shutdown")
        if self.standby is not None:
            await self.standby.close()

    async def describe(self, include_partitions: bool = False, topics: tuple[str, ...] = ()) -> ClusterDescription:
        reply: asyncio.Future[ClusterDescription] = asyncio.get_running_loop().create_future()
        self.events.put(ev.DescribeCluster(reply=reply, include_partitions=include_partitions, topics=topics))
        return await reply

    async def submit(self, event: ev.AdminRequest) -> Any:
        """Queue an event that answers through its reply future, and wait for the answer."""
        self.events.put(event)
        return await event.reply

    # --- dispatch --------------------------------------------------------------------------------

    async def _process(self, event: ev.ControllerEvent) -> None:
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
            if self.term is not None and self.term.partitions is not None:
                self.term.partitions.batch.clear()
            await self._resign_after_moved(f"illegal state: {e}")
            event.preempt()

    async def _dispatch(self, event: ev.ControllerEvent) -> None:
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
            case ev.TermTaskDied():
                if self.term is not None and self.term.epoch == event.epoch:
                    raise IllegalStateError(f"background task {event.task_name} died: {event.error}")
            case ev.ShutdownEventThread():
                pass  # the EventManager stops on it before dispatch
            case _:
                if self.term is not None:
                    await self.term.handle(event)
                elif isinstance(event, ev.ReplyEvent):
                    event.reply.set_exception(NotControllerError(active_controller_id=self.active_controller_id))
                else:
                    log.debug("controller %d is not active: ignoring %r", self.id, event)

    # --- election (reference section 5) ----------------------------------------------------------

    async def _read_active_controller(self) -> int:
        active = await self.store.read_active_controller(watch=True)
        if active is None:
            self.active_controller_id = -1
            if self.vacancy_seen_ms is None:
                self.vacancy_seen_ms = int(time.time() * 1000)
            return -1
        if active.controller_id == self.id and active.ephemeral_owner == self.store.session_id and not self.is_active:
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
        got = await self.store.get_or_none(paths.CONTROLLER_EPOCH, watch=True)
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
            active is not None and active.controller_id == self.id and (active.ephemeral_owner == self.store.session_id)
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

    async def _on_controller_failover(self) -> None:
        """KafkaController.onControllerFailover: a new term of office opens (watches, metadata,
        channels, managers, start-up); see TermOfOffice.open."""
        epoch = self.context.epoch
        metrics.ACTIVE_CONTROLLER_COUNT.set(1)
        metrics.CONTROLLER_EPOCH.set(epoch)
        logging_setup.set_controller_epoch(epoch)
        metrics.ELECTIONS_WON.inc()
        self.state_log.record(
            "controller.elected", controller_id=self.id, controller_epoch=epoch, vacancy_ts=self.vacancy_seen_ms
        )
        self.vacancy_seen_ms = None
        self.term = TermOfOffice(
            self.settings,
            self.context,
            self.store,
            ZkPartitionStateStore(self._zk_store),
            self.state_log,
            self._client_factory,
            self.events.put,
            self.self_stop,
            self.standby,
        )
        if self.on_role_change is not None:
            self.on_role_change(True)
        timings = await self.term.open()
        self.state_log.record(
            "controller.failover_completed",
            controller_id=self.id,
            controller_epoch=epoch,
            load_ms=timings.load_ms,
            total_ms=timings.total_ms,
            partitions=self.context.partition_count,
            live_brokers=list(timings.live_brokers),
            replica_epochs_ms=timings.replica_epochs_ms,
            brokers_reported=list(timings.brokers_reported),
            leader_and_isr_sent=timings.leader_and_isr_sent,
            leader_and_isr_skipped=timings.leader_and_isr_skipped,
            metadata_states_sent=timings.metadata_states_sent,
            metadata_states_skipped=timings.metadata_states_skipped,
            load_mode=timings.load_mode,
            warm_reread=timings.warm_reread,
            cold_reason=timings.cold_reason or None,
            phases_ms=timings.phases_ms,
        )
        log.info(
            "controller %d is active: epoch %d, %d live brokers, %d topics, %d partitions (loaded %s in %.0f ms)",
            self.id,
            epoch,
            len(timings.live_brokers),
            len(self.context.assignments),
            self.context.partition_count,
            timings.load_mode,
            timings.load_ms,
        )

    async def _on_resignation(self, reason: str) -> None:
        """KafkaController.onControllerResignation: the term of office closes (every watch,
        timer and channel it opened) and the context is dropped."""
        epoch = self.context.epoch
        term, self.term = self.term, None
        self.store.clear_fence()
        if term is not None:
            await term.close()
        self.context.reset()
        if self.standby is not None:
            self.standby.follow()
        metrics.reset_active_controller_gauges()
        metrics.RESIGNATIONS.inc()
        self.state_log.record("controller.resigned", controller_id=self.id, controller_epoch=epoch, reason=reason)
        log.warning("controller %d resigned (epoch %d): %s", self.id, epoch, reason)
        logging_setup.set_controller_epoch(-1)  # after the line that names the epoch we leave
        if self.on_role_change is not None:
            self.on_role_change(False)

    # --- this controller's endpoint and the cluster description ---------------------------------

    def _register_endpoint_in_background(self) -> None:
        if self._endpoint_task is not None and not self._endpoint_task.done():
            self._endpoint_task.cancel()
        self._endpoint_task = spawn(
            register_endpoint(self.store, self.settings, lambda: self.is_active), "controller-endpoint-registration"
        )

    async def controller_endpoint(self, controller_id: int) -> str:
        return await read_endpoint(self.store, controller_id)

    async def _describe(self, event: ev.DescribeCluster) -> None:
        if event.reply.done():
            return
        active_id = self.id if self.is_active else self.active_controller_id
        endpoint = self.settings.grpc_endpoint if self.is_active else await self.controller_endpoint(active_id)
        psm = self.term.partitions.psm if self.term is not None and self.term.partitions is not None else None
        description = describe_cluster(self.id, self.context, psm, active_id, endpoint, event)
        if not event.reply.done():
            event.reply.set_result(description)
