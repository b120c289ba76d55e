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
    what `request_batch.metadata_partition_fields` builds for it."""
    return encode_field(state_message(tp, state, list(assignment.replicas), state.leader))


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
