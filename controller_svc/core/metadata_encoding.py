"""UpdateMetadata's partition states, serialized once per partition state and kept.

A failover sends every partition's state to every broker; building 100k protobuf messages was
one of its two largest costs (bench: `phases_ms.update_metadata`). Protobuf fields concatenate
on the wire, so the request body is the partition states' encoded fields joined, followed by
the live brokers; each partition's field is encoded once and reused for as long as its state
and assignment are the same objects (both are immutable: a change makes new ones). A warm
standby encodes its copy while it waits, so that its takeover only joins bytes.

Only the common case is kept: a partition with a state, no offline replica and a topic not
being deleted (what the encoding depends on beyond the two objects). Others are built each time.
"""

from __future__ import annotations

from controller_svc.common.metadata_digest import PARTITION_STATES_FIELD, as_field, varint
from controller_svc.common.model import LeaderIsrAndControllerEpoch, ReplicaAssignment, TopicPartition
from kcontroller.v1 import broker_pb2, common_pb2

# LeaderAndIsr's partition states are joined from the same encoded fields (request_batch.py).
if broker_pb2.LeaderAndIsrRequest.DESCRIPTOR.fields_by_name["partition_states"].number != PARTITION_STATES_FIELD:
    raise ImportError("LeaderAndIsrRequest.partition_states and UpdateMetadataRequest's must share a field number")

# tp -> (state, assignment, encoded field): valid while both objects are the ones in the context.
EncodedStates = dict[TopicPartition, tuple[LeaderIsrAndControllerEpoch, ReplicaAssignment, bytes]]


def encode_field(message: common_pb2.PartitionState) -> bytes:
    """One element of UpdateMetadataRequest.partition_states, as it appears on the wire."""
    return as_field(message.SerializeToString())


def state_message(
    tp: TopicPartition, state: LeaderIsrAndControllerEpoch, replicas: list[int], leader: int
) -> common_pb2.PartitionState:
    """The fields LeaderAndIsr and UpdateMetadata share. upb builds repeated fields from lists
    faster than from tuples, and an omitted field costs nothing."""
    return common_pb2.PartitionState(
        topic=tp.topic,
        partition=tp.partition,
        controller_epoch=state.controller_epoch,
        leader=leader,
        leader_epoch=state.leader_epoch,
        isr=list(state.isr),
        zk_version=state.zk_version,
        replicas=replicas,
    )


def encode_online(tp: TopicPartition, state: LeaderIsrAndControllerEpoch, assignment: ReplicaAssignment) -> bytes:
    """The field of a partition with a state, every replica live, its topic not being deleted:
    what `request_batch.metadata_partition_fields` builds for it, byte for byte what upb
    serializes. Joined from encoded pieces instead of building the message and serializing it
    (about 0.4x the time with small numbers, `bench/results/encoding.json`): the one encoding
    per partition every leader change, controlled shutdown and failover makes. Numbers below
    `_SMALL` come from tables, larger ones are encoded on the spot; a negative number (no
    leader) or one past int32 leaves the partition to upb."""
    topic, partition = tp
    leader, leader_epoch, isr, zk_version, controller_epoch = state
    isr_field = _packed_field(_ISR_TAG, isr)
    replicas_field = _packed_field(_REPLICAS_TAG, assignment.replicas)
    if isr_field is None or replicas_field is None:
        return encode_field(state_message(tp, state, list(assignment.replicas), state.leader))
    tables = _tables if _tables is not None else _build_tables()
    if (
        0 <= partition < _SMALL
        and 0 <= controller_epoch < _SMALL
        and 0 <= leader < _SMALL
        and 0 <= leader_epoch < _SMALL
        and 0 <= zk_version < _SMALL
    ):
        return as_field(
            b"".join(
                (
                    _topic_field(topic),
                    tables[0][partition],
                    tables[1][controller_epoch],
                    tables[2][leader],
                    tables[3][leader_epoch],
                    isr_field,
                    tables[4][zk_version],
                    replicas_field,
                )
            )
        )
    if (
        0 <= partition < _INT32_END
        and 0 <= controller_epoch < _INT32_END
        and 0 <= leader < _INT32_END
        and 0 <= leader_epoch < _INT32_END
        and 0 <= zk_version < _INT32_END
    ):
        # Long-lived partitions: leader epochs and znode versions grow past the tables.
        return as_field(
            b"".join(
                (
                    _topic_field(topic),
                    _scalar(tables, 0, partition),
                    _scalar(tables, 1, controller_epoch),
                    _scalar(tables, 2, leader),
                    _scalar(tables, 3, leader_epoch),
                    isr_field,
                    _scalar(tables, 4, zk_version),
                    replicas_field,
                )
            )
        )
    return encode_field(state_message(tp, state, list(assignment.replicas), state.leader))


# --- the pieces `encode_online` joins ---------------------------------------------------------
# Protobuf writes the fields in number order, a scalar only when it is not zero (proto3), an
# int32 as a varint, a repeated int32 packed (its tag, the length, the varints), a string as its
# tag, length and UTF-8. Numbers below _SMALL (one or two varint bytes) come from tables.
_SMALL = 1 << 14
_INT32_END = 1 << 31
_SCALAR_FIELDS = ("partition", "controller_epoch", "leader", "leader_epoch", "zk_version")
_FIELDS = common_pb2.PartitionState.DESCRIPTOR.fields_by_name
_SCALAR_TAGS = [bytes([_FIELDS[name].number << 3]) for name in _SCALAR_FIELDS]
_ISR_TAG = bytes([(_FIELDS["isr"].number << 3) | 2])
_REPLICAS_TAG = bytes([(_FIELDS["replicas"].number << 3) | 2])
_TOPIC_TAG = bytes([(_FIELDS["topic"].number << 3) | 2])
if [_FIELDS[name].number for name in ("topic", *_SCALAR_FIELDS[:4], "isr", "zk_version", "replicas")] != list(
    range(1, 9)
):
    raise ImportError("encode_online joins PartitionState's fields 1-8 in this order")
# Per scalar field, the encoding of each value below _SMALL (3.6 MB, built at the first use:
# not every process that imports this module encodes partition states).
_tables: list[list[bytes]] | None = None
# Packed lists and topic fields: few distinct values (replica sets, ISRs, topics), bounded.
_packed: dict[tuple[bytes, tuple[int, ...]], bytes | None] = {}
_topics: dict[str, bytes] = {}
_MAX_KEPT = 100_000


def _scalar(tables: list[list[bytes]], index: int, value: int) -> bytes:
    """Scalar field `index` of _SCALAR_FIELDS holding `value` (non-negative)."""
    if value < _SMALL:
        return tables[index][value]
    return _SCALAR_TAGS[index] + varint(value)


def _build_tables() -> list[list[bytes]]:
    global _tables
    tables = []
    for tag in _SCALAR_TAGS:
        tables.append([tag + varint(value) if value else b"" for value in range(_SMALL)])
    _tables = tables
    return tables


def _packed_field(tag: bytes, values: tuple[int, ...]) -> bytes | None:
    """A packed repeated field of `values`; None when one of them is negative or past int32."""
    key = (tag, values)
    try:
        return _packed[key]
    except KeyError:
        pass
    except TypeError:  # a list, not the model's tuple: encoded, not kept
        key = (tag, tuple(values))
    field: bytes | None
    if not values:
        field = b""
    elif min(values) < 0 or max(values) >= _INT32_END:
        field = None
    else:
        body = b"".join([varint(value) for value in values])
        field = tag + varint(len(body)) + body
    if len(_packed) >= _MAX_KEPT:
        _packed.clear()
    _packed[key] = field
    return field


def _topic_field(topic: str) -> bytes:
    field = _topics.get(topic)
    if field is None:
        raw = topic.encode("utf-8")
        field = _TOPIC_TAG + varint(len(raw)) + raw if raw else b""
        if len(_topics) >= _MAX_KEPT:
            _topics.clear()
        _topics[topic] = field
    return field


def remember(
    cache: EncodedStates, tp: TopicPartition, state: LeaderIsrAndControllerEpoch, assignment: ReplicaAssignment
) -> bytes:
    """The encoded field of the common case, from `cache` when it was made from these very
    objects, else encoded now and kept."""
    entry = cache.get(tp)
    if entry is not None and entry[0] is state and entry[1] is assignment:
        return entry[2]
    encoded = encode_online(tp, state, assignment)
    cache[tp] = (state, assignment, encoded)
    return encoded


# PartitionState.offline_replicas: the highest field number UpdateMetadata's common case sets.
_OFFLINE_REPLICAS_TAG = bytes(
    [(common_pb2.PartitionState.DESCRIPTOR.fields_by_name["offline_replicas"].number << 3) | 2]
)
if any(f.number > 12 for f in common_pb2.PartitionState.DESCRIPTOR.fields):
    raise ImportError("PartitionState.offline_replicas must stay its last field (with_offline_replicas)")


def with_offline_replicas(online_field: bytes, offline: list[int]) -> bytes | None:
    """The field of a partition whose state and assignment encoded as `online_field` (as
    `encode_online` makes it), with `offline` replicas: the same message with its last field
    appended, which is how protobuf serializes it (fields in number order). A broker failure
    sends this for every partition with a replica on it, just after encoding the same states
    for its LeaderAndIsr. None for a broker id that is not a plain varint (negative)."""
    if min(offline) < 0:
        return None
    start = 1  # after the field's tag: its length (a varint), then the message
    while online_field[start] & 0x80:
        start += 1
    # Broker ids below 128 are one byte each, the bytes of the ids themselves (nearly always).
    packed = bytes(offline) if max(offline) < 128 else b"".join([varint(r) for r in offline])
    return as_field(online_field[start + 1 :] + _OFFLINE_REPLICAS_TAG + varint(len(packed)) + packed)
