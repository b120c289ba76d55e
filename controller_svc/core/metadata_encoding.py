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

from controller_svc.common.metadata_digest import PARTITION_STATES_FIELD, as_field
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
