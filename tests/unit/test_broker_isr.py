from __future__ import annotations

from broker_stub.isr import caught_up_followers, proposed_isr
from broker_stub.state import BrokerState, PartitionRole
from controller_svc.common.model import TopicPartition
from kcontroller.v1 import common_pb2

T0 = TopicPartition("t", 0)


def leader_state(isr: tuple[int, ...], live: tuple[int, ...]) -> BrokerState:
    state = BrokerState(broker_id=1, log_dirs=("d0",))
    state.roles[T0] = PartitionRole("leader", 1, 3, isr, (1, 2, 3), 1, 4)
    state.live_brokers = {b: common_pb2.LiveBroker(id=b) for b in live}
    return state


def test_proposed_isr() -> None:
    role = PartitionRole("leader", 1, 3, (1, 2, 3), (1, 2, 3), 1, 4)
    assert proposed_isr(role, 1, 3, lagging=True) == (1, 2)
    assert proposed_isr(role, 1, 1, lagging=True) == (1, 2, 3)  # never removes the leader
    shrunk = PartitionRole("leader", 1, 3, (1, 2), (1, 2, 3), 1, 4)
    assert proposed_isr(shrunk, 1, 3, lagging=False) == (1, 2, 3)


def test_a_live_follower_rejoins_after_the_catch_up_delay() -> None:
    state = leader_state(isr=(1,), live=(1, 2))  # 3 is not live
    first_seen: dict[tuple[TopicPartition, int], float] = {}
    assert caught_up_followers(state, first_seen, now=10.0, delay_s=1.0) == {}
    assert caught_up_followers(state, first_seen, now=10.5, delay_s=1.0) == {}
    assert caught_up_followers(state, first_seen, now=11.0, delay_s=1.0) == {T0: (1, 2)}


def test_lagging_dead_and_offline_dir_replicas_do_not_rejoin() -> None:
    state = leader_state(isr=(1,), live=(1, 2, 3))
    state.lagging.add((T0, 2))
    first_seen: dict[tuple[TopicPartition, int], float] = {}
    caught_up_followers(state, first_seen, now=0.0, delay_s=1.0)
    assert caught_up_followers(state, first_seen, now=5.0, delay_s=1.0) == {T0: (1, 3)}
    # A follower that dies restarts its catch-up clock when it comes back.
    state.live_brokers.pop(3)
    assert caught_up_followers(state, first_seen, now=6.0, delay_s=1.0) == {}
    assert (T0, 3) not in first_seen
    state.offline_log_dirs.add("d0")
    state.live_brokers[3] = common_pb2.LiveBroker(id=3)
    assert caught_up_followers(state, first_seen, now=100.0, delay_s=1.0) == {}


def test_a_follower_no_longer_registered_does_not_rejoin_though_our_metadata_says_live() -> None:
    """A new leader applies its LeaderAndIsr before the UpdateMetadata that drops a dead broker
    from its live brokers; in between the dead follower looked caught up (at 1M partitions the
    leaders then wrote hundreds of thousands of ISR expansions naming a dead broker)."""
    from broker_stub.isr import registered_only

    state = leader_state(isr=(1,), live=(1, 2, 3))  # 3 died; the UpdateMetadata has not come
    first_seen: dict[tuple[TopicPartition, int], float] = {}
    caught_up_followers(state, first_seen, now=0.0, delay_s=1.0)
    due = caught_up_followers(state, first_seen, now=5.0, delay_s=1.0)
    assert due == {T0: (1, 2, 3)}
    assert registered_only(state, due, {1, 2}, first_seen) == {T0: (1, 2)}
    assert (T0, 3) not in first_seen and (T0, 2) in first_seen  # 3's wait starts again
    assert registered_only(state, {T0: (1, 3)}, {1, 2}, first_seen) == {}  # nothing left to add
    assert registered_only(state, due, {1, 2, 3}, first_seen) == due
