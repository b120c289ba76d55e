"""The gauges' incremental counts (core/tracked.py, broker_stub/state.py RoleTable) always equal
a full recount, through every kind of write, seeded random sequences included."""

from __future__ import annotations

import random

import pytest

from broker_stub.state import BrokerState, PartitionRole
from controller_svc.common.model import (
    LeaderIsrAndControllerEpoch,
    PartitionAndReplica,
    ReplicaAssignment,
    TopicPartition,
)
from controller_svc.controller.partition_state_machine import PartitionState
from controller_svc.core.context import ControllerContext
from controller_svc.core.tracked import CountedStates

TOPICS = ["a", "b", "c"]


def _state(leader: int) -> LeaderIsrAndControllerEpoch:
    return LeaderIsrAndControllerEpoch(leader, 1, (1, 2, 3), 0, 1)


def _recount_imbalance(ctx: ControllerContext) -> int:
    return sum(
        1
        for tp, s in ctx.partition_states.items()
        if tp.topic not in ctx.topics_to_be_deleted
        and (a := ctx.assignment(tp)) is not None
        and a.replicas
        and s.leader != a.replicas[0]
    )


def test_imbalance_counts_only_non_preferred_leaders_of_topics_not_being_deleted() -> None:
    ctx = ControllerContext()
    for p in range(4):
        ctx.set_assignment(TopicPartition("a", p), ReplicaAssignment((1, 2, 3)))
        ctx.partition_states[TopicPartition("a", p)] = _state(1 if p < 2 else 2)
    assert ctx.preferred_replica_imbalance_count() == 2
    ctx.partition_states[TopicPartition("a", 0)] = _state(3)
    assert ctx.preferred_replica_imbalance_count() == 3
    # A reassignment that makes the current leader preferred
    ctx.set_assignment(TopicPartition("a", 0), ReplicaAssignment((3, 1, 2)))
    assert ctx.preferred_replica_imbalance_count() == 2
    ctx.topics_to_be_deleted.add("a")
    assert ctx.preferred_replica_imbalance_count() == 0
    ctx.topics_to_be_deleted.discard("a")
    ctx.remove_topic("a")
    assert ctx.preferred_replica_imbalance_count() == 0


def test_imbalance_from_a_standbys_hand_over_then_recounted_where_written() -> None:
    ctx = ControllerContext()
    for topic in ("a", "b", "c"):
        for p in range(3):
            ctx.set_assignment(TopicPartition(topic, p), ReplicaAssignment((1, 2, 3)))
            ctx.partition_states[TopicPartition(topic, p)] = _state(2 if p == 0 else 1)
    # The standby counted a and b (b wrongly, to show its count is what is used); c it did not.
    ctx.hand_over_imbalance({"a": 1, "b": 3})
    assert ctx.preferred_replica_imbalance_count() == 1 + 3 + 1
    ctx.partition_states[TopicPartition("b", 1)] = _state(1)  # written: b is recounted
    assert ctx.preferred_replica_imbalance_count() == 1 + 1 + 1
    assert ctx.preferred_replica_imbalance_count() == _recount_imbalance(ctx)


def test_an_imbalance_recount_in_steps_leaves_the_topics_past_its_budget_for_the_next() -> None:
    ctx = ControllerContext()
    for topic in ("a", "b", "c"):
        for p in range(4):
            ctx.set_assignment(TopicPartition(topic, p), ReplicaAssignment((1, 2, 3)))
            ctx.partition_states[TopicPartition(topic, p)] = _state(2 if p < 2 else 1)
    # Whole topics: one of 4 partitions reaches a budget of 4, and one is counted past a budget of 3.
    assert ctx.recount_imbalance(budget=4) is False
    assert ctx.recount_imbalance(budget=3) is False
    assert ctx.recount_imbalance(budget=4) is True
    assert ctx.preferred_replica_imbalance_count() == 6 == _recount_imbalance(ctx)
    ctx.partition_states[TopicPartition("b", 0)] = _state(1)  # only b is due now
    assert ctx.recount_imbalance(budget=1) is True
    assert ctx.preferred_replica_imbalance_count() == 5


def test_a_context_built_from_plain_dicts_is_tracked() -> None:
    tp = TopicPartition("a", 0)
    ctx = ControllerContext(assignments={"a": {0: ReplicaAssignment((1, 2))}}, partition_states={tp: _state(2)})
    assert ctx.preferred_replica_imbalance_count() == 1
    ctx.partition_states = {tp: _state(1)}  # replaced wholesale: counted again from scratch
    assert ctx.preferred_replica_imbalance_count() == 0


@pytest.mark.parametrize("seed", range(5))
def test_imbalance_count_and_reassignments_equal_a_full_recount_after_random_writes(seed: int) -> None:
    rng = random.Random(seed)
    ctx = ControllerContext()

    def reassigning() -> set[TopicPartition]:
        pairs = [(t, p, a) for t, parts in ctx.assignments.items() for p, a in parts.items()]
        return {TopicPartition(t, p) for t, p, a in pairs if a.is_being_reassigned}

    for _ in range(400):
        topic = rng.choice(TOPICS)
        tp = TopicPartition(topic, rng.randrange(6))
        action = rng.randrange(10)
        if action == 0:
            replicas = tuple(rng.sample([1, 2, 3, 4], 3))
            adding = (5,) if rng.random() < 0.4 else ()
            ctx.set_assignment(tp, ReplicaAssignment(replicas + adding, adding, replicas[:1] if adding else ()))
        elif action == 1:
            ctx.partition_states[tp] = _state(rng.randrange(1, 5))
        elif action == 2:
            ctx.partition_states.pop(tp, None)
        elif action == 3:
            ctx.partition_states.update({tp: _state(rng.randrange(1, 5))})
        elif action == 4:
            ctx.assignments[topic] = {p: ReplicaAssignment(tuple(rng.sample([1, 2, 3, 4], 3))) for p in range(3)}
        elif action == 5:
            ctx.remove_topic(topic)
        elif action == 6:
            ctx.topics_to_be_deleted ^= {topic}
        elif action == 7 and rng.random() < 0.1:
            ctx.partition_states.clear()
        elif action == 8 and tp in ctx.partition_states:
            del ctx.partition_states[tp]
        elif action == 9:  # an election slice's bulk write
            ctx.set_partition_states(
                {TopicPartition(rng.choice(TOPICS), p): _state(rng.randrange(1, 5)) for p in range(rng.randrange(4))}
            )
        if rng.random() < 0.3:
            assert ctx.preferred_replica_imbalance_count() == _recount_imbalance(ctx)
        elif rng.random() < 0.3:
            # In steps of a partition or a few (whole topics each), as an operation counts.
            steps = 1
            while not ctx.recount_imbalance(budget=rng.randrange(1, 4)):
                steps += 1
            assert steps <= len(TOPICS)
            assert ctx.preferred_replica_imbalance_count() == _recount_imbalance(ctx)
        if rng.random() < 0.3:
            assert ctx.partitions_being_reassigned == reassigning()
        if rng.random() < 0.3:
            _assert_on_brokers_equal_a_scan(ctx, set(rng.sample([1, 2, 3, 4, 5, 6], rng.randrange(1, 4))))
    assert ctx.preferred_replica_imbalance_count() == _recount_imbalance(ctx)
    assert ctx.partitions_being_reassigned == reassigning()
    _assert_on_brokers_equal_a_scan(ctx, {1, 5})


def _assert_on_brokers_equal_a_scan(ctx: ControllerContext, brokers: set[int]) -> None:
    pairs = [(t, p, a) for t, parts in ctx.assignments.items() for p, a in parts.items()]
    assert ctx.partitions_on_brokers(brokers) == {
        TopicPartition(t, p) for t, p, a in pairs if brokers.intersection(a.replicas)
    }
    assert ctx.replicas_on_brokers(brokers) == {
        PartitionAndReplica(TopicPartition(t, p), r) for t, p, a in pairs for r in a.replicas if r in brokers
    }
    some_topics = set(TOPICS[:2]) | {"never-created"}
    assert ctx.replicas_on_brokers(brokers, some_topics) == {
        PartitionAndReplica(TopicPartition(t, p), r)
        for t, p, a in pairs
        for r in a.replicas
        if r in brokers and t in some_topics
    }
    assert ctx.topics_on_brokers(brokers) == {t for t, p, a in pairs if brokers.intersection(a.replicas)}
    for broker_id in brokers:
        assert ctx.partitions_on_broker_by_topic(broker_id) == sorted(
            (t, sorted(p for p, a in parts.items() if broker_id in a.replicas))
            for t, parts in ctx.assignments.items()
            if any(broker_id in a.replicas for a in parts.values())
        )


@pytest.mark.parametrize("seed", range(5))
def test_counted_states_equal_a_recount_after_random_writes(seed: int) -> None:
    rng = random.Random(seed)
    states: CountedStates[PartitionState] = CountedStates(PartitionState.OFFLINE)
    choices = [PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE]
    for _ in range(500):
        tp = TopicPartition(rng.choice(TOPICS), rng.randrange(5))
        action = rng.randrange(7)
        if action <= 1:
            states[tp] = rng.choice(choices)
        elif action == 2:
            states.pop(tp, None)
        elif action == 3:
            states.update({tp: rng.choice(choices)})
        elif action == 4 and tp in states:
            del states[tp]
        elif action == 5 and rng.random() < 0.05:
            states.clear()
        elif action == 6:  # an election slice's bulk write
            states.set_many({TopicPartition(rng.choice(TOPICS), p) for p in range(3)}, rng.choice(choices))
        recount: dict[str, int] = {}
        for key, value in states.items():
            if value is PartitionState.OFFLINE:
                recount[key.topic] = recount.get(key.topic, 0) + 1
        assert states.per_topic == recount


def test_counted_states_pop_of_a_missing_key_raises_without_a_default() -> None:
    states: CountedStates[PartitionState] = CountedStates(PartitionState.OFFLINE)
    with pytest.raises(KeyError):
        states.pop(TopicPartition("a", 0))
    assert states.pop(TopicPartition("a", 0), None) is None


def _role(role: str, leader: int, isr: tuple[int, ...], replicas: tuple[int, ...] = (1, 2, 3)) -> PartitionRole:
    return PartitionRole(role, leader, 1, isr, replicas, 1)


@pytest.mark.parametrize("seed", range(12))
def test_role_table_counts_equal_a_recount_after_random_writes(seed: int) -> None:
    rng = random.Random(seed)
    state = BrokerState(broker_id=1)
    for _ in range(500):
        tp = TopicPartition(rng.choice(TOPICS), rng.randrange(5))
        action = rng.randrange(6)
        if action <= 1:
            state.roles[tp] = _role(
                rng.choice(["leader", "follower", "stopped"]),
                rng.choice([1, 2]),
                tuple(rng.sample([1, 2, 3], rng.randrange(1, 4))),
            )._replace(leader_epoch=rng.randrange(5))
        elif action == 2:
            state.roles.pop(tp, None)
        elif action == 3 and tp in state.roles:
            del state.roles[tp]
        elif action == 4 and rng.random() < 0.05:
            state.roles.clear()
        elif action == 5:  # a LeaderAndIsr slice's bulk write
            state.roles.set_many(
                {
                    TopicPartition(rng.choice(TOPICS), p): _role(
                        rng.choice(["leader", "follower", "stopped"]),
                        rng.choice([1, 2]),
                        tuple(rng.sample([1, 2, 3], rng.randrange(1, 4))),
                    )._replace(leader_epoch=rng.randrange(5))
                    for p in range(rng.randrange(4))
                }
            )
        roles = state.roles.values()
        assert state.hosted_and_led() == (
            sum(1 for r in roles if r.role != "stopped"),
            sum(1 for r in roles if r.role == "leader" and r.leader == 1),
        )
        assert state.under_replicated_led() == {
            tp for tp, r in state.roles.items() if r.role == "leader" and len(r.isr) < len(r.replicas)
        }
        epochs: dict[str, dict[int, int]] = {}
        for tp, r in state.roles.items():
            if r.role in ("leader", "follower"):
                epochs.setdefault(tp.topic, {})[tp.partition] = r.leader_epoch
        assert state.role_epochs_by_topic() == epochs
        out_of_isr: dict[int, set[TopicPartition]] = {}
        for tp, r in state.roles.items():
            if r.role == "leader" and len(r.isr) < len(r.replicas):
                for replica in r.replicas:
                    if replica not in r.isr:
                        out_of_isr.setdefault(replica, set()).add(tp)
        assert state.roles.out_of_isr == out_of_isr


def test_under_replicated_led_leaves_out_partitions_on_a_failed_log_dir() -> None:
    state = BrokerState(broker_id=1, log_dirs=("d0", "d1"))
    tps = [TopicPartition("a", p) for p in range(8)]
    for tp in tps:
        state.roles[tp] = _role("leader", 1, (1,))
    state.offline_log_dirs.add("d0")
    assert state.under_replicated_led() == {tp for tp in tps if state.log_dir_of(tp) == "d1"}


def test_the_collector_freezes_only_after_a_bulk_load() -> None:
    import gc

    from controller_svc.common import gc_policy

    gc.unfreeze()
    try:
        assert not gc_policy.freeze_after_bulk_load("a small request", gc_policy.BULK_THRESHOLD - 1)
        assert gc.get_freeze_count() == 0
        gauge_before = gc_policy.FROZEN_OBJECTS._value.get()
        gc.disable()  # as during a step: no collection between the bulk and its freeze
        bulk = [[n] for n in range(3 * gc_policy.BULK_THRESHOLD)]
        assert gc_policy.freeze_after_bulk_load("a bulk load", len(bulk))
        after = gc.get_freeze_count()
        # The gauge grew by about what the freeze moved: the objects the bulk made at least,
        # and no more than the young generations held (the older ones' are not counted).
        moved = gc_policy.FROZEN_OBJECTS._value.get() - gauge_before
        assert 0.99 * len(bulk) <= moved <= after
    finally:
        gc.enable()
        gc.unfreeze()


@pytest.mark.parametrize("seed", range(4))
def test_sorting_by_topic_gives_sorteds_order(seed: int) -> None:
    from controller_svc.common.model import PartitionAndReplica, sorted_partitions, sorted_replicas

    rng = random.Random(seed)
    tps = [TopicPartition(rng.choice(["a", "b", "ab", "b-1", ""]), rng.randrange(50)) for _ in range(300)]
    assert sorted_partitions(tps) == sorted(tps)
    assert sorted_partitions(iter(set(tps))) == sorted(set(tps))
    replicas = [PartitionAndReplica(tp, rng.randrange(5)) for tp in tps]
    assert sorted_replicas(replicas) == sorted(replicas)
    assert sorted_partitions([]) == [] and sorted_replicas([]) == []


async def test_describe_broker_counts_only_leaves_out_the_lists_and_keeps_the_counts() -> None:
    from broker_stub.server import BrokerControlService
    from controller_svc.common.state_change_log import StateChangeLog
    from kcontroller.v1 import broker_pb2, common_pb2

    state = BrokerState(broker_id=1, broker_epoch=7, registered=True)
    for p in range(4):
        tp = TopicPartition("a", p)
        state.roles[tp] = _role("leader" if p < 3 else "follower", 1 if p < 3 else 2, (1, 2, 3))
        state.metadata[tp] = common_pb2.PartitionState(topic="a", partition=p, leader=1)
    state.roles[TopicPartition("a", 9)] = _role("stopped", 1, (1, 2, 3))
    service = BrokerControlService(state, StateChangeLog(None, "test"))
    full = await service.DescribeBroker(broker_pb2.DescribeBrokerRequest(), None)  # type: ignore[arg-type]
    counts = await service.DescribeBroker(broker_pb2.DescribeBrokerRequest(counts_only=True), None)  # type: ignore[arg-type]
    assert len(full.roles) == 5 and len(full.metadata_partitions) == 4
    assert not counts.roles and not counts.metadata_partitions
    for answer in (full, counts):
        assert (answer.role_count, answer.leader_count, answer.metadata_partition_count) == (4, 3, 4)
        assert answer.broker_epoch == 7 and answer.registered


def test_no_collection_during_a_step_then_its_bulk_is_frozen() -> None:
    import gc

    from controller_svc.common import gc_policy

    gc.unfreeze()
    try:
        with gc_policy.no_collection_during("a small step"):
            assert not gc.isenabled()
            kept = [[i] for i in range(10)]
        assert gc.isenabled() and gc.get_freeze_count() == 0
        with gc_policy.no_collection_during("a bulk step"):
            with gc_policy.no_collection_during("a step inside it"):
                pass
            assert not gc.isenabled()  # the inner step leaves the switch to the outer one
            kept = [[i] for i in range(gc_policy.BULK_THRESHOLD * 2)]
        assert gc.isenabled() and gc.get_freeze_count() >= len(kept)
    finally:
        gc.unfreeze()
        gc.enable()
