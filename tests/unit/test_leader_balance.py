"""Kafka's checkAndTriggerAutoLeaderRebalance rules for the automatic preferred election."""

from __future__ import annotations

import asyncio

from controller_svc.common.model import LeaderIsrAndControllerEpoch, ReplicaAssignment, TopicPartition
from controller_svc.controller.leader_balance import LeaderBalancer
from controller_svc.controller.slices import SCAN_SLICE
from tests.unit.fakes import context, null_log


def balancer(led_by: dict[tuple[str, int], int], assignments: dict[str, dict[int, list[int]]]) -> LeaderBalancer:
    ctx = context([1, 2, 3], assignments)
    for (topic, partition), leader in led_by.items():
        ctx.partition_states[TopicPartition(topic, partition)] = LeaderIsrAndControllerEpoch(leader, 1, (1, 2, 3), 1, 3)
    return LeaderBalancer(1, ctx, None, None, null_log(), 10)  # type: ignore[arg-type]


# Broker 1 is preferred for a-0, a-1 and d-0..d-2 and leads only a-0.
ASSIGNMENTS = {"a": {0: [1, 2, 3], 1: [1, 2, 3]}, "d": {0: [1, 2, 3], 1: [1, 2, 3], 2: [1, 2, 3]}}
LEADERS = {("a", 0): 1, ("a", 1): 2, ("d", 0): 2, ("d", 1): 2, ("d", 2): 2}


async def test_imbalanced_preferred_partitions_are_candidates() -> None:
    b = balancer(LEADERS, ASSIGNMENTS)
    assert sorted(await b.imbalanced_partitions()) == [TopicPartition("a", 1)] + [
        TopicPartition("d", p) for p in range(3)
    ]


async def test_topics_queued_for_deletion_are_out_of_the_ratio_and_the_candidates() -> None:
    # Broker 1 leads 9 of its 10 preferred partitions of b: 10 % is not above 10 %. Counting
    # d's three partitions it does not lead (d is being deleted) would make it 4/13 and elect b-9.
    assignments = {"b": {p: [1, 2, 3] for p in range(10)}, "d": {p: [1, 2, 3] for p in range(3)}}
    leaders = {("b", p): (1 if p < 9 else 2) for p in range(10)} | {("d", p): 2 for p in range(3)}
    b = balancer(leaders, assignments)
    assert TopicPartition("b", 9) in await b.imbalanced_partitions()
    b.ctx.topics_to_be_deleted.add("d")
    assert await b.imbalanced_partitions() == []


async def test_no_candidate_while_any_reassignment_runs() -> None:
    b = balancer(LEADERS, ASSIGNMENTS)
    b.ctx.set_assignment(TopicPartition("a", 0), ReplicaAssignment((1, 2, 3, 4), adding=(4,), removing=()))
    assert b.ctx.partitions_being_reassigned
    assert await b.imbalanced_partitions() == []


async def test_the_scan_yields_to_the_loop_and_finds_what_one_pass_finds() -> None:
    """At scale the scan pauses every SCAN_SLICE partitions (other tasks run: gRPC handlers,
    senders); the candidates are the same, in the order of the brokers then the assignments."""
    n = 3 * SCAN_SLICE + 7
    assignments = {"big": {p: [1 + p % 3, 1 + (p + 1) % 3, 1 + (p + 2) % 3] for p in range(n)}}
    # A quarter of the partitions are led by their second replica: 25 % imbalance on each broker.
    leaders = {("big", p): 1 + (p + 1) % 3 if p % 4 == 0 else 1 + p % 3 for p in range(n)}
    b = balancer(leaders, assignments)
    turns = 0
    scanning = True

    async def other_task() -> None:
        nonlocal turns
        while scanning:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.ensure_future(other_task())
    await asyncio.sleep(0)
    found = await b.imbalanced_partitions()
    scanning = False
    await other
    assert turns >= 3
    expected = [
        TopicPartition("big", p) for broker in (1, 2, 3) for p in range(n) if p % 4 == 0 and 1 + p % 3 == broker
    ]
    assert found == expected
