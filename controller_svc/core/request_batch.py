"""The request batch (ControllerBrokerRequestBatch, reference section 6).

State changes add requests here; `send` turns them into one LeaderAndIsr, one
UpdateMetadata and one StopReplica request per broker, in that order, each carrying that
broker's epoch, and hands them to a `RequestSink` (the channel manager). Building is pure.

Rules: one state per (broker, partition), last write wins; `is_new` is sticky; a
LeaderAndIsr also queues an UpdateMetadata of that partition to every live or
shutting-down broker; the StopReplica delete flag is sticky and its leader epoch is -2 for a
topic being deleted; UpdateMetadata marks such a topic's partitions with leader -2.
Starting a batch while one is pending is a bug (IllegalStateError: the controller resigns).
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller_svc.common.errors import IllegalStateError
from controller_svc.common.metadata_digest import topic_digest
from controller_svc.common.model import (
    LEADER_DURING_DELETE,
    NO_LEADER,
    BrokerInfo,
    LeaderIsrAndControllerEpoch,
    ReplicaAssignment,
    TopicPartition,
    sorted_partitions,
)
from controller_svc.core.context import ControllerContext
from controller_svc.core.metadata_encoding import encode_field, remember, state_message, with_offline_replicas
from kcontroller.v1 import broker_pb2, common_pb2

EPOCH_DURING_DELETE = -2
NO_EPOCH = -1

API_LEADER_AND_ISR = "LeaderAndIsr"
API_UPDATE_METADATA = "UpdateMetadata"
API_STOP_REPLICA = "StopReplica"
# UpdateMetadata partition states and StopReplica partitions built between two stops of
# `RequestBatch.build_steps`.
BUILD_SLICE = 20_000

ResponseCallback = Callable[[int, str, Any], None]
# A StopReplica response, with the partitions whose request had delete=true (only those answer
# for topic deletion: Kafka's sendStopReplicaRequests, isPartitionDeleted) and the broker epoch
# the request was sent to (an answer from a previous incarnation of the broker is stale).
StopReplicaCallback = Callable[[int, Any, frozenset[TopicPartition], int], None]


def _answer_deletion(
    callback: StopReplicaCallback,
    deleted: frozenset[TopicPartition],
    broker_epoch: int,
    broker_id: int,
    _api: str,
    response: Any,
) -> None:
    callback(broker_id, response, deleted, broker_epoch)


class RequestSink(Protocol):
    def send(self, broker_id: int, api: str, request: Any, callback: ResponseCallback | None) -> bool: ...


def live_broker_message(info: BrokerInfo) -> common_pb2.LiveBroker:
    return common_pb2.LiveBroker(
        id=info.broker_id,
        endpoints=[
            common_pb2.Endpoint(listener=e.listener, host=e.host, port=e.port, security_protocol=e.security_protocol)
            for e in info.endpoints
        ],
        rack=info.rack or "",
        broker_epoch=info.epoch,
    )


@dataclass(slots=True)
class PreSerialized:
    """A request whose large part is serialized as it is built, from encoded fields.

    Protobuf messages concatenate on the wire (repeated fields append, scalars take the last
    value), so `head` (per-broker scalars) + `body` (partition states and brokers) parse on the
    broker as one request of `head`'s type: UpdateMetadata (one body for every broker) and
    LeaderAndIsr (its partition states joined from their encoded fields, most of them from
    the context's cache: no message object per partition, which at 1M partitions was minutes
    of building, copying and freeing them with the GIL held)."""

    head: Any
    body: bytes
    partition_count: int

    @property
    def partitions(self) -> range:  # for logging: len(request.partitions)
        return range(self.partition_count)

    @property
    def correlation_id(self) -> int:
        return int(self.head.correlation_id)

    @correlation_id.setter
    def correlation_id(self, value: int) -> None:
        self.head.correlation_id = value

    def serialize(self) -> bytes:
        return bytes(self.head.SerializeToString()) + self.body

    def parse(self) -> Any:
        """The request as the broker parses it (tests, the simulation's in-memory transport)."""
        return type(self.head).FromString(self.serialize())


def metadata_partition_fields(ctx: ControllerContext, partitions: Iterable[TopicPartition]) -> list[bytes]:
    """UpdateMetadataPartitionState of each partition as encoded fields of the request (joined,
    they are its partition_states), with the lookups hoisted (failover sends every partition to
    every broker) and the common case from the context's cache (core/metadata_encoding.py).
    A partition with no state znode yet is announced without a leader, a topic being deleted
    with leader -2."""
    live = ctx.live_or_shutting_down_broker_ids
    offline_dirs = {b: tps for b, tps in ctx.replicas_on_offline_dirs.items() if tps}
    deleting = ctx.topics_to_be_deleted
    states = ctx.partition_states
    assignments = ctx.assignments
    cache = ctx.encoded_partition_states
    offline_cache = ctx.encoded_offline_partition_states
    make = common_pb2.PartitionState
    result: list[bytes] = []
    # Per topic and per distinct replica list, not per partition (partitions come a topic at a
    # time; it was a sixth of the controller loop's samples in a profile of a controlled shutdown).
    current_topic: str | None = None
    parts: Mapping[int, ReplicaAssignment] = {}
    topic_deleting = False
    all_live: dict[tuple[int, ...], bool] = {}
    for tp in partitions:
        topic, partition = tp
        if topic != current_topic:
            current_topic = topic
            parts = assignments.get(topic) or {}
            topic_deleting = topic in deleting
        assignment = parts.get(partition)
        state = states.get(tp)
        if assignment is not None and state is not None and not topic_deleting:
            replicas_live = all_live.get(assignment.replicas)
            if replicas_live is None:
                replicas_live = all_live[assignment.replicas] = live.issuperset(assignment.replicas)
            if replicas_live and not (offline_dirs and any(tp in offline_dirs.get(r, ()) for r in assignment.replicas)):
                kept = cache.get(tp)
                if kept is not None and kept[0] is state and kept[1] is assignment:
                    result.append(kept[2])  # `remember`'s hit, inline
                else:
                    result.append(remember(cache, tp, state, assignment))
                continue
        replicas = list(assignment.replicas) if assignment is not None else []
        if offline_dirs:
            offline = [r for r in replicas if r not in live or tp in offline_dirs.get(r, ())]
        else:
            offline = [r for r in replicas if r not in live]
        if state is None:
            result.append(
                encode_field(
                    make(
                        topic=topic,
                        partition=partition,
                        controller_epoch=ctx.epoch,
                        leader=LEADER_DURING_DELETE if topic in deleting else NO_LEADER,
                        leader_epoch=-1,
                        zk_version=-1,
                        replicas=replicas,
                        offline_replicas=offline,
                    )
                )
            )
        else:
            # A partition with offline replicas (a dead broker's 600k at 1M partitions) is kept
            # too, with its offline replicas: encoded once, not at every batch while it lasts.
            cacheable = assignment is not None and topic not in deleting and bool(offline)
            if cacheable:
                entry = offline_cache.get(tp)
                if entry is not None and entry[0] is state and entry[1] is assignment and entry[2] == offline:
                    result.append(entry[3])
                    continue
                online = cache.get(tp)  # encoded for this batch's LeaderAndIsr, often
                if online is not None and online[0] is state and online[1] is assignment:
                    derived = with_offline_replicas(online[2], offline)
                    if derived is not None:
                        offline_cache[tp] = (state, assignment, offline, derived)
                        result.append(derived)
                        continue
            # No empty offline list: upb builds these several times faster.
            message = state_message(tp, state, replicas, LEADER_DURING_DELETE if topic in deleting else state.leader)
            if offline:
                message.offline_replicas.extend(offline)
            encoded = encode_field(message)
            if cacheable and assignment is not None:
                offline_cache[tp] = (state, assignment, offline, encoded)
            result.append(encoded)
    return result


_CACHED_STATE = operator.itemgetter(0)
_CACHED_ASSIGNMENT = operator.itemgetter(1)
_CACHED_FIELD = operator.itemgetter(2)
_REPLICAS = operator.attrgetter("replicas")


def metadata_topic_digests(ctx: ControllerContext, topics: Iterable[str]) -> dict[str, bytes]:
    """Topic -> the digest of the partition states UpdateMetadata would carry for it now
    (common/metadata_digest.py), for the topics of `topics` not being deleted (a deletion's
    UpdateMetadata is always sent).

    A warm standby's digest counts while its hint is valid and the topic's brokers are live.
    A topic whose every partition is in the context's encoding cache for its very state and
    assignment objects, with every replica live and no failed log dir, hashes the cached fields
    checked by C loops (at 1M partitions the per-partition path took 1 s of a failover); any
    other goes through `metadata_partition_fields`, which the request itself uses."""
    assignments = ctx.assignments
    deleting = ctx.topics_to_be_deleted
    states = ctx.partition_states
    cache = ctx.encoded_partition_states
    live = ctx.live_or_shutting_down_broker_ids
    cached_path = not any(ctx.replicas_on_offline_dirs.values())
    is_ = operator.is_
    new = tuple.__new__  # the NamedTuples without their Python-level __new__
    hint = ctx.metadata_digests_hint() if cached_path else {}
    digests: dict[str, bytes] = {}
    for topic in topics:
        parts = assignments.get(topic)
        if not parts or topic in deleting:
            continue
        made = hint.get(topic)
        if made is not None and made[1] <= live:
            digests[topic] = made[0]  # a warm standby's, from these very states
            continue
        numbers = sorted(parts)
        partitions = [new(TopicPartition, (topic, p)) for p in numbers]
        if cached_path:
            entries = list(map(cache.get, partitions))
            if (
                None not in entries
                and all(map(is_, map(_CACHED_STATE, entries), map(states.get, partitions)))  # type: ignore[arg-type]
                and all(map(is_, map(_CACHED_ASSIGNMENT, entries), map(parts.__getitem__, numbers)))  # type: ignore[arg-type]
                and live.issuperset(itertools.chain.from_iterable(map(_REPLICAS, parts.values())))
            ):
                digests[topic] = topic_digest(map(_CACHED_FIELD, entries))  # type: ignore[arg-type]
                continue
        digests[topic] = topic_digest(metadata_partition_fields(ctx, partitions))
    return digests


def _partition_state(
    tp: TopicPartition, state: LeaderIsrAndControllerEpoch, assignment: ReplicaAssignment, is_new: bool
) -> common_pb2.PartitionState:
    # The reassignment sets are empty but during a reassignment: omitted, they cost nothing.
    message = state_message(tp, state, list(assignment.replicas), state.leader)
    if assignment.adding:
        message.adding_replicas.extend(assignment.adding)
    if assignment.removing:
        message.removing_replicas.extend(assignment.removing)
    if is_new:
        message.is_new = True
    return message


@dataclass(slots=True)
class _StopReplica:
    delete: bool
    leader_epoch: int


@dataclass
class RequestBatch:
    controller_id: int
    ctx: ControllerContext
    on_leader_and_isr_response: ResponseCallback | None = None
    on_stop_replica_response: StopReplicaCallback | None = None
    controller_endpoint: str = ""
    # broker -> partition -> (the PartitionState as an encoded field of the request, its
    # leader, is_new); one tuple shared by every broker of a call
    leader_and_isr: dict[int, dict[TopicPartition, tuple[bytes, int, bool]]] = field(default_factory=dict)
    update_metadata_brokers: set[int] = field(default_factory=set)
    update_metadata_partitions: set[TopicPartition] = field(default_factory=set)
    stop_replica: dict[int, dict[TopicPartition, _StopReplica]] = field(default_factory=dict)
    # partitions with an is_new entry for some broker (sticky: later entries keep it)
    _new_partitions: set[TopicPartition] = field(default_factory=set)
    _open: bool = False

    def __repr__(self) -> str:
        return (
            f"RequestBatch(open={self._open}, leader_and_isr={ {b: len(p) for b, p in self.leader_and_isr.items()} }, "
            f"update_metadata={sorted(self.update_metadata_brokers)}x{len(self.update_metadata_partitions)}, "
            f"stop_replica={ {b: len(p) for b, p in self.stop_replica.items()} })"
        )

    @property
    def is_pending(self) -> bool:
        return bool(self.leader_and_isr or self.update_metadata_brokers or self.stop_replica)

    def new_batch(self) -> None:
        if self._open or self.is_pending:
            raise IllegalStateError(f"a new request batch was started while one is pending: {self!r}")
        self._open = True

    def clear(self) -> None:
        self.leader_and_isr.clear()
        self.update_metadata_brokers.clear()
        self.update_metadata_partitions.clear()
        self.stop_replica.clear()
        self._new_partitions.clear()
        self._open = False

    def add_leader_and_isr(
        self,
        broker_ids: Iterable[int],
        tp: TopicPartition,
        state: LeaderIsrAndControllerEpoch,
        assignment: ReplicaAssignment,
        is_new: bool,
    ) -> None:
        self._add_leader_and_isr_entries(broker_ids, tp, state, assignment, is_new)
        self.update_metadata_brokers.update(self.ctx.live_brokers)  # live or shutting down
        self.update_metadata_partitions.add(tp)

    def add_leader_and_isr_to_replicas(
        self, states: Mapping[TopicPartition, LeaderIsrAndControllerEpoch], recipients: Collection[int]
    ) -> None:
        """`add_leader_and_isr(the replicas in recipients, tp, state, its assignment, False)` for
        each partition of `states` (elections decided a slice at a time): the per-call
        bookkeeping once for all of them."""
        assignments = self.ctx.assignments
        cache = self.ctx.encoded_partition_states
        leader_and_isr = self.leader_and_isr
        new_partitions = self._new_partitions
        topic: str | None = None
        parts: dict[int, ReplicaAssignment] = {}
        for tp, state in states.items():
            if tp[0] != topic:
                topic = tp[0]
                parts = assignments.get(topic) or {}
            assignment = parts[tp[1]]
            brokers = [r for r in assignment.replicas if r in recipients]
            if assignment.adding or assignment.removing or tp in new_partitions:
                # A reassignment's sets, or an earlier entry whose is_new may stick: the rule
                # of the single call.
                self._add_leader_and_isr_entries(brokers, tp, state, assignment, False)
                continue
            # The common case inline: one encoding shared by every recipient (and by the
            # batch's UpdateMetadata, through the context's cache).
            shared = (remember(cache, tp, state, assignment), state.leader, False)
            for broker_id in brokers:
                held = leader_and_isr.get(broker_id)
                if held is None:
                    held = leader_and_isr[broker_id] = {}
                held[tp] = shared
        if states:
            self.update_metadata_brokers.update(self.ctx.live_brokers)  # live or shutting down
            self.update_metadata_partitions.update(states)

    def _add_leader_and_isr_entries(
        self,
        broker_ids: Iterable[int],
        tp: TopicPartition,
        state: LeaderIsrAndControllerEpoch,
        assignment: ReplicaAssignment,
        is_new: bool,
    ) -> None:
        # One entry for every broker of the call; only a sticky is_new of an earlier entry
        # needs its own.
        shared: tuple[bytes, int, bool] | None = None
        leader_and_isr = self.leader_and_isr
        if is_new:
            self._new_partitions.add(tp)
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            per_broker = leader_and_isr.get(broker_id)
            if per_broker is None:
                per_broker = leader_and_isr[broker_id] = {}
            previous = per_broker.get(tp)
            sticky_new = is_new or (previous is not None and previous[2])
            if sticky_new != is_new:
                encoded = encode_field(_partition_state(tp, state, assignment, is_new=True))
                per_broker[tp] = (encoded, state.leader, True)
                continue
            if shared is None:
                if not is_new and not assignment.adding and not assignment.removing:
                    # The same field as the partition's UpdateMetadata state in the common case
                    # (metadata_encoding.encode_online): from the context's cache when it holds
                    # these very objects (a warm standby encoded them while it waited), else
                    # encoded now and kept there for the batch's UpdateMetadata.
                    shared = (remember(self.ctx.encoded_partition_states, tp, state, assignment), state.leader, False)
                else:
                    shared = (encode_field(_partition_state(tp, state, assignment, is_new)), state.leader, is_new)
            per_broker[tp] = shared

    def add_update_metadata(self, broker_ids: Iterable[int], partitions: Iterable[TopicPartition]) -> None:
        self.update_metadata_brokers.update(b for b in broker_ids if b >= 0)
        self.update_metadata_partitions.update(partitions)

    def add_stop_replica(self, broker_ids: Iterable[int], tp: TopicPartition, delete: bool) -> None:
        # `build` sends only to live or shutting-down brokers, and liveness changes only between
        # operations: a dead broker's entries (every replica of a broker that just failed) would
        # be made only to be dropped.
        live = self.ctx.live_brokers
        broker_ids = [b for b in broker_ids if b in live]
        if not broker_ids:
            return
        if self.ctx.is_topic_queued_for_deletion(tp.topic):
            leader_epoch = EPOCH_DURING_DELETE
        else:
            state = self.ctx.partition_states.get(tp)
            leader_epoch = state.leader_epoch if state is not None else NO_EPOCH
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            per_broker = self.stop_replica.setdefault(broker_id, {})
            previous = per_broker.get(tp)
            per_broker[tp] = _StopReplica(delete or (previous is not None and previous.delete), leader_epoch)

    def entry_count(self) -> int:
        """Partition entries in the batch, over every request it will make."""
        return (
            len(self.update_metadata_partitions)
            + sum(map(len, self.leader_and_isr.values()))
            + sum(map(len, self.stop_replica.values()))
        )

    def build(self) -> list[tuple[int, str, Any]]:
        """The requests to send, in per-broker order LeaderAndIsr, UpdateMetadata, StopReplica;
        only for live or shutting-down brokers."""
        requests: list[tuple[int, str, Any]] = []
        for _ in self.build_steps(requests):
            pass
        return requests

    def build_steps(self, requests: list[tuple[int, str, Any]]) -> Iterator[None]:
        """`build` a part at a time into `requests`: the iterator stops after each broker's
        LeaderAndIsr and StopReplica and each BUILD_SLICE partitions of UpdateMetadata, and the
        requests are complete when it ends. Its driver may yield to the event loop at each stop
        (the batch and the context must not change meanwhile): at 1M partitions a controlled
        shutdown's batch (600k partition states in UpdateMetadata, 350k StopReplica) took
        seconds to build in one step."""
        ctx = self.ctx
        live = ctx.live_or_shutting_down_broker_ids
        for broker_id in sorted(self.leader_and_isr):
            if broker_id not in live:
                continue
            entries = self.leader_and_isr[broker_id]
            leaders = {entry[1] for entry in entries.values()}
            leader_and_isr_head = broker_pb2.LeaderAndIsrRequest(
                controller_id=self.controller_id,
                controller_epoch=ctx.epoch,
                broker_epoch=ctx.broker_epoch(broker_id),
            )
            leader_and_isr_body = b"".join([entries[tp][0] for tp in sorted_partitions(entries)]) + bytes(
                broker_pb2.LeaderAndIsrRequest(
                    live_leaders=[live_broker_message(ctx.live_brokers[b]) for b in sorted(leaders) if b in live],
                ).SerializeToString()
            )
            requests.append(
                (broker_id, API_LEADER_AND_ISR, PreSerialized(leader_and_isr_head, leader_and_isr_body, len(entries)))
            )
            yield
        if self.update_metadata_brokers:
            metadata_partitions = sorted_partitions(self.update_metadata_partitions)
            fields: list[bytes] = []
            for start in range(0, len(metadata_partitions), BUILD_SLICE):
                yield
                fields.extend(metadata_partition_fields(ctx, metadata_partitions[start : start + BUILD_SLICE]))
            # Fields concatenate on the wire: the partition states' encoded fields, then the
            # live brokers, parse as one UpdateMetadataRequest.
            body = b"".join(fields) + bytes(
                broker_pb2.UpdateMetadataRequest(
                    live_brokers=[live_broker_message(ctx.live_brokers[b]) for b in sorted(ctx.live_brokers)],
                ).SerializeToString()
            )
            for broker_id in sorted(self.update_metadata_brokers):
                if broker_id not in live:
                    continue
                head = broker_pb2.UpdateMetadataRequest(
                    controller_id=self.controller_id,
                    controller_epoch=ctx.epoch,
                    broker_epoch=ctx.broker_epoch(broker_id),
                    controller_endpoint=self.controller_endpoint,
                )
                requests.append((broker_id, API_UPDATE_METADATA, PreSerialized(head, body, len(metadata_partitions))))
        for broker_id in sorted(self.stop_replica):
            if broker_id not in live:
                continue
            yield
            partitions = self.stop_replica[broker_id]
            stopped: list[broker_pb2.StopReplicaPartition] = []
            ordered = sorted_partitions(partitions)
            for start in range(0, len(ordered), BUILD_SLICE):
                if start:
                    yield
                stopped.extend(
                    broker_pb2.StopReplicaPartition(
                        topic=tp.topic,
                        partition=tp.partition,
                        leader_epoch=partitions[tp].leader_epoch,
                        delete_partition=partitions[tp].delete,
                    )
                    for tp in ordered[start : start + BUILD_SLICE]
                )
            requests.append(
                (
                    broker_id,
                    API_STOP_REPLICA,
                    broker_pb2.StopReplicaRequest(
                        controller_id=self.controller_id,
                        controller_epoch=ctx.epoch,
                        broker_epoch=ctx.broker_epoch(broker_id),
                        partitions=stopped,
                    ),
                )
            )

    def send(self, sink: RequestSink, built: list[tuple[int, str, Any]] | None = None) -> int:
        """Send everything and close the batch; returns the number of requests. `built`: what
        `build_steps` built, with nothing added since, else the batch is built now."""
        try:
            requests = self.build() if built is None else built
            for broker_id, api, request in requests:
                callback: ResponseCallback | None = None
                if api == API_LEADER_AND_ISR:
                    callback = self.on_leader_and_isr_response
                elif api == API_STOP_REPLICA and self.on_stop_replica_response is not None:
                    deleted = frozenset(
                        TopicPartition(p.topic, p.partition) for p in request.partitions if p.delete_partition
                    )
                    if deleted:
                        callback = functools.partial(
                            _answer_deletion, self.on_stop_replica_response, deleted, int(request.broker_epoch)
                        )
                sink.send(broker_id, api, request, callback)
            return len(requests)
        finally:
            self.clear()
