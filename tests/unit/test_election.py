from __future__ import annotations

import pytest

from controller_svc.common.model import LeaderIsrAndControllerEpoch, ReplicaAssignment
from controller_svc.core import election as el


@pytest.mark.parametrize(
    ("assignment", "isr", "live", "unclean", "expected"),
    [
        ([1, 2, 3], [1, 2, 3], {1, 2, 3}, False, 1),
        ([1, 2, 3], [3, 2], {1, 2, 3}, False, 2),  # assignment order, not ISR order
        ([1, 2, 3], [1, 2, 3], {3}, False, 3),
        ([1, 2, 3], [1], {2, 3}, False, None),  # no live ISR member
        ([1, 2, 3], [1], {2, 3}, True, 2),  # unclean: first live replica
        ([1, 2, 3], [], {1, 2, 3}, False, None),  # empty ISR
        ([1, 2, 3], [], {3}, True, 3),
        ([1, 2, 3], [1, 2], set(), True, None),  # no live replica at all
        ([], [1], {1}, True, None),
    ],
)
def test_offline_partition_leader_election(
    assignment: list[int], isr: list[int], live: set[int], unclean: bool, expected: int | None
) -> None:
    assert el.offline_partition_leader_election(assignment, isr, live, unclean) == expected


@pytest.mark.parametrize(
    ("reassignment", "isr", "live", "expected"),
    [
        ([4, 5, 6], [1, 2, 4, 5, 6], {1, 2, 4, 5, 6}, 4),
        ([4, 5, 6], [1, 2, 5, 6], {1, 2, 4, 5, 6}, 5),  # 4 not yet in ISR
        ([4, 5, 6], [1, 2, 4, 5, 6], {5, 6}, 5),
        ([4, 5], [1, 2], {1, 2, 4, 5}, None),
        ([], [1], {1}, None),
    ],
)
def test_reassign_partition_leader_election(
    reassignment: list[int], isr: list[int], live: set[int], expected: int | None
) -> None:
    assert el.reassign_partition_leader_election(reassignment, isr, live) == expected


@pytest.mark.parametrize(
    ("assignment", "isr", "live", "expected"),
    [
        ([1, 2, 3], [1, 2, 3], {1, 2, 3}, 1),
        ([1, 2, 3], [2, 3], {1, 2, 3}, None),  # preferred not in ISR
        ([1, 2, 3], [1, 2, 3], {2, 3}, None),  # preferred not live
        ([], [], set(), None),
    ],
)
def test_preferred_replica_partition_leader_election(
    assignment: list[int], isr: list[int], live: set[int], expected: int | None
) -> None:
    assert el.preferred_replica_partition_leader_election(assignment, isr, live) == expected


@pytest.mark.parametrize(
    ("assignment", "isr", "live", "shutting_down", "expected"),
    [
        ([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}, 2),
        ([1, 2, 3], [1, 3], {1, 2, 3}, {1}, 3),
        ([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1, 2, 3}, None),  # the whole ISR is shutting down
        ([1, 2, 3], [1, 2], {1, 2, 3}, {1, 2}, None),
        ([1, 2, 3], [1, 2, 3], {1, 3}, {1}, 3),  # 2 is not live
        ([1, 2, 3], [], {1, 2, 3}, {1}, None),
    ],
)
def test_controlled_shutdown_partition_leader_election(
    assignment: list[int], isr: list[int], live: set[int], shutting_down: set[int], expected: int | None
) -> None:
    assert el.controlled_shutdown_partition_leader_election(assignment, isr, live, shutting_down) == expected


def state(leader: int, isr: tuple[int, ...], epoch: int = 5) -> LeaderIsrAndControllerEpoch:
    return LeaderIsrAndControllerEpoch(leader, epoch, isr, 7, 2)


def test_offline_election_new_isr_is_the_live_isr_and_epoch_bumps() -> None:
    result = el.elect(
        el.ElectionStrategy.OFFLINE, ReplicaAssignment((1, 2, 3)), state(1, (1, 2, 3)), {2, 3}, set(), False
    )
    assert result == el.ElectionResult(2, 6, (2, 3), False)


def test_offline_election_given_every_live_broker_keeps_only_replicas_in_the_isr() -> None:
    # The partition state machine passes the live brokers (not the partition's online replicas);
    # 4 is live but no replica of this partition (an ISR no controller would have written).
    result = el.elect(
        el.ElectionStrategy.OFFLINE, ReplicaAssignment((1, 2, 3)), state(1, (1, 4, 2)), {2, 3, 4, 5}, set(), False
    )
    assert result == el.ElectionResult(2, 6, (2,), False)


def test_unclean_offline_election_is_flagged_and_isr_is_the_leader_alone() -> None:
    result = el.elect(el.ElectionStrategy.OFFLINE, ReplicaAssignment((1, 2, 3)), state(1, (1,)), {3}, set(), True)
    assert result == el.ElectionResult(3, 6, (3,), True)
    no_unclean = el.elect(el.ElectionStrategy.OFFLINE, ReplicaAssignment((1, 2, 3)), state(1, (1,)), {3}, set(), False)
    assert no_unclean.leader is None and no_unclean.isr == (1,)


def test_offline_election_ignores_shutting_down_brokers() -> None:
    # The caller passes online replicas (live, not shutting down); 1 is shutting down.
    result = el.elect(el.ElectionStrategy.OFFLINE, ReplicaAssignment((1, 2)), state(1, (1, 2)), {2}, {1}, False)
    assert result.leader == 2 and result.isr == (2,)


def test_reassign_and_preferred_keep_the_isr() -> None:
    reassigning = ReplicaAssignment((1, 2, 3, 4), adding=(4,), removing=(1,))
    result = el.elect(el.ElectionStrategy.REASSIGN, reassigning, state(1, (1, 2, 3, 4)), {1, 2, 3, 4}, set(), False)
    assert result == el.ElectionResult(2, 6, (1, 2, 3, 4), False)
    preferred = el.elect(
        el.ElectionStrategy.PREFERRED, ReplicaAssignment((3, 1)), state(1, (1, 3)), {1, 3}, set(), False
    )
    assert preferred == el.ElectionResult(3, 6, (1, 3), False)


def test_controlled_shutdown_removes_shutting_down_brokers_from_isr() -> None:
    result = el.elect(
        el.ElectionStrategy.CONTROLLED_SHUTDOWN, ReplicaAssignment((1, 2, 3)), state(1, (1, 2, 3)), {2, 3}, {1}, False
    )
    assert result == el.ElectionResult(2, 6, (2, 3), False)
    everyone = el.elect(
        el.ElectionStrategy.CONTROLLED_SHUTDOWN, ReplicaAssignment((1, 2)), state(1, (1, 2)), set(), {1, 2}, False
    )
    assert everyone.leader is None
