"""A leader's ISR maintenance (`BrokerControlService.expand_caught_up_followers`) on the
ZooKeeper model and the virtual clock: which partitions its rounds look at, and that a
follower is never forgotten while it waits."""

from __future__ import annotations

import asyncio

from broker_stub.server import BrokerControlService
from broker_stub.state import BrokerState, PartitionRole
from controller_svc.adapters.zk import codecs, paths
from controller_svc.common.model import LeaderIsrAndControllerEpoch, TopicPartition
from controller_svc.common.state_change_log import StateChangeLog
from kcontroller.v1 import common_pb2
from tests.sim.virtual_clock import VirtualClock, new_virtual_loop
from tests.sim.zk_model import SimZkClient, ZooKeeperModel

T0 = TopicPartition("t", 0)
DELAY_S = 1.0


def run_virtual(main: asyncio.Future[None] | object) -> None:
    clock = VirtualClock()
    loop = new_virtual_loop(clock)
    try:
        loop.run_until_complete(main)  # type: ignore[arg-type]
    finally:
        loop.close()


async def leader_of_t0(isr: tuple[int, ...]) -> tuple[BrokerControlService, ZooKeeperModel]:
    """Broker 1 leading t-0 (replicas 1, 2, 3) with `isr`, in ZooKeeper and in its roles;
    brokers 1-3 registered."""
    model = ZooKeeperModel()
    zk = SimZkClient(model)
    await zk.start()
    for b in (1, 2, 3):
        await zk.ensure_path(paths.broker_path(b))
    await zk.ensure_path(paths.ISR_CHANGE_NOTIFICATION)
    state_path = paths.partition_state_path(T0.topic, T0.partition)
    await zk.ensure_path(state_path)
    await zk.set_data(state_path, codecs.encode_partition_state(LeaderIsrAndControllerEpoch(1, 3, isr, -1, 1)))
    written = await zk.exists(state_path)
    assert written is not None
    state = BrokerState(broker_id=1, registered=True)
    state.roles[T0] = PartitionRole("leader", 1, 3, isr, (1, 2, 3), 1, written.version)
    service = BrokerControlService(state, StateChangeLog(None, "broker-1"), zk, catchup_delay_s=DELAY_S)  # type: ignore[arg-type]
    return service, model


def test_a_second_returning_follower_joins_the_isr_after_the_first() -> None:
    """Followers 2 and 3 come back half a delay apart: 2 joins, and 3 joins half a delay later
    with nothing else happening on the broker. A round used to drop a partition from its
    candidates once its ISR grew, though 3 still waited: 3 stayed out until some control
    request happened to make the broker look again."""

    async def main() -> None:
        service, model = await leader_of_t0(isr=(1,))
        state = service.state
        loop = asyncio.get_running_loop()
        state.live_brokers = {b: common_pb2.LiveBroker(id=b) for b in (1, 2)}  # 2 is back
        state.generation += 1  # as an UpdateMetadata applied does
        assert await service.expand_caught_up_followers() == 0
        await asyncio.sleep(DELAY_S / 2)
        state.live_brokers[3] = common_pb2.LiveBroker(id=3)  # and 3, half a delay later
        state.generation += 1
        assert await service.expand_caught_up_followers() == 0
        await asyncio.sleep(DELAY_S / 2)
        assert await service.expand_caught_up_followers() == 1
        assert state.roles[T0].isr == (1, 2)
        joined_2 = loop.time()
        grown = 0
        while grown == 0 and loop.time() < joined_2 + 5 * DELAY_S:
            await asyncio.sleep(DELAY_S / 10)
            grown = await service.expand_caught_up_followers()
        assert state.roles[T0].isr == (1, 2, 3)
        assert loop.time() - joined_2 <= DELAY_S / 2 + DELAY_S / 10 + 1e-6
        written = codecs.decode_partition_state(
            paths.partition_state_path(T0.topic, T0.partition),
            model.nodes[paths.partition_state_path(T0.topic, T0.partition)].data,
            0,
        )
        assert written.isr == (1, 2, 3)

    run_virtual(main())


def test_a_dead_follower_costs_no_round_anything() -> None:
    """With follower 3 dead, the partition is no candidate: rounds write nothing and keep no
    wait for it; once 3 is back (an UpdateMetadata), it joins after the delay."""

    async def main() -> None:
        service, _model = await leader_of_t0(isr=(1, 2))
        state = service.state
        state.live_brokers = {b: common_pb2.LiveBroker(id=b) for b in (1, 2)}
        state.generation += 1
        for _ in range(5):
            assert await service.expand_caught_up_followers() == 0
            await asyncio.sleep(DELAY_S)
        assert not service._candidates and not service._first_seen
        state.live_brokers[3] = common_pb2.LiveBroker(id=3)
        state.generation += 1
        assert await service.expand_caught_up_followers() == 0
        assert service._candidates == {T0}
        await asyncio.sleep(DELAY_S)
        assert await service.expand_caught_up_followers() == 1
        assert state.roles[T0].isr == (1, 2, 3) and not service._candidates

    run_virtual(main())
