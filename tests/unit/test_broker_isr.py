from __future__ import annotations

import random

import pytest

from broker_stub.isr import caught_up_followers, expansion_candidates, proposed_isr, waits_for_a_follower
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


def _random_broker_state(rng: random.Random, partitions: int) -> BrokerState:
    state = BrokerState(broker_id=1, log_dirs=("d0", "d1"))
    for p in range(partitions):
        replicas = tuple(rng.sample(range(1, 7), rng.randint(1, 4)))
        isr = tuple(r for r in replicas if rng.random() < 0.6) or replicas[:1]
        kind = rng.choice(["leader", "leader", "leader", "follower", "stopped"])
        leader = 1 if kind == "leader" else rng.choice(replicas)
        state.roles[TopicPartition(f"t{p % 7}", p)] = PartitionRole(kind, leader, 3, isr, replicas, 1, 4)
    state.live_brokers = {b: common_pb2.LiveBroker(id=b) for b in range(1, 7) if rng.random() < 0.7}
    return state


def _mutate(rng: random.Random, state: BrokerState) -> None:
    """Roles rewritten (one at a time and in bulk) and removed, followers dying and coming
    back, lagging marks, a log dir failing: every change the broker makes between rounds."""
    tps = list(state.roles)
    bulk = {}
    for tp in rng.sample(tps, len(tps) // 5):
        role = state.roles[tp]
        isr = tuple(r for r in role.replicas if r in role.isr or rng.random() < 0.3) or role.replicas[:1]
        bulk[tp] = role._replace(isr=isr, role=rng.choice(["leader", "leader", "follower"]))
    state.roles.set_many(bulk)
    for tp in rng.sample(tps, 3):
        role = state.roles[tp]
        state.roles[tp] = role._replace(isr=role.replicas[:1], role="leader")
    for tp in rng.sample(tps, 2):
        del state.roles[tp]
    for b in range(2, 7):
        if rng.random() < 0.2:
            state.live_brokers.pop(b, None)
        elif rng.random() < 0.2:
            state.live_brokers[b] = common_pb2.LiveBroker(id=b)
    for tp in rng.sample(list(state.roles), 3):
        state.lagging.add((tp, rng.choice(state.roles[tp].replicas)))
    if rng.random() < 0.1:
        state.offline_log_dirs.add("d1")


@pytest.mark.parametrize("seed", range(12))
def test_expansion_candidates_are_exactly_the_partitions_with_a_waiting_follower(seed: int) -> None:
    """The maintenance round looks only at the candidates; they are what a scan of every role
    finds, and with them the rounds decide what rounds over every under-replicated partition
    decide, round after round, while roles, live brokers, lagging marks and log dirs change."""
    rng = random.Random(seed)
    state = _random_broker_state(rng, 400)
    seen_with_candidates: dict[tuple[TopicPartition, int], float] = {}
    seen_with_scan: dict[tuple[TopicPartition, int], float] = {}
    kept_lagging = False
    for round_ in range(12):
        index: dict[int, set[TopicPartition]] = {}
        for tp, role in state.roles.items():
            if role.role == "leader":
                for r in role.replicas:
                    if r not in role.isr:
                        index.setdefault(r, set()).add(tp)
        assert state.roles.out_of_isr == index
        candidates = expansion_candidates(state)
        assert candidates == {tp for tp in state.roles if waits_for_a_follower(state, tp)}
        kept_lagging = kept_lagging or any(
            tp in state.roles and tp in state.roles.out_of_isr.get(r, ()) for tp, r in state.lagging
        )
        now = round_ * 0.4
        due = caught_up_followers(state, seen_with_candidates, now, 1.0, candidates)
        assert due == caught_up_followers(state, seen_with_scan, now, 1.0)
        assert seen_with_candidates == seen_with_scan
        _mutate(rng, state)
    assert kept_lagging  # the lagging filter was exercised, not only the index


def test_a_dead_follower_leaves_nothing_to_look_at() -> None:
    """A broker that died followed 10k of our partitions: none is a candidate (each round
    looked at all of them before), and all are again once it is back."""
    state = BrokerState(broker_id=1)
    roles = {
        TopicPartition(f"t{p // 100}", p % 100): PartitionRole("leader", 1, 3, (1, 2), (1, 2, 4), 1, 4)
        for p in range(10_000)
    }
    state.roles.set_many(roles)
    state.live_brokers = {b: common_pb2.LiveBroker(id=b) for b in (1, 2, 3, 5)}
    assert len(state.under_replicated_led()) == 10_000
    assert expansion_candidates(state) == set()
    state.live_brokers[4] = common_pb2.LiveBroker(id=4)
    assert expansion_candidates(state) == set(roles)
    state.roles.set_many({tp: role._replace(isr=(1, 2, 4)) for tp, role in roles.items()})
    assert expansion_candidates(state) == set() and not state.roles.out_of_isr
