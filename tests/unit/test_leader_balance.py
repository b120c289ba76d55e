"""Kafka's checkAndTriggerAutoLeaderRebalance rules for the automatic preferred election."""

from __future__ import annotations

from controller_svc.common.model import LeaderIsrAndControllerEpoch, ReplicaAssignment, TopicPartition
from controller_svc.controller.leader_balance import LeaderBalancer
from tests.unit.fakes import context, null_log


def balancer(led_by: dict[tuple[str, int], int], assignments: dict[str, dict[int, list[int]]]) -> LeaderBalancer:
    ctx = context([1, 2, 3], assignments)
    for (topic, partition), leader in led_by.items():
        ctx.partition_states[TopicPartition(topic, partition)] = LeaderIsrAndControllerEpoch(leader, 1, (1, 2, 3), 1, 3)
    return LeaderBalancer(1, ctx, None, None, null_log(), 10)  # type: ignore[arg-type]


# Broker 1 is preferred for a-0, a-1 and d-0..d-2 and leads only a-0.
ASSIGNMENTS = {"a": {0: [1, 2, 3], 1: [1, 2, 3]}, "d": {0: [1, 2, 3], 1: [1, 2, 3], 2: [1, 2, 3]}}
LEADERS = {("a", 0): 1, ("a", 1): 2, ("d", 0): 2, ("d", 1): 2, ("d", 2): 2}


def test_imbalanced_preferred_partitions_are_candidates() -> None:
    b = balancer(LEADERS, ASSIGNMENTS)
    assert sorted(b.imbalanced_partitions()) == [TopicPartition("a", 1)] + [TopicPartition("d", p) for p in range(3)]


def test_topics_queued_for_deletion_are_out_of_the_ratio_and_the_candidates() -> None:
    # Broker 1 leads 9 of its 10 preferred partitions of b: 10 % is not above 10 %. Counting
    # d's three partitions it does not lead (d is being deleted) would make it 4/13 and elect b-9.
    assignments = {"b": {p: [1, 2, 3] for p in range(10)}, "d": {p: [1, 2, 3] for p in range(3)}}
    leaders = {("b", p): (1 if p < 9 else 2) for p in range(10)} | {("d", p): 2 for p in range(3)}
    b = balancer(leaders, assignments)
    assert TopicPartition("b", 9) in b.imbalanced_partitions()
    b.ctx.topics_to_be_deleted.add("d")
    assert b.imbalanced_partitions() == []


def test_no_candidate_while_any_reassignment_runs() -> None:
    b = balancer(LEADERS, ASSIGNMENTS)
    b.ctx.set_assignment(TopicPartition("a", 0), ReplicaAssignment((1, 2, 3, 4), adding=(4,), removing=()))
    assert b.ctx.partitions_being_reassigned
    assert b.imbalanced_partitions() == []
