"""ControllerChannelManager: one send queue and one sender task per broker.

Each sender has at most one request in flight. A request that fails in transport or
times out is resent, after a backoff, until it succeeds or the broker is removed
(Kafka's RequestSendThread). Responses go to a callback, which only enqueues an event.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from controller_svc.common import metrics
from controller_svc.common.errors import ErrorCode
from controller_svc.common.model import BrokerInfo
from controller_svc.common.self_stop import BEFORE_SEND, SelfStop
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.common.tasks import TaskDeathHandler, cancel_and_wait, spawn
from controller_svc.common.tls import TlsFiles, aio_channel
from controller_svc.core.request_batch import PreSerialized
from kcontroller.v1 import broker_pb2, broker_pb2_grpc

log = logging.getLogger(__name__)


class ApiKind(enum.StrEnum):
    LEADER_AND_ISR = "LeaderAndIsr"
    UPDATE_METADATA = "UpdateMetadata"
    STOP_REPLICA = "StopReplica"
    DESCRIBE_REPLICA_EPOCHS = "DescribeReplicaEpochs"


ResponseCallback = Callable[[int, str, Any], None]


class BrokerClient(Protocol):
    """The transport to one broker (a port: grpc.aio in production, fakes in unit tests)."""

    async def send(self, api: ApiKind, request: Any, timeout_s: float) -> Any: ...

    async def close(self) -> None: ...


class GrpcBrokerClient:
    def __init__(self, address: str, tls: TlsFiles | None = None) -> None:
        self.address = address
        self._channel = aio_channel(
            address,
            tls,
            options=[
                ("grpc.max_send_message_length", 256 * 1024 * 1024),
                ("grpc.max_receive_message_length", 256 * 1024 * 1024),
                # Reconnect quickly to a restarted broker (default backoff grows to 120 s).
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 1000),
            ],
        )
        self._stub = broker_pb2_grpc.BrokerControlStub(self._channel)
        # For pre-serialized requests (bytes in, the usual response out).
        self._raw = {
            api: self._channel.unary_unary(
                f"/kcontroller.v1.BrokerControl/{api.value}",
                request_serializer=None,
                response_deserializer=response.FromString,
            )
            for api, response in (
                (ApiKind.LEADER_AND_ISR, broker_pb2.LeaderAndIsrResponse),
                (ApiKind.UPDATE_METADATA, broker_pb2.UpdateMetadataResponse),
                (ApiKind.STOP_REPLICA, broker_pb2.StopReplicaResponse),
            )
        }

    def __repr__(self) -> str:
        return f"GrpcBrokerClient({self.address})"

    async def send(self, api: ApiKind, request: Any, timeout_s: float) -> Any:
        if isinstance(request, PreSerialized):
            return await self._raw[api](request.serialize(), timeout=timeout_s)
        method = getattr(self._stub, api.value)
        return await method(request, timeout=timeout_s)

    async def close(self) -> None:
        await self._channel.close()


ClientFactory = Callable[[BrokerInfo], BrokerClient]


def grpc_client_factory(info: BrokerInfo, tls: TlsFiles | None = None) -> BrokerClient:
    endpoint = info.control_endpoint()
    if endpoint is None:
        raise ValueError(f"broker {info.broker_id} has no endpoint")
    return GrpcBrokerClient(endpoint.address(), tls)


def tls_client_factory(tls: TlsFiles | None) -> ClientFactory:
    """Clients presenting this controller's certificate (mutual TLS), or plaintext ones."""
    return lambda info: grpc_client_factory(info, tls)


@dataclass(slots=True)
class QueueItem:
    api: ApiKind
    request: Any
    callback: ResponseCallback | None
    enqueued_at: float
    # A question rather than a command (DescribeReplicaEpochs): one attempt with this deadline,
    # then the queue moves on whatever the outcome (None: resent until it succeeds, as Kafka's
    # RequestSendThread does). Its callback gets None when the attempt failed.
    single_attempt_timeout_s: float | None = None


class RequestSender:
    """The queue and the sender task of one broker."""

    def __init__(
        self,
        broker: BrokerInfo,
        client: BrokerClient,
        controller_epoch: int,
        state_log: StateChangeLog,
        request_timeout_s: float,
        retry_backoff_s: float,
        correlation_ids: itertools.count[int],
        on_queue_change: Callable[[], None] = lambda: None,
        on_death: TaskDeathHandler | None = None,
        self_stop: SelfStop | None = None,
    ) -> None:
        self.broker = broker
        self._self_stop = self_stop
        self.client = client
        self.queue: asyncio.Queue[QueueItem] = asyncio.Queue()
        self._controller_epoch = controller_epoch
        self._state_log = state_log
        self._timeout_s = request_timeout_s
        self._backoff_s = retry_backoff_s
        self._correlation_ids = correlation_ids
        self._on_queue_change = on_queue_change
        self._label = str(broker.broker_id)
        self.in_flight: QueueItem | None = None
        self.task = spawn(self._run(), f"request-sender-{broker.broker_id}", on_death)

    def __repr__(self) -> str:
        return f"RequestSender(broker={self.broker.broker_id}, queued={self.queue.qsize()})"

    def enqueue(self, item: QueueItem) -> None:
        self.queue.put_nowait(item)
        metrics.CHANNEL_QUEUE_SIZE.labels(self._label).set(self.queue.qsize())
        self._on_queue_change()

    async def _run(self) -> None:
        while True:
            item = await self.queue.get()
            metrics.CHANNEL_QUEUE_SIZE.labels(self._label).set(self.queue.qsize())
            self._on_queue_change()
            self.in_flight = item
            try:
                await self._deliver(item)
            finally:
                self.in_flight = None

    async def _deliver(self, item: QueueItem) -> None:
        broker_id = self.broker.broker_id
        correlation_id = next(self._correlation_ids)
        item.request.correlation_id = correlation_id
        partitions = _partition_count(item.request)
        queue_ms = (time.monotonic() - item.enqueued_at) * 1000.0
        metrics.CHANNEL_QUEUE_TIME_MS.labels(self._label).observe(queue_ms)
        self._state_log.record(
            "request.sent",
            broker=broker_id,
            api=item.api.value,
            correlation_id=correlation_id,
            partitions=partitions,
            controller_epoch=self._controller_epoch,
        )
        if self._self_stop is not None:
            # Fault injection: a zombie stops here with the request in hand; resumed, it sends it.
            self._self_stop.stop_if_armed(BEFORE_SEND, broker=broker_id, api=item.api.value)
        attempts = 0
        single = item.single_attempt_timeout_s
        response: Any = None  # stays None when a single attempt failed
        while True:
            attempts += 1
            started = time.monotonic()
            try:
                response = await self.client.send(item.api, item.request, single or self._timeout_s)
                error_code = int(getattr(response, "error_code", 0))
                if error_code:
                    metrics.REQUEST_ERRORS.labels(self._label, item.api.value, str(error_code)).inc()
                break
            except asyncio.CancelledError:
                raise
            except Exception as e:  # transport failure or timeout: back off and resend
                error = _describe_transport_error(e)
                metrics.REQUEST_ERRORS.labels(self._label, item.api.value, error).inc()
                if single is not None:
                    # An old broker without the RPC (UNIMPLEMENTED), a dead or slow one: the
                    # asker does without the answer; what follows in the queue must not wait.
                    log.warning("%s to broker %d failed (%s); not resent", item.api.value, broker_id, error)
                    timed_out = error == "TIMEOUT"
                    error_code = int(ErrorCode.REQUEST_TIMED_OUT if timed_out else ErrorCode.UNKNOWN_SERVER_ERROR)
                    break
                if attempts == 1 or attempts % 50 == 0:
                    log.warning(
                        "%s to broker %d (correlation %d) failed (%s); resending every %.0f ms",
                        item.api.value,
                        broker_id,
                        correlation_id,
                        error,
                        self._backoff_s * 1000,
                    )
                await asyncio.sleep(self._backoff_s)
        self._state_log.record(
            "request.completed",
            broker=broker_id,
            api=item.api.value,
            correlation_id=correlation_id,
            partitions=partitions,
            controller_epoch=self._controller_epoch,
            queue_ms=round(queue_ms, 3),
            rtt_ms=round((time.monotonic() - started) * 1000.0, 3),
            error=error_code,
            attempts=attempts,
        )
        if item.callback is not None:
            item.callback(broker_id, item.api, response)

    def swap_client(self, broker: BrokerInfo, client: BrokerClient) -> BrokerClient:
        """The broker's endpoints changed: later attempts go to the new endpoint; the queue and
        the request in flight (resent there if the old channel fails it) are kept."""
        old, self.client, self.broker = self.client, client, broker
        return old

    async def close(self) -> None:
        await cancel_and_wait(self.task)
        try:
            await self.client.close()
        except Exception:
            log.debug("closing the channel to broker %d failed", self.broker.broker_id, exc_info=True)


def _partition_count(request: Any) -> int:
    for name in ("partition_states", "partitions"):
        if hasattr(request, name):
            return len(getattr(request, name))
    return 0


def _describe_transport_error(error: Exception) -> str:
    if isinstance(error, grpc.aio.AioRpcError):
        return str(error.code().name)
    if isinstance(error, asyncio.TimeoutError):
        return "TIMEOUT"
    return type(error).__name__


class ChannelManager:
    def __init__(
        self,
        controller_epoch: int,
        state_log: StateChangeLog,
        request_timeout_s: float,
        retry_backoff_s: float = 0.1,
        client_factory: ClientFactory = grpc_client_factory,
        on_sender_death: TaskDeathHandler | None = None,
        self_stop: SelfStop | None = None,
    ) -> None:
        self._self_stop = self_stop
        self.controller_epoch = controller_epoch
        # A sender that dies (a bug: it catches every error of a send) would leave its broker
        # without requests for the rest of the term; the owner resigns rather than go on.
        self._on_sender_death = on_sender_death
        self._state_log = state_log
        self._timeout_s = request_timeout_s
        self._backoff_s = retry_backoff_s
        self._client_factory = client_factory
        self._senders: dict[int, RequestSender] = {}
        self._correlation_ids = itertools.count(1)
        self._closing: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"ChannelManager(epoch={self.controller_epoch}, brokers={sorted(self._senders)})"

    @property
    def broker_ids(self) -> set[int]:
        return set(self._senders)

    def queue_size(self, broker_id: int) -> int:
        sender = self._senders.get(broker_id)
        return sender.queue.qsize() if sender is not None else 0

    def total_queue_size(self) -> int:
        """Requests waiting for any broker (Kafka's TotalQueueSize: in-flight ones not counted)."""
        return sum(s.queue.qsize() for s in self._senders.values())

    def _update_total_queue_size(self) -> None:
        metrics.CHANNEL_TOTAL_QUEUE_SIZE.set(self.total_queue_size())

    def add_broker(self, info: BrokerInfo) -> None:
        if info.broker_id in self._senders:
            return
        sender = RequestSender(
            info,
            self._client_factory(info),
            self.controller_epoch,
            self._state_log,
            self._timeout_s,
            self._backoff_s,
            self._correlation_ids,
            self._update_total_queue_size,
            self._on_sender_death,
            self._self_stop,
        )
        self._senders[info.broker_id] = sender
        log.info("added channel to broker %d (%s)", info.broker_id, sender.client)

    def update_broker(self, info: BrokerInfo) -> None:
        """A live broker's registration changed its endpoints (BrokerModifications): swap its
        channel to the new endpoint and keep the requests queued for it. It stays live: this
        is not a failure (Kafka's processBrokerModification only updates its metadata)."""
        sender = self._senders.get(info.broker_id)
        if sender is None:
            self.add_broker(info)
            return
        old = sender.swap_client(info, self._client_factory(info))
        log.info(
            "channel to broker %d moved to %s, keeping %d queued requests",
            info.broker_id,
            sender.client,
            sender.queue.qsize(),
        )
        task = spawn(old.close(), f"close-old-channel-{info.broker_id}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def remove_broker(self, broker_id: int) -> None:
        """Stop the broker's sender and drop its queue (a dead or bounced broker)."""
        sender = self._senders.pop(broker_id, None)
        if sender is None:
            return
        dropped = sender.queue.qsize() + (1 if sender.in_flight else 0)
        # Cancelled now (it is parked at an await, so it writes no metric after this), its
        # series gone now: a bounced broker's new sender starts from nothing, as in Kafka.
        sender.task.cancel()
        _forget_broker_metrics(broker_id)
        self._update_total_queue_size()
        log.info("removed channel to broker %d, dropping %d queued requests", broker_id, dropped)
        task = spawn(sender.close(), f"close-sender-{broker_id}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def send(
        self,
        broker_id: int,
        api: str,
        request: Any,
        callback: ResponseCallback | None = None,
        single_attempt_timeout_s: float | None = None,
    ) -> bool:
        sender = self._senders.get(broker_id)
        if sender is None:
            log.warning("not sending %s to broker %d: no channel (broker not live)", api, broker_id)
            return False
        sender.enqueue(QueueItem(ApiKind(api), request, callback, time.monotonic(), single_attempt_timeout_s))
        return True

    async def close(self) -> None:
        senders = list(self._senders.values())
        self._senders.clear()
        for sender in senders:
            await sender.close()
            _forget_broker_metrics(sender.broker.broker_id)
        closing = list(self._closing)
        if closing:
            await asyncio.gather(*closing, return_exceptions=True)
        metrics.CHANNEL_TOTAL_QUEUE_SIZE.set(0)


def _forget_broker_metrics(broker_id: int) -> None:
    # ControllerChannelManager.removeExistingBroker removes the broker's QueueSize and
    # RequestRateAndQueueTimeMs: a dead broker's last values must not linger on dashboards.
    label = str(broker_id)
    try:
        metrics.CHANNEL_QUEUE_SIZE.remove(label)
    except KeyError:
        pass
    metrics.CHANNEL_QUEUE_TIME_MS.remove(label)
