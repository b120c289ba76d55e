"""A broker's background metadata digests (`BrokerControlService.run_metadata_digests`) on the
virtual clock: made after an interval with no control request applied, and never later than
a few intervals however busy the broker stays."""

from __future__ import annotations

import asyncio

from broker_stub.server import BrokerControlService
from broker_stub.state import BrokerState
from controller_svc.common.model import TopicPartition
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.common.tasks import cancel_and_wait, spawn
from kcontroller.v1 import common_pb2
from tests.sim.virtual_clock import VirtualClock, new_virtual_loop

INTERVAL_S = 1.0


def _write(state: BrokerState, topic: str) -> None:
    """What an applied UpdateMetadata does to the cache and the generation."""
    state.metadata[TopicPartition(topic, 0)] = common_pb2.PartitionState(topic=topic, partition=0, leader=1)
    state.generation += 1


def _made_at(busy_until: float) -> float:
    """Virtual seconds from the start at which the digests of a write at 0.1 s were made, with
    a control request applied every 0.3 s until `busy_until`."""
    clock = VirtualClock(start=0.0)
    loop = new_virtual_loop(clock)

    async def main() -> float:
        state = BrokerState(broker_id=1)
        made: list[float] = []
        first_made = asyncio.Event()
        refresh = state.refresh_metadata_digests

        def noting_when(max_partitions: int) -> bool:
            if state.metadata.stale_digests:
                made.append(clock.now)
                first_made.set()
            return refresh(max_partitions)

        state.refresh_metadata_digests = noting_when  # type: ignore[method-assign]
        service = BrokerControlService(state, StateChangeLog(None, "broker-1"))
        task = spawn(service.run_metadata_digests(INTERVAL_S, quiet_intervals_at_most=5), "digests")
        try:
            await asyncio.sleep(0.1)
            _write(state, "a")
            while clock.now < busy_until and not made:
                await asyncio.sleep(0.3)
                _write(state, "a")
            await first_made.wait()
            return made[0]
        finally:
            await cancel_and_wait(task)

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_digests_wait_for_a_quiet_interval() -> None:
    assert _made_at(busy_until=0.0) <= 2 * INTERVAL_S + 0.05  # quiet from the first write on
    made = _made_at(busy_until=2.5)  # requests until 2.5 s: made after the first quiet interval
    assert 2.5 < made <= 2.5 + 2 * INTERVAL_S + 0.05


def test_a_busy_broker_still_makes_its_digests_within_a_few_intervals() -> None:
    assert _made_at(busy_until=100.0) <= 5 * INTERVAL_S + 0.05 + 0.3
