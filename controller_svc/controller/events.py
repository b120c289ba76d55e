"""Controller events (a closed set of frozen dataclasses) and the EventManager.

The EventManager mirrors Kafka's ControllerEventManager: one FIFO queue and ONE
consumer task; watches, RPC handlers and timers only enqueue. `clear_and_put`
preempts every queued event (Expire uses it); an event carrying a reply future
has that future failed with NOT_CONTROLLER when it is preempted.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from controller_svc.common import gc_policy, metrics
from controller_svc.common.errors import ControllerError, NotControllerError
from controller_svc.common.tasks import cancel_and_wait, spawn

log = logging.getLogger(__name__)


class ControllerState(enum.IntEnum):
    """Kafka's ControllerState values (exported as the ControllerState gauge)."""

    IDLE = 0
    CONTROLLER_CHANGE = 1
    BROKER_CHANGE = 2
    TOPIC_CHANGE = 3
    TOPIC_DELETION = 4
    ALTER_PARTITION_REASSIGNMENT = 5
    AUTO_LEADER_BALANCE = 6
    MANUAL_LEADER_BALANCE = 7
    CONTROLLED_SHUTDOWN = 8
    ISR_CHANGE = 9
    LEADER_AND_ISR_RESPONSE_RECEIVED = 10
    LOG_DIR_CHANGE = 11
    CONTROLLER_SHUTDOWN = 12
    UNCLEAN_LEADER_ELECTION_ENABLE = 13
    TOPIC_UNCLEAN_LEADER_ELECTION_ENABLE = 14
    LIST_PARTITION_REASSIGNMENT = 15
    UPDATE_METADATA_RESPONSE_RECEIVED = 16


@dataclass(frozen=True, slots=True)
class Event:
    state: ControllerState = field(default=ControllerState.IDLE, init=False, repr=False)

    def preempt(self) -> None:
        """Called instead of processing when the event is dropped by clear_and_put."""

    def fail(self, error: BaseException) -> None:
        """Called when processing the event raised."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyEvent(Event):
    """An event that answers a caller. Preemption fails the reply with NOT_CONTROLLER."""

    reply: asyncio.Future[Any] = field(compare=False, repr=False)

    def preempt(self) -> None:
        if not self.reply.done():
            self.reply.set_exception(NotControllerError("the controller moved while the request was queued"))

    def fail(self, error: BaseException) -> None:
        if not self.reply.done():
            self.reply.set_exception(ControllerError(f"internal error processing the request: {error!r}"))


def _event(state: ControllerState) -> Any:
    return field(default=state, init=False, repr=False)


@dataclass(frozen=True, slots=True)
class Startup(Event):
    state: ControllerState = _event(ControllerState.CONTROLLER_CHANGE)


@dataclass(frozen=True, slots=True)
class ControllerChange(Event):
    state: ControllerState = _event(ControllerState.CONTROLLER_CHANGE)


@dataclass(frozen=True, slots=True)
class Reelect(Event):
    state: ControllerState = _event(ControllerState.CONTROLLER_CHANGE)


@dataclass(frozen=True, slots=True)
class Expire(Event):
    state: ControllerState = _event(ControllerState.CONTROLLER_CHANGE)


@dataclass(frozen=True, slots=True)
class RegisterBrokerAndReelect(Event):
    state: ControllerState = _event(ControllerState.CONTROLLER_CHANGE)


@dataclass(frozen=True, slots=True)
class ControllerEpochChange(Event):
    """/controller_epoch was changed: retry an election that a corrupt epoch blocked."""

    state: ControllerState = _event(ControllerState.CONTROLLER_CHANGE)


@dataclass(frozen=True, slots=True)
class RetryElection(Event):
    """Timer: retry an election that was blocked or failed for a transient reason."""

    state: ControllerState = _event(ControllerState.CONTROLLER_CHANGE)


@dataclass(frozen=True, slots=True)
class BrokerChange(Event):
    state: ControllerState = _event(ControllerState.BROKER_CHANGE)


@dataclass(frozen=True, slots=True)
class BrokerModifications(Event):
    broker_id: int = -1
    state: ControllerState = _event(ControllerState.BROKER_CHANGE)


@dataclass(frozen=True, slots=True)
class TopicChange(Event):
    state: ControllerState = _event(ControllerState.TOPIC_CHANGE)


@dataclass(frozen=True, slots=True)
class PartitionModifications(Event):
    topic: str = ""
    state: ControllerState = _event(ControllerState.TOPIC_CHANGE)


@dataclass(frozen=True, slots=True)
class IsrChangeNotification(Event):
    state: ControllerState = _event(ControllerState.ISR_CHANGE)


@dataclass(frozen=True, slots=True)
class LogDirEventNotification(Event):
    state: ControllerState = _event(ControllerState.LOG_DIR_CHANGE)


@dataclass(frozen=True, slots=True)
class TopicConfigChange(Event):
    """/config/changes has new notifications (e.g. a topic's unclean.leader.election.enable)."""

    state: ControllerState = _event(ControllerState.TOPIC_UNCLEAN_LEADER_ELECTION_ENABLE)


@dataclass(frozen=True, slots=True)
class LeaderAndIsrResponseReceived(Event):
    broker_id: int = -1
    error_code: int = 0
    # (topic, partition, error code) of each partition answered with an error (NONE left out)
    partition_errors: tuple[tuple[str, int, int], ...] = ()
    state: ControllerState = _event(ControllerState.LEADER_AND_ISR_RESPONSE_RECEIVED)


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    partitions: int
    replication_factor: int
    # partition -> replicas; when given, partitions and replication_factor are -1
    assignment: tuple[tuple[int, tuple[int, ...]], ...] = ()
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopics(ReplyEvent):
    topics: tuple[NewTopic, ...] = ()
    validate_only: bool = False
    state: ControllerState = _event(ControllerState.TOPIC_CHANGE)


@dataclass(frozen=True, slots=True)
class TopicDeletion(Event):
    """/admin/delete_topics children changed."""

    state: ControllerState = _event(ControllerState.TOPIC_DELETION)


@dataclass(frozen=True, slots=True)
class StopReplicaResponseReceived(Event):
    broker_id: int = -1
    broker_epoch: int = -1  # the epoch the request was sent to
    error_code: int = 0
    partition_errors: tuple[tuple[str, int, int], ...] = ()
    state: ControllerState = _event(ControllerState.TOPIC_DELETION)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopics(ReplyEvent):
    topics: tuple[str, ...] = ()
    state: ControllerState = _event(ControllerState.TOPIC_DELETION)


@dataclass(frozen=True, slots=True)
class ZkPartitionReassignment(Event):
    state: ControllerState = _event(ControllerState.ALTER_PARTITION_REASSIGNMENT)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiPartitionReassignment(ReplyEvent):
    # (topic, partition, target replicas or None to cancel)
    requests: tuple[tuple[str, int, tuple[int, ...] | None], ...] = ()
    state: ControllerState = _event(ControllerState.ALTER_PARTITION_REASSIGNMENT)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListPartitionReassignments(ReplyEvent):
    partitions: tuple[tuple[str, int], ...] = ()
    state: ControllerState = _event(ControllerState.LIST_PARTITION_REASSIGNMENT)


@dataclass(frozen=True, slots=True)
class ZkPreferredReplicaElection(Event):
    state: ControllerState = _event(ControllerState.MANUAL_LEADER_BALANCE)


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectLeaders(ReplyEvent):
    partitions: tuple[tuple[str, int], ...] = ()  # empty: all
    election_type: str = "preferred"
    state: ControllerState = _event(ControllerState.MANUAL_LEADER_BALANCE)


@dataclass(frozen=True, slots=True)
class AutoPreferredReplicaLeaderElection(Event):
    state: ControllerState = _event(ControllerState.AUTO_LEADER_BALANCE)


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdown(ReplyEvent):
    broker_id: int = -1
    broker_epoch: int = -1
    state: ControllerState = _event(ControllerState.CONTROLLED_SHUTDOWN)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeCluster(ReplyEvent):
    include_partitions: bool = False
    topics: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ShutdownEventThread(Event):
    state: ControllerState = _event(ControllerState.CONTROLLER_SHUTDOWN)


@dataclass(frozen=True, slots=True)
class TermTaskDied(Event):
    """A background task of the term of office (a request sender, the rebalance timer) died:
    the controller resigns and releases /controller rather than run without it (Kafka's
    triggerControllerMove); the next term starts from ZooKeeper."""

    task_name: str = ""
    error: str = ""
    epoch: int = -1  # the term it belonged to: a late report must not end a later term
    state: ControllerState = _event(ControllerState.CONTROLLER_CHANGE)


# The closed set of events. `LifecycleEvent`s are handled by the controller whether or not it
# is active (election, resignation, describe); `TermEvent`s only by an active controller's term
# of office. Dispatch on each union is exhaustive (mypy checks it with assert_never).
LifecycleEvent = (
    Startup
    | ControllerChange
    | Reelect
    | Expire
    | RegisterBrokerAndReelect
    | ControllerEpochChange
    | RetryElection
    | DescribeCluster
    | TermTaskDied
    | ShutdownEventThread
)
TermEvent = (
    BrokerChange
    | BrokerModifications
    | TopicChange
    | PartitionModifications
    | CreateTopics
    | IsrChangeNotification
    | LogDirEventNotification
    | TopicConfigChange
    | LeaderAndIsrResponseReceived
    | TopicDeletion
    | DeleteTopics
    | StopReplicaResponseReceived
    | ZkPartitionReassignment
    | ApiPartitionReassignment
    | ListPartitionReassignments
    | ZkPreferredReplicaElection
    | ElectLeaders
    | AutoPreferredReplicaLeaderElection
    | ControlledShutdown
)
ControllerEvent = LifecycleEvent | TermEvent
# The term events that answer an admin RPC through their reply future.
AdminRequest = (
    CreateTopics
    | DeleteTopics
    | ApiPartitionReassignment
    | ListPartitionReassignments
    | ElectLeaders
    | ControlledShutdown
)


@dataclass(slots=True)
class QueuedEvent:
    """An event in the queue, with the time it was enqueued and a future set once it has
    been processed (or preempted), so callers can await its processing."""

    event: ControllerEvent
    enqueued_at: float
    processed: asyncio.Future[None]

    def done(self) -> None:
        if not self.processed.done():
            self.processed.set_result(None)


Handler = Callable[[ControllerEvent], Awaitable[None]]


class EventManager:
    def __init__(self, handler: Handler, clock: Callable[[], float] = time.monotonic) -> None:
        self._handler = handler
        self._clock = clock
        self._queue: asyncio.Queue[QueuedEvent] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.current: ControllerEvent | None = None
        self.processed_count = 0

    def __repr__(self) -> str:
        return f"EventManager(queued={self._queue.qsize()}, current={self.current!r})"

    @property
    def queue_size(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        if self._task is None:
            self._task = spawn(self._run(), "controller-event-thread")

    async def close(self) -> None:
        """Stop the consumer; events still queued are preempted."""
        task, self._task = self._task, None
        await cancel_and_wait(task)
        self._drain()

    def put(self, event: ControllerEvent) -> QueuedEvent:
        queued = QueuedEvent(event, self._clock(), asyncio.get_running_loop().create_future())
        self._queue.put_nowait(queued)
        metrics.EVENT_QUEUE_SIZE.set(self._queue.qsize())
        return queued

    def clear_and_put(self, event: ControllerEvent) -> QueuedEvent:
        """Preempt everything queued, then queue `event` (Kafka's clearAndPut, used by Expire)."""
        self._drain()
        return self.put(event)

    def _drain(self) -> None:
        while True:
            try:
                queued = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                break
            try:
                queued.event.preempt()
            finally:
                queued.done()
        metrics.EVENT_QUEUE_SIZE.set(self._queue.qsize())

    async def _run(self) -> None:
        while True:
            queued = await self._queue.get()
            metrics.EVENT_QUEUE_SIZE.set(self._queue.qsize())
            metrics.EVENT_QUEUE_TIME_MS.observe((self._clock() - queued.enqueued_at) * 1000.0)
            event = queued.event
            self.current = event
            metrics.CONTROLLER_STATE.set(int(event.state))
            started = self._clock()
            try:
                if isinstance(event, ShutdownEventThread):
                    return
                # No full collection over a 1M-partition heap in the middle of a step
                # (common/gc_policy.py): it holds the GIL, the ZooKeeper thread's too.
                with gc_policy.no_collection_during(type(event).__name__):
                    await self._handler(event)
            except asyncio.CancelledError:
                event.preempt()
                raise
            except Exception as error:
                # A failing handler must not stop the loop (ControllerEventThread.doWork).
                metrics.EVENT_HANDLER_ERRORS.labels(type(event).__name__).inc()
                log.exception("error processing event %r", event)
                event.fail(error)
            finally:
                metrics.observe_state_time(int(event.state), (self._clock() - started) * 1000.0)
                self.current = None
                self.processed_count += 1
                metrics.CONTROLLER_STATE.set(int(ControllerState.IDLE))
                queued.done()
