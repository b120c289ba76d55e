"""When the broker in controlled shutdown hears its answer (controller/controlled_shutdown.py):
once every state is written and what it still leads is known, and before the operation's
requests are built and sent, with a loop turn for its RPC in between; the requests still go
out before the event ends."""

from __future__ import annotations

import asyncio

from controller_svc.common.errors import ErrorCode
from controller_svc.common.model import LeaderIsrAndControllerEpoch, TopicPartition
from controller_svc.controller import controlled_shutdown as shutdown
from controller_svc.controller.partition_manager import PartitionManager
from controller_svc.core.context import ControllerContext
from tests.unit.fakes import FakePartitionStore, RecordingSink, context, null_log

SHUTTING_DOWN = 1


def _led_by_one(topics: int, per_topic: int) -> tuple[ControllerContext, FakePartitionStore]:
    """Broker 1 leads every partition (RF 3 over brokers 1-4), its ISR full."""
    others = [2, 3, 4]
    ctx = context(
        [1, 2, 3, 4],
        {
            f"t{t}": {p: [SHUTTING_DOWN, others[p % 3], others[(p + 1) % 3]] for p in range(per_topic)}
            for t in range(topics)
        },
    )
    store = FakePartitionStore()
    for topic, parts in ctx.assignments.items():
        for p, assignment in parts.items():
            tp = TopicPartition(topic, p)
            state = LeaderIsrAndControllerEpoch(SHUTTING_DOWN, 1, assignment.replicas, 0, ctx.epoch)
            ctx.partition_states[tp] = store.znodes[tp] = state
    return ctx, store


async def test_the_broker_is_answered_before_the_requests_are_built_and_sent() -> None:
    ctx, store = _led_by_one(topics=3, per_topic=40)
    sink = RecordingSink()
    manager = PartitionManager(9, ctx, store, sink, null_log(), lambda: False)
    await manager.initialize_state_machines()
    reply: asyncio.Future[shutdown.ShutdownOutcome] = asyncio.get_running_loop().create_future()
    # What the RPC handler finds when it runs: the requests sent by then, the states written.
    at_reply: list[tuple[int, int]] = []

    async def rpc_handler() -> None:
        await reply
        moved = sum(1 for state in store.znodes.values() if state.leader != SHUTTING_DOWN)
        at_reply.append((len(sink.sent), moved))

    handler = asyncio.create_task(rpc_handler())
    outcome = await shutdown.controlled_shutdown(ctx, manager, null_log(), SHUTTING_DOWN, -1, answer=reply.set_result)
    await handler
    assert reply.result() is outcome
    assert outcome.error_code == ErrorCode.NONE and outcome.remaining == ()
    # Every state was written before the answer; no request had been sent.
    assert at_reply == [(0, 120)]
    # The requests went out all the same, before the operation ended: LeaderAndIsr to the new
    # leaders and followers (the shutting-down broker included), UpdateMetadata to all.
    led_and_isr = {
        (p.topic, p.partition)
        for _, api, request in sink.sent
        if api == "LeaderAndIsr"
        for p in request.partition_states
    }
    assert led_and_isr == {(tp.topic, tp.partition) for tp in store.znodes}
    assert {broker for broker, api, _ in sink.sent if api == "UpdateMetadata"} == {1, 2, 3, 4}


async def test_a_refusal_is_returned_not_answered_early() -> None:
    ctx, store = _led_by_one(topics=1, per_topic=5)
    manager = PartitionManager(9, ctx, store, RecordingSink(), null_log(), lambda: False)
    await manager.initialize_state_machines()
    answered: list[shutdown.ShutdownOutcome] = []
    outcome = await shutdown.controlled_shutdown(ctx, manager, null_log(), 7, -1, answer=answered.append)
    assert outcome.error_code == ErrorCode.BROKER_NOT_AVAILABLE
    assert answered == []  # the caller answers a refusal with the outcome it gets back
