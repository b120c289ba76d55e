"""The controller's scans and builds in slices (controller/slices.py, a controlled shutdown's
scans, a broker failure's, the batch built a part at a time): the same partitions in the same
order, and the same requests, as one pass, with the event loop given a turn between slices."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from controller_svc.common import pacing
from controller_svc.common.errors import ErrorCode
from controller_svc.common.model import LeaderIsrAndControllerEpoch, PartitionAndReplica, TopicPartition
from controller_svc.controller import controlled_shutdown as shutdown
from controller_svc.controller import slices
from controller_svc.controller.partition_manager import PartitionManager
from controller_svc.controller.replica_state_machine import ReplicaState
from controller_svc.core.context import ControllerContext
from tests.unit.fakes import FakePartitionStore, RecordingSink, context, null_log


def _cluster(seed: int) -> tuple[ControllerContext, FakePartitionStore]:
    rng = random.Random(seed)
    assignments = {
        f"t{t}": {p: rng.sample([1, 2, 3, 4], rng.choice([1, 3, 3])) for p in range(rng.randrange(1, 9))}
        for t in range(12)
    }
    ctx = context([1, 2, 3, 4], assignments)
    store = FakePartitionStore()
    for topic, parts in ctx.assignments.items():
        for p, assignment in parts.items():
            if rng.random() < 0.1:
                continue  # no state znode yet
            tp = TopicPartition(topic, p)
            leader = rng.choice(assignment.replicas)
            state = LeaderIsrAndControllerEpoch(leader, 1, assignment.replicas, 0, ctx.epoch)
            ctx.partition_states[tp] = store.znodes[tp] = state
    ctx.topics_to_be_deleted.add("t3")
    return ctx, store


def _one_pass(ctx: ControllerContext, broker_id: int) -> tuple[list[TopicPartition], list[TopicPartition]]:
    """What the scans stand for, in one pass (KafkaController.doControlledShutdown)."""
    on_broker = sorted(
        tp
        for tp in ctx.partitions_on_brokers([broker_id])
        if len(ctx.replicas(tp)) > 1 and tp in ctx.partition_states and not ctx.is_topic_queued_for_deletion(tp.topic)
    )
    leading = [tp for tp in on_broker if ctx.partition_states[tp].leader == broker_id]
    return leading, [tp for tp in on_broker if tp not in leading]


class LoopTurns:
    """Counts the turns the event loop gave other tasks while something ran."""

    def __init__(self) -> None:
        self.turns = 0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0)
            self.turns += 1

    async def __aenter__(self) -> LoopTurns:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)
        self.turns = 0
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


@pytest.mark.parametrize("seed", range(4))
async def test_the_scans_in_slices_find_what_one_pass_finds(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    monkeypatch.setattr(shutdown, "SCAN_SLICE", 3)
    ctx, _ = _cluster(seed)
    for broker_id in (1, 2, 3, 4):
        leading, following = _one_pass(ctx, broker_id)
        async with LoopTurns() as scan:
            found = await shutdown._replicated_on_broker(ctx, broker_id)
        assert found == (leading, following)
        assert scan.turns >= (len(leading) + len(following)) // 8  # whole topics (of up to 8) per slice
        async with LoopTurns() as led_scan:
            led = await shutdown.replicated_partitions_led_by(ctx, broker_id)
        assert led == leading
        assert led_scan.turns >= ctx.partition_count // 8 - 1


@pytest.mark.parametrize("seed", range(4))
async def test_a_controlled_shutdown_in_slices_moves_every_leader_and_stops_every_follower(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    monkeypatch.setattr(shutdown, "SCAN_SLICE", 3)
    monkeypatch.setattr(slices, "SCAN_SLICE", 3)
    ctx, store = _cluster(seed)
    sink = RecordingSink()
    manager = PartitionManager(9, ctx, store, sink, null_log(), lambda: False)
    await manager.initialize_state_machines()
    leading, following = _one_pass(ctx, 2)
    before = dict(ctx.partition_states)
    outcome = await shutdown.controlled_shutdown(ctx, manager, null_log(), 2, -1)
    assert outcome.error_code == ErrorCode.NONE and outcome.remaining == ()
    for tp in leading:
        assert ctx.partition_states[tp].leader not in (2, -1)  # another replica of the ISR leads
    for tp in following:
        assert 2 not in ctx.partition_states[tp].isr
        assert manager.rsm.state(PartitionAndReplica(tp, 2)) is ReplicaState.OFFLINE
    untouched = set(before) - set(leading) - set(following)
    assert all(ctx.partition_states[tp] == before[tp] for tp in untouched)  # RF 1, deleted topic
    assert {(tp.topic, tp.partition) for tp in following} == {
        (p.topic, p.partition) for b, api, r in sink.sent if b == 2 and api == "StopReplica" for p in r.partitions
    }


async def test_keep_in_slices_is_a_filter_with_a_turn_between_slices() -> None:
    items = list(range(23))
    async with LoopTurns() as scan:
        kept = await slices.keep_in_slices(items, lambda i: i % 3 == 0, size=5)
    assert kept == [i for i in items if i % 3 == 0]
    assert scan.turns == 4  # 5 slices


async def _broker_failure(
    seed: int, slice_size: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[tuple[int, str, bytes]], int, int]:
    from controller_svc.controller import partition_manager, partition_state_machine, replica_state_machine

    for module, name in (
        (slices, "SCAN_SLICE"),
        (partition_manager, "SCAN_SLICE"),
        (partition_manager, "BUILD_SLICE"),
        (partition_state_machine, "VALIDATE_SLICE"),
        (replica_state_machine, "VALIDATE_SLICE"),
    ):
        monkeypatch.setattr(module, name, slice_size)
    ctx, store = _cluster(seed)
    sink = RecordingSink()
    manager = PartitionManager(9, ctx, store, sink, null_log(), lambda: False)
    await manager.initialize_state_machines()
    assert {r for r in await manager._replicas_on_brokers({2, 3})} == ctx.replicas_on_brokers({2, 3})
    del ctx.live_brokers[2]
    async with LoopTurns() as failure:
        await manager.on_broker_failure({2})
    sent = [(b, api, r.SerializeToString()) for b, api, r in sink.sent]
    return sent, ctx.preferred_replica_imbalance_count(), failure.turns


@pytest.mark.parametrize("seed", range(4))
async def test_a_broker_failure_in_slices_sends_what_one_pass_sends(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    sent, imbalance, turns = await _broker_failure(seed, 3, monkeypatch)
    one_pass_sent, one_pass_imbalance, one_pass_turns = await _broker_failure(seed, 10**9, monkeypatch)
    assert any(api == "LeaderAndIsr" for _, api, _ in sent)
    assert sent == one_pass_sent and imbalance == one_pass_imbalance
    assert turns > one_pass_turns + 10


async def test_a_pacer_yields_by_count_on_a_still_clock_and_by_the_loops_clock_when_it_moves() -> None:
    async with LoopTurns() as by_count:
        pacer = pacing.Pacer(size=10, budget_s=3600)
        for _ in range(35):
            await pacer.before(1)
    assert by_count.turns == pacer.yields == 3  # before items 11, 21 and 31
    async with LoopTurns() as by_time:
        pacer = pacing.Pacer(size=10**9, budget_s=0.01)
        await pacer.before(1)  # nothing done yet: no yield however late it is
        for _ in range(3):
            time.sleep(0.02)  # noqa: ASYNC251 (an item's CPU, holding the loop past the budget)
            await pacer.before(1)
    assert by_time.turns == pacer.yields == 3


def _digest_cluster(topics: int) -> ControllerContext:
    ctx = context([1, 2, 3], {f"t{t}": {p: [1, 2, 3] for p in range(4)} for t in range(topics)})
    for tp in ctx.all_partitions():
        ctx.partition_states[tp] = LeaderIsrAndControllerEpoch(1, 1, (1, 2, 3), 0, ctx.epoch)
    return ctx


async def _failover_start_up(monkeypatch: pytest.MonkeyPatch, budget_s: float) -> tuple[list[bytes], int]:
    """A failover's start-up (UpdateMetadata's digests, both state machines, LeaderAndIsr) of
    40 partitions, far fewer than a slice's count: the only yields are the time's."""
    monkeypatch.setattr(pacing, "PACE_BUDGET_S", budget_s)
    ctx = _digest_cluster(10)
    sink = RecordingSink()
    manager = PartitionManager(9, ctx, FakePartitionStore(), sink, null_log(), lambda: False)
    paced: list[int] = []
    original = pacing.Pacer.before

    async def counting_before(pacer: pacing.Pacer, items: int = 1) -> None:
        yields = pacer.yields
        await original(pacer, items)
        paced.append(pacer.yields - yields)

    monkeypatch.setattr(pacing.Pacer, "before", counting_before)
    await manager.start_up()
    return [r.SerializeToString() for _, _, r in sink.sent], sum(paced)


async def test_a_failovers_start_up_yields_once_its_time_is_up_whatever_the_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Held in a slow hour: 50k partitions' digests were 2.2 s in one step (bench/results/
    # failover-1m-warm-slowest-hour-ead36da.json); a budget of 0 makes every topic late.
    sent_on_time, yields_on_time = await _failover_start_up(monkeypatch, budget_s=3600)
    sent_late, yields_late = await _failover_start_up(monkeypatch, budget_s=0)
    assert yields_on_time == 0
    # UpdateMetadata's digests, both state machines' initialize and the replicas' resend_online:
    # a yield before each topic but the first
    assert yields_late == 4 * 9
    assert sent_late == sent_on_time and any(sent_late)
