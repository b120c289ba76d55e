"""The checks and shapes a cold load's topics go through (core/topics.py, adapters/zk/loads.py),
against the plain per-partition rules they were sped up from, on seeded random assignments."""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence

import pytest

from controller_svc.adapters.zk import codecs, loads
from controller_svc.common.model import ReplicaAssignment, TopicPartition
from controller_svc.core.context import ControllerContext
from controller_svc.core.topics import InvalidReplicaAssignmentError, validate_assignment


def plain_rule(assignment: Mapping[int, Sequence[int]], known: Collection[int] | None, same_factor: bool) -> str | None:
    """The first error of the per-partition rule, in partition order, or None."""
    if not assignment:
        return "the assignment has no partitions"
    if sorted(assignment) != list(range(len(assignment))):
        return f"partition ids must be 0..{len(assignment) - 1}, got {sorted(assignment)}"
    factors = set()
    for partition, replicas in sorted(assignment.items()):
        if not replicas:
            return f"partition {partition} has an empty replica list"
        if len(set(replicas)) != len(replicas):
            return f"partition {partition} has duplicate replicas {list(replicas)}"
        if any(r < 0 for r in replicas):
            return f"partition {partition} has a negative broker id"
        if known is not None and set(replicas) - set(known):
            return f"partition {partition} names unknown brokers {sorted(set(replicas) - set(known))}"
        factors.add(len(replicas))
    if same_factor and len(factors) > 1:
        return f"partitions have different replication factors {sorted(factors)}"
    return None


def random_assignment(rng: random.Random) -> dict[int, tuple[int, ...]]:
    lists = [tuple(rng.sample(range(1, 7), 3)) for _ in range(rng.randint(1, 6))]
    assignment = {p: rng.choice(lists) for p in range(rng.randint(1, 40))}
    fault = rng.randrange(8)
    some = rng.randrange(len(assignment))
    if fault == 1:
        assignment[some] = ()
    elif fault == 2:
        assignment[some] = (2, 2)
    elif fault == 3:
        assignment[some] = (1, -1)
    elif fault == 4:
        assignment[some] = (1, 9)  # 9 is no known broker
    elif fault == 5:
        assignment[some] = (1, 2)  # another replication factor
    elif fault == 6:
        assignment[len(assignment) + 1] = (1,)  # a gap in the ids
    return assignment


@pytest.mark.parametrize("seed", range(300))
def test_validation_raises_exactly_what_the_per_partition_rule_raises(seed: int) -> None:
    rng = random.Random(seed)
    assignment = random_assignment(rng)
    known = rng.choice([None, range(1, 7)])
    same_factor = rng.random() < 0.5
    expected = plain_rule(assignment, known, same_factor)
    if expected is None:
        validate_assignment(assignment, known, same_factor)
        return
    with pytest.raises(InvalidReplicaAssignmentError) as raised:
        validate_assignment(assignment, known, same_factor)
    assert str(raised.value) == expected


def test_every_fault_of_the_random_assignments_is_met() -> None:
    errors = set()
    for seed in range(300):
        rng = random.Random(seed)
        assignment = random_assignment(rng)
        error = plain_rule(assignment, range(1, 7), same_factor=True)
        errors.add(" ".join(error.split(" ")[2:4]) if error and error.startswith("partition ") else error)
    assert len(errors) == 7  # none, empty, duplicate, negative, unknown, factors, and the id gap


def test_a_topics_partitions_share_an_assignment_per_replica_list_unless_being_reassigned() -> None:
    znode = codecs.TopicZnode(
        partitions={0: (1, 2), 1: (2, 3), 2: (1, 2), 3: (1, 2), 4: (2, 3)},
        adding_replicas={3: (4,)},
        removing_replicas={3: (1,), 4: (3,)},
    )
    got = loads._assignments(znode)
    assert got == {
        0: ReplicaAssignment((1, 2)),
        1: ReplicaAssignment((2, 3)),
        2: ReplicaAssignment((1, 2)),
        3: ReplicaAssignment((1, 2), (4,), (1,)),
        4: ReplicaAssignment((2, 3), (), (3,)),
    }
    assert got[0] is got[2] and got[3] is not got[0] and got[4] is not got[1]
    plain = loads._assignments(codecs.TopicZnode(partitions={0: (1,), 1: (1,), 2: (2,)}))
    assert plain[0] is plain[1] and plain == {
        0: ReplicaAssignment((1,)),
        1: ReplicaAssignment((1,)),
        2: ReplicaAssignment((2,)),
    }


def test_all_partitions_lists_every_topics_partitions_in_assignment_order() -> None:
    ctx = ControllerContext()
    ctx.assignments["b"] = {1: ReplicaAssignment((1,)), 0: ReplicaAssignment((2,))}
    ctx.assignments["a"] = {0: ReplicaAssignment((1,))}
    ctx.assignments["c"] = {}
    partitions = ctx.all_partitions()
    assert partitions == [TopicPartition("b", 1), TopicPartition("b", 0), TopicPartition("a", 0)]
    assert all(type(tp) is TopicPartition for tp in partitions)
    assert partitions[0].topic == "b" and partitions[0].partition == 1
