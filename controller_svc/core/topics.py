"""Topic rules (pure): Kafka's topic-name validation, round-robin replica assignment
(AdminUtils.assignReplicasToBrokers, rack-unaware), and validation of assignments read
from ZooKeeper or given by a client."""

from __future__ import annotations

import random
import re
from collections.abc import Collection, Mapping, Sequence

from controller_svc.common.errors import ControllerError, ErrorCode

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


class InvalidTopicError(ControllerError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class InvalidPartitionsError(ControllerError):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(ControllerError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(ControllerError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


def validate_topic_name(name: str) -> None:
    """org.apache.kafka.common.internals.Topic.validate."""
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is {len(name)} characters long; the maximum is {MAX_NAME_LENGTH}")
    if not _LEGAL.match(name):
        raise InvalidTopicError(f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'")


def colliding_topic(name: str, existing: Collection[str]) -> str | None:
    """Kafka warns that '.' and '_' collide in metric names; it refuses such a second topic."""
    normalized = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == normalized:
            return other
    return None


def assign_replicas_to_brokers(
    brokers: Sequence[int],
    partitions: int,
    replication_factor: int,
    start_index: int | None = None,
    first_partition_id: int = 0,
    rng: random.Random | None = None,
) -> dict[int, tuple[int, ...]]:
    """Kafka's rack-unaware round robin: the first replica of partition p goes to broker
    (p + start) mod n; the others follow with a shift that grows every n partitions, so
    replicas spread evenly and leaders too."""
    if partitions <= 0:
        raise InvalidPartitionsError("number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("replication factor must be larger than 0")
    broker_array = sorted(brokers)
    n = len(broker_array)
    if replication_factor > n:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the {n} available brokers"
        )
    rng = rng or random.Random()
    start = start_index if start_index is not None and start_index >= 0 else rng.randrange(n)
    shift = start_index if start_index is not None and start_index >= 0 else rng.randrange(n)
    result: dict[int, tuple[int, ...]] = {}
    current = first_partition_id
    for _ in range(partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start) % n
        replicas = [broker_array[first]]
        for j in range(replication_factor - 1):
            replicas.append(broker_array[(first + 1 + (shift + j) % (n - 1)) % n])
        result[current] = tuple(replicas)
        current += 1
    return result


def _replica_lists_valid(lists: Collection[tuple[int, ...]], known_brokers: Collection[int] | None) -> bool:
    known = None if known_brokers is None else set(known_brokers)
    for replicas in lists:
        if not replicas or len(set(replicas)) != len(replicas) or min(replicas) < 0:
            return False
        if known is not None and not known.issuperset(replicas):
            return False
    return True


def validate_assignment(
    assignment: Mapping[int, Sequence[int]],
    known_brokers: Collection[int] | None = None,
    same_replication_factor: bool = False,
) -> None:
    """Partition ids 0..n-1 with no gap, non-empty replica lists without duplicates, and (when
    asked, as CreateTopics does) the same replication factor everywhere and only known brokers.
    A topic read from ZooKeeper may mix replication factors (a reassignment in progress)."""
    if not assignment:
        raise InvalidReplicaAssignmentError("the assignment has no partitions")
    if sorted(assignment) != list(range(len(assignment))):
        raise InvalidReplicaAssignmentError(f"partition ids must be 0..{len(assignment) - 1}, got {sorted(assignment)}")
    # Each distinct replica list is checked once (a topic of 1000 partitions has a few dozen, and
    # a cold failover validates every topic); a bad one is reported at its first partition below.
    distinct = set(map(tuple, assignment.values()))
    one_factor = not same_replication_factor or len(set(map(len, distinct))) <= 1
    if one_factor and _replica_lists_valid(distinct, known_brokers):
        return
    factors = set()
    for partition, replicas in sorted(assignment.items()):
        if not replicas:
            raise InvalidReplicaAssignmentError(f"partition {partition} has an empty replica list")
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"partition {partition} has duplicate replicas {list(replicas)}")
        if any(r < 0 for r in replicas):
            raise InvalidReplicaAssignmentError(f"partition {partition} has a negative broker id")
        if known_brokers is not None:
            unknown = sorted(set(replicas) - set(known_brokers))
            if unknown:
                raise InvalidReplicaAssignmentError(f"partition {partition} names unknown brokers {unknown}")
        factors.add(len(replicas))
    if same_replication_factor and len(factors) > 1:
        raise InvalidReplicaAssignmentError(f"partitions have different replication factors {sorted(factors)}")
