"""The digest of one topic's metadata, as a broker caches it and as a controller would send it.

A failover's UpdateMetadata carries every partition of the cluster to every broker: at 1M
partitions, 35 MB that each broker parses and applies while the new controller works on the
same machines' cores, although after a failover nearly every broker already holds exactly
those states. The new controller asks each broker for a digest per topic of its metadata cache
(DescribeReplicaEpochs, `metadata_digests`), computes the same digest over what its
UpdateMetadata would carry, and sends a broker only the topics where the two differ
(controller/partition_manager.py says why that is safe).

Both sides hash the same bytes: each partition state as an UpdateMetadataRequest.partition_states
field on the wire (tag, length, message), in partition order. The controller's fields are the
ones it sends (core/metadata_encoding.py); the broker re-serializes what it parsed, which
protobuf gives back byte for byte for messages whose fields it knows. BLAKE2b with 128-bit
digests: two different caches with one digest is a 2^-128 accident, not a risk to weigh.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from kcontroller.v1 import broker_pb2

# UpdateMetadataRequest.partition_states: its field number, wire type 2 (length-delimited).
PARTITION_STATES_FIELD = broker_pb2.UpdateMetadataRequest.DESCRIPTOR.fields_by_name["partition_states"].number
PARTITION_STATES_TAG = bytes([(PARTITION_STATES_FIELD << 3) | 2])
DIGEST_SIZE = 16


def varint(value: int) -> bytes:
    """A non-negative integer as a protobuf varint."""
    if value < 128:
        return _ONE_BYTE[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_ONE_BYTE = [bytes([n]) for n in range(128)]
# The tag and length of every state shorter than 128 bytes (nearly all of them).
_SHORT_PREFIXES = [PARTITION_STATES_TAG + bytes([n]) for n in range(128)]


def as_field(serialized_state: bytes) -> bytes:
    """A serialized PartitionState as one element of UpdateMetadataRequest.partition_states."""
    n = len(serialized_state)
    if n < 128:
        return _SHORT_PREFIXES[n] + serialized_state
    return PARTITION_STATES_TAG + varint(n) + serialized_state


def topic_digest(fields_in_partition_order: Iterable[bytes]) -> bytes:
    return hashlib.blake2b(b"".join(fields_in_partition_order), digest_size=DIGEST_SIZE).digest()
