from __future__ import annotations

import itertools
from typing import Any

import pytest

from controller_svc.common.errors import ControllerMovedError, ZkUnavailableError
from controller_svc.common.model import NO_LEADER, LeaderIsrAndControllerEpoch, PartitionAndReplica, TopicPartition
from controller_svc.controller.partition_state_machine import VALID_PREVIOUS_STATES as PARTITION_TABLE
from controller_svc.controller.partition_state_machine import PartitionState, PartitionStateMachine
from controller_svc.controller.replica_state_machine import VALID_PREVIOUS_STATES as REPLICA_TABLE
from controller_svc.controller.replica_state_machine import ReplicaState, ReplicaStateMachine
from controller_svc.core.election import ElectionStrategy
from controller_svc.core.request_batch import RequestBatch
from tests.unit.fakes import FakePartitionStore, RecordingSink, context, null_log

T0 = TopicPartition("t", 0)


def machines(live=(1, 2, 3), assignment=None, unclean=False):  # type: ignore[no-untyped-def]
    ctx = context(live, {"t": assignment or {0: [1, 2, 3]}})
    store = FakePartitionStore()
    batch = RequestBatch(9, ctx)
    psm = PartitionStateMachine(ctx, store, batch, null_log(), 9, lambda: unclean)
    rsm = ReplicaStateMachine(ctx, store, batch, null_log(), 9)
    return ctx, store, batch, psm, rsm


async def bring_online(ctx, store, batch, psm, rsm) -> None:  # type: ignore[no-untyped-def]
    batch.new_batch()
    replicas = ctx.all_replicas(ctx.all_partitions())
    await psm.handle_state_changes(ctx.all_partitions(), PartitionState.NEW)
    await rsm.handle_state_changes(replicas, ReplicaState.NEW)
    await psm.handle_state_changes(ctx.all_partitions(), PartitionState.ONLINE)
    await rsm.handle_state_changes(replicas, ReplicaState.ONLINE)
    batch.send(RecordingSink())


def test_partition_table_matches_the_reference() -> None:
    S = PartitionState
    assert {
        S.NEW: {S.NON_EXISTENT},
        S.ONLINE: {S.NEW, S.ONLINE, S.OFFLINE},
        S.OFFLINE: {S.NEW, S.ONLINE, S.OFFLINE},
        S.NON_EXISTENT: {S.OFFLINE},
    } == PARTITION_TABLE


def test_replica_table_matches_the_reference() -> None:
    R = ReplicaState
    assert {
        R.NEW: {R.NON_EXISTENT},
        R.ONLINE: {R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE},
        R.OFFLINE: {R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE},
        R.DELETION_STARTED: {R.OFFLINE},
        R.DELETION_SUCCESSFUL: {R.DELETION_STARTED},
        R.DELETION_INELIGIBLE: {R.OFFLINE, R.DELETION_STARTED},
        R.NON_EXISTENT: {R.DELETION_SUCCESSFUL},
    } == REPLICA_TABLE


@pytest.mark.parametrize(("current", "target"), list(itertools.product(PartitionState, PartitionState)))
async def test_every_partition_transition_is_applied_or_refused_per_the_table(
    current: PartitionState, target: PartitionState
) -> None:
    ctx, store, batch, psm, _ = machines()
    if current is not PartitionState.NON_EXISTENT:
        psm.states[T0] = current
    if current in (PartitionState.ONLINE, PartitionState.OFFLINE):
        store.znodes[T0] = LeaderIsrAndControllerEpoch(1, 0, (1, 2, 3), 0, 3)
        ctx.partition_states[T0] = store.znodes[T0]
    batch.new_batch()
    result = await psm.handle_state_changes([T0], target, ElectionStrategy.OFFLINE)
    batch.clear()
    if current in PARTITION_TABLE[target]:
        assert not result.invalid
        assert psm.state(T0) is target
    else:
        assert result.invalid == {T0}
        assert psm.state(T0) is current  # refused: nothing changed
        assert store.writes == 0


@pytest.mark.parametrize(("current", "target"), list(itertools.product(ReplicaState, ReplicaState)))
async def test_every_replica_transition_is_applied_or_refused_per_the_table(
    current: ReplicaState, target: ReplicaState
) -> None:
    ctx, store, batch, _, rsm = machines()
    replica = PartitionAndReplica(T0, 2)
    if current is not ReplicaState.NON_EXISTENT:
        rsm.states[replica] = current
    store.znodes[T0] = LeaderIsrAndControllerEpoch(1, 0, (1, 2, 3), 0, 3)
    ctx.partition_states[T0] = store.znodes[T0]
    batch.new_batch()
    result = await rsm.handle_state_changes([replica], target)
    batch.clear()
    if current in REPLICA_TABLE[target]:
        assert not result.invalid
        assert rsm.state(replica) is target
    else:
        assert result.invalid == {replica}
        assert rsm.state(replica) is current
        assert store.writes == 0


async def test_new_partition_goes_online_with_first_live_replica_and_sends_is_new() -> None:
    ctx, store, batch, psm, rsm = machines(live=(2, 3))
    await bring_online(ctx, store, batch, psm, rsm)
    assert store.znodes[T0] == LeaderIsrAndControllerEpoch(2, 0, (2, 3), 0, 3)
    assert psm.state(T0) is PartitionState.ONLINE


async def test_new_partition_without_live_replicas_stays_new() -> None:
    ctx, store, batch, psm, rsm = machines(live=(4,))
    await bring_online(ctx, store, batch, psm, rsm)
    assert T0 not in store.znodes and psm.state(T0) is PartitionState.NEW
    assert psm.offline_partition_count() == 0


async def test_offline_election_after_leader_failure_and_retry_on_conflict() -> None:
    ctx, store, batch, psm, rsm = machines()
    await bring_online(ctx, store, batch, psm, rsm)
    del ctx.live_brokers[1]
    store.bump(T0, (1, 3))  # a broker shrank the ISR behind the controller's back
    batch.new_batch()
    await psm.handle_state_changes([T0], PartitionState.OFFLINE)
    result = await psm.handle_state_changes([T0], PartitionState.ONLINE, ElectionStrategy.OFFLINE)
    batch.clear()
    assert result.succeeded_all
    # The first write hit a BadVersion; the re-read ISR (1, 3) decided: leader 3, not 2.
    assert store.znodes[T0].leader == 3 and store.znodes[T0].isr == (3,)
    assert store.znodes[T0].leader_epoch == 1


async def test_a_newer_controller_epoch_in_zookeeper_means_controller_moved() -> None:
    ctx, store, batch, psm, rsm = machines()
    await bring_online(ctx, store, batch, psm, rsm)
    store.znodes[T0] = LeaderIsrAndControllerEpoch(1, 4, (1, 2, 3), 5, ctx.epoch + 1)
    batch.new_batch()
    with pytest.raises(ControllerMovedError):
        await psm.handle_state_changes([T0], PartitionState.ONLINE, ElectionStrategy.PREFERRED)


async def test_no_eligible_leader_keeps_the_partition_offline_and_counted() -> None:
    ctx, store, batch, psm, rsm = machines(assignment={0: [1, 2]})
    await bring_online(ctx, store, batch, psm, rsm)
    ctx.live_brokers.clear()
    batch.new_batch()
    await psm.handle_state_changes([T0], PartitionState.OFFLINE)
    result = await psm.handle_state_changes([T0], PartitionState.ONLINE, ElectionStrategy.OFFLINE)
    assert T0 in result.failed and psm.state(T0) is PartitionState.OFFLINE
    assert psm.offline_partition_count() == 1


async def test_offline_replica_leaves_isr_and_leader_becomes_minus_one_when_it_led() -> None:
    ctx, store, batch, psm, rsm = machines(assignment={0: [1, 2], 1: [2, 1]})
    await bring_online(ctx, store, batch, psm, rsm)
    batch.new_batch()
    await rsm.handle_state_changes(
        [PartitionAndReplica(T0, 1), PartitionAndReplica(TopicPartition("t", 1), 1)], ReplicaState.OFFLINE
    )
    batch.clear()
    assert store.znodes[T0] == LeaderIsrAndControllerEpoch(NO_LEADER, 1, (2,), 1, 3)
    assert store.znodes[TopicPartition("t", 1)] == LeaderIsrAndControllerEpoch(2, 1, (2,), 1, 3)


async def test_offline_replica_keeps_a_one_member_isr() -> None:
    ctx, store, batch, psm, rsm = machines(assignment={0: [1]})
    await bring_online(ctx, store, batch, psm, rsm)
    batch.new_batch()
    await rsm.handle_state_changes([PartitionAndReplica(T0, 1)], ReplicaState.OFFLINE)
    assert store.znodes[T0].leader == NO_LEADER and store.znodes[T0].isr == (1,)
    assert next(iter(batch.stop_replica[1].values())).delete is False


async def test_unclean_election_is_counted() -> None:
    ctx, store, batch, psm, rsm = machines(assignment={0: [1, 2]}, unclean=True)
    await bring_online(ctx, store, batch, psm, rsm)
    store.bump(T0, (1,))
    ctx.partition_states[T0] = store.znodes[T0]
    del ctx.live_brokers[1]
    batch.new_batch()
    await psm.handle_state_changes([T0], PartitionState.OFFLINE)
    await psm.handle_state_changes([T0], PartitionState.ONLINE, ElectionStrategy.OFFLINE)
    assert store.znodes[T0].leader == 2 and psm.unclean_elections == 1


async def test_deletion_replica_states_send_stop_replica_with_delete_and_shrink_assignment() -> None:
    ctx, store, batch, psm, rsm = machines(assignment={0: [1, 2]})
    await bring_online(ctx, store, batch, psm, rsm)
    replica = PartitionAndReplica(T0, 2)
    ctx.topics_to_be_deleted.add("t")
    batch.new_batch()
    await rsm.handle_state_changes([replica], ReplicaState.OFFLINE)
    await rsm.handle_state_changes([replica], ReplicaState.DELETION_STARTED)
    stop = batch.stop_replica[2][T0]
    assert stop.delete is True and stop.leader_epoch == -2
    await rsm.handle_state_changes([replica], ReplicaState.DELETION_SUCCESSFUL)
    await rsm.handle_state_changes([replica], ReplicaState.NON_EXISTENT)
    assert ctx.replicas(T0) == (1,) and rsm.state(replica) is ReplicaState.NON_EXISTENT


async def test_writes_committed_before_zookeeper_fails_part_way_still_send_their_requests() -> None:
    """A large write is several multis; when a later one gets no answer, the partitions of
    the earlier ones are committed in ZooKeeper: their LeaderAndIsr must still go out (the
    operation sends its batch when it fails), or brokers never learn a leader ZooKeeper names."""
    t1 = TopicPartition("t", 1)
    ctx, store, batch, psm, rsm = machines(assignment={0: [1, 2], 1: [1, 3]})
    await bring_online(ctx, store, batch, psm, rsm)
    # Offline replica: broker 1 leaves both ISRs; ZooKeeper fails after the first write.
    store.unavailable_after = store.writes + 1
    batch.new_batch()
    with pytest.raises(ZkUnavailableError):
        await rsm.handle_state_changes([PartitionAndReplica(T0, 1), PartitionAndReplica(t1, 1)], ReplicaState.OFFLINE)
    sink = RecordingSink()
    batch.send(sink)
    sent = {(b, p.partition) for b, api, r in sink.sent if api == "LeaderAndIsr" for p in r.partition_states}
    assert store.znodes[T0].leader == NO_LEADER and store.znodes[t1].leader == 1  # only T0 was written
    assert (2, 0) in sent and not any(p == 1 for _, p in sent)
    # Offline election of both: the first is written, the second is not; the first's request goes out.
    ctx.live_brokers.pop(1)
    store.unavailable_after = store.writes + 1
    batch.new_batch()
    await psm.handle_state_changes([T0, t1], PartitionState.OFFLINE)
    with pytest.raises(ZkUnavailableError):
        await psm.handle_state_changes([T0, t1], PartitionState.ONLINE, ElectionStrategy.OFFLINE)
    sink = RecordingSink()
    batch.send(sink)
    leaders = {p.partition: p.leader for _, api, r in sink.sent if api == "LeaderAndIsr" for p in r.partition_states}
    assert store.znodes[T0].leader == 2 and store.znodes[t1].leader == 1  # T0 written, t1 not
    assert leaders == {0: 2}


@pytest.mark.parametrize("fail_after", [None, 3])
async def test_offline_replicas_in_slices_as_in_one_pass(
    monkeypatch: pytest.MonkeyPatch, fail_after: int | None
) -> None:
    """A broker's replicas leave their ISRs in slices (OFFLINE_SLICE, here 2 of 5 partitions),
    with the same outcome as one pass: every ISR written, each other replica told, every
    replica Offline; when ZooKeeper fails part-way, the committed writes' requests are in the
    batch, every replica is still Offline, and the rest is not tried."""
    from controller_svc.controller import replica_state_machine

    monkeypatch.setattr(replica_state_machine, "OFFLINE_SLICE", 2)
    assignment = {p: [1, 2] for p in range(5)}
    ctx, store, batch, psm, rsm = machines(assignment=assignment)
    await bring_online(ctx, store, batch, psm, rsm)
    replicas = [PartitionAndReplica(TopicPartition("t", p), 1) for p in range(5)]
    reads: list[int] = []
    read = store.read

    async def counted_read(partitions: Any) -> Any:
        reads.append(len(partitions))
        return await read(partitions)

    monkeypatch.setattr(store, "read", counted_read)
    batch.new_batch()
    if fail_after is None:
        await rsm.handle_state_changes(replicas, ReplicaState.OFFLINE)
    else:
        store.unavailable_after = store.writes + fail_after
        with pytest.raises(ZkUnavailableError):
            await rsm.handle_state_changes(replicas, ReplicaState.OFFLINE)
    told = set(batch.leader_and_isr.get(2, {}))
    stopped = set(batch.stop_replica.get(1, {}))
    batch.clear()
    assert stopped == {r.tp for r in replicas}  # every replica of the broker, as Kafka sends before its ISR writes
    written = {tp for tp in store.znodes if 1 not in store.znodes[tp].isr}
    assert written == ({r.tp for r in replicas} if fail_after is None else {r.tp for r in replicas[:fail_after]})
    assert told == written
    assert all(rsm.state(r) is ReplicaState.OFFLINE for r in replicas)
    assert reads == []  # every cached ISR holds the replica: written from the cache


async def test_unclean_permission_is_read_from_zookeeper_at_the_election_not_from_the_cache() -> None:
    """Kafka reads the topic config at each offline election of a partition with no live ISR
    member; the cache follows config-change notifications and can be behind."""
    ctx, store, batch, psm, rsm = machines(assignment={0: [1, 2]})
    await bring_online(ctx, store, batch, psm, rsm)
    store.bump(T0, (1,))  # only broker 1 in the ISR
    ctx.partition_states[T0] = store.znodes[T0]
    del ctx.live_brokers[1]
    # ZooKeeper allows unclean elections for t; the cache has not heard of it.
    store.topic_configs["t"] = {"unclean.leader.election.enable": "true"}
    batch.new_batch()
    await psm.handle_state_changes([T0], PartitionState.OFFLINE)
    result = await psm.handle_state_changes([T0], PartitionState.ONLINE, ElectionStrategy.OFFLINE)
    batch.clear()
    assert result.succeeded_all and store.znodes[T0].leader == 2 and psm.unclean_elections == 1
    # The other way round: the cache says yes, ZooKeeper no longer does.
    ctx2, store2, batch2, psm2, rsm2 = machines(assignment={0: [1, 2]})
    await bring_online(ctx2, store2, batch2, psm2, rsm2)
    store2.bump(T0, (1,))
    ctx2.partition_states[T0] = store2.znodes[T0]
    del ctx2.live_brokers[1]
    ctx2.topic_configs["t"] = {"unclean.leader.election.enable": "true"}
    batch2.new_batch()
    await psm2.handle_state_changes([T0], PartitionState.OFFLINE)
    await psm2.handle_state_changes([T0], PartitionState.ONLINE, ElectionStrategy.OFFLINE)
    batch2.clear()
    assert store2.znodes[T0].leader != 2 and psm2.unclean_elections == 0
    # A partition with a live ISR member is elected cleanly, with no config read at all.
    ctx3, store3, batch3, psm3, rsm3 = machines(assignment={0: [1, 2]})
    await bring_online(ctx3, store3, batch3, psm3, rsm3)
    del ctx3.live_brokers[1]
    batch3.new_batch()
    await psm3.handle_state_changes([T0], PartitionState.OFFLINE)
    await psm3.handle_state_changes([T0], PartitionState.ONLINE, ElectionStrategy.OFFLINE)
    batch3.clear()
    assert store3.znodes[T0].leader == 2 and store3.config_reads == 0


@pytest.mark.parametrize("case", ["fresh", "replaced_dict", "dead_broker"])
async def test_replica_start_up_with_a_standbys_keys_equals_the_start_up_without(case: str) -> None:
    """The warm standby's replica keys (ControllerContext.replica_keys_hint) only save the loop:
    the states are the same, in the same order; a hint made from another per-topic dict (here
    with other replicas), or for a topic with a replica on a dead broker, is not used; the hint
    is dropped after one use."""
    from controller_svc.common.model import ReplicaAssignment
    from controller_svc.core.context import topic_replica_keys

    ctx = context((1, 2, 3, 4), {"t": {0: [1, 2, 3], 1: [2, 3, 4]}, "u": {0: [3, 1]}})
    rsm = ReplicaStateMachine(ctx, FakePartitionStore(), RequestBatch(9, ctx), null_log(), 9)
    hint = {t: topic_replica_keys(t, parts) for t, parts in ctx.assignments.items()}
    if case == "replaced_dict":
        ctx.assignments["t"] = {0: ReplicaAssignment((4, 1)), 1: ReplicaAssignment((2, 3, 4))}
    if case == "dead_broker":
        del ctx.live_brokers[4]
    await rsm.initialize()
    expected = list(rsm.states.items())
    ctx.replica_keys_hint = dict(hint)
    await rsm.initialize()
    assert list(rsm.states.items()) == expected
    assert ctx.replica_keys_hint == {}
    # With the states the standby built (every hinted replica Online, a topic since deleted
    # among them): adopted and corrected, the same states (in another order).
    gone = topic_replica_keys("gone", {0: ReplicaAssignment((1, 2))})
    ctx.replica_keys_hint = {**hint, "gone": gone}
    ready = dict.fromkeys([k for made in ctx.replica_keys_hint.values() for k in made.keys], ReplicaState.ONLINE)
    ctx.replica_states_hint = (ready, frozenset(ctx.replica_keys_hint))
    await rsm.initialize()
    assert rsm.states is ready and dict(rsm.states) == dict(expected)
    assert ctx.replica_states_hint is None
    if case == "dead_broker":
        assert rsm.states[PartitionAndReplica(TopicPartition("t", 1), 4)] is ReplicaState.DELETION_INELIGIBLE
    if case == "replaced_dict":
        assert PartitionAndReplica(TopicPartition("t", 0), 4) in rsm.states


@pytest.mark.parametrize("case", ["fresh", "replaced_dict", "dead_leader", "no_state"])
async def test_partition_start_up_with_a_standbys_keys_equals_the_start_up_without(case: str) -> None:
    """The partition state machine's start-up per topic (C loops, over the standby's keys when
    they fit) gives the states and Offline counts of the per-partition rule."""
    from controller_svc.common.model import LeaderIsrAndControllerEpoch, ReplicaAssignment
    from controller_svc.core.context import topic_replica_keys

    ctx = context((1, 2, 3, 4), {"t": {0: [1, 2, 3], 1: [2, 3, 4]}, "u": {0: [3, 1], 1: [1, 3]}})
    for topic, parts in ctx.assignments.items():
        for p, assignment in parts.items():
            ctx.partition_states[TopicPartition(topic, p)] = LeaderIsrAndControllerEpoch(
                assignment.replicas[0], 1, assignment.replicas, 0, 1
            )
    hint = {t: topic_replica_keys(t, parts) for t, parts in ctx.assignments.items()}
    if case == "replaced_dict":
        ctx.assignments["t"] = {p: ReplicaAssignment(r) for p, r in enumerate([(4, 1), (2, 3, 4), (1,)])}
    if case == "dead_leader":
        del ctx.live_brokers[3]
    if case == "no_state":
        del ctx.partition_states[TopicPartition("u", 1)]
    psm = PartitionStateMachine(ctx, FakePartitionStore(), RequestBatch(9, ctx), null_log(), 9, lambda: False)
    await psm.initialize()
    expected = dict(psm.states)
    counts = dict(psm.states.per_topic)
    ctx.replica_keys_hint = dict(hint)
    await psm.initialize()
    assert dict(psm.states) == expected and dict(psm.states.per_topic) == counts
    assert ctx.replica_keys_hint == hint  # left for the replica state machine
    rule = {
        TopicPartition(t, p): (
            PartitionState.NEW
            if (state := ctx.partition_states.get(TopicPartition(t, p))) is None
            else PartitionState.ONLINE
            if state.leader in ctx.live_brokers
            else PartitionState.OFFLINE
        )
        for t, parts in ctx.assignments.items()
        for p in parts
    }
    assert expected == rule
    if case == "dead_leader":
        assert counts == {"u": 1}


class StoreRefusingOneWrite(FakePartitionStore):
    """The n-th update (one election slice) is refused by ZooKeeper (NoAuth) after the others
    were sent; each update waits a few loop steps, so the slices are in flight together."""

    def __init__(self, refuse: int, moved: int | None = None) -> None:
        super().__init__()
        self.refuse = refuse
        self.moved = moved
        self.updates = 0
        self.outstanding = 0
        self.most_outstanding = 0

    async def update(self, states):  # type: ignore[no-untyped-def]
        import asyncio

        from controller_svc.common.errors import ZkNotAuthorizedError

        self.updates += 1
        number = self.updates
        self.outstanding += 1
        self.most_outstanding = max(self.most_outstanding, self.outstanding)
        for _ in range(5):
            await asyncio.sleep(0)
        self.outstanding -= 1
        if number == self.moved:
            raise ControllerMovedError("epoch moved")
        if number == self.refuse:
            raise ZkNotAuthorizedError("refused")
        return await super().update(states)


def _three_slices(monkeypatch: pytest.MonkeyPatch, store: FakePartitionStore):  # type: ignore[no-untyped-def]
    import controller_svc.controller.partition_state_machine as module

    monkeypatch.setattr(module, "ELECTION_SLICE", 2)
    ctx = context((1, 2, 3), {"t": {p: [1, 2, 3] for p in range(6)}})
    batch = RequestBatch(9, ctx)
    psm = PartitionStateMachine(ctx, store, batch, null_log(), 9, lambda: False)
    rsm = ReplicaStateMachine(ctx, store, batch, null_log(), 9)
    return ctx, batch, psm, rsm


async def test_a_refused_slice_does_not_drop_what_the_slices_in_flight_with_it_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from controller_svc.common.errors import ZkNotAuthorizedError

    store = StoreRefusingOneWrite(refuse=0)
    ctx, batch, psm, rsm = _three_slices(monkeypatch, store)
    await bring_online(ctx, store, batch, psm, rsm)
    store.refuse = store.updates + 2  # the second of the three election slices
    batch.new_batch()
    partitions = ctx.all_partitions()
    with pytest.raises(ZkNotAuthorizedError):
        await psm.handle_state_changes(partitions, PartitionState.ONLINE, ElectionStrategy.PREFERRED)
    assert store.most_outstanding == 3  # the three slices were out together
    sink = RecordingSink()
    batch.send(sink)
    sent = {p.partition for _, api, r in sink.sent if api == "LeaderAndIsr" for p in r.partition_states}
    # Slices 1 and 3 were committed in ZooKeeper: their requests go out; slice 2 wrote nothing.
    written = {tp.partition for tp, s in store.znodes.items() if s.leader_epoch == 1}
    assert written == {0, 1, 4, 5} and sent == written
    assert all(ctx.partition_states[TopicPartition("t", p)].leader_epoch == 1 for p in written)


async def test_a_moved_controller_among_the_slices_outranks_a_refused_one(monkeypatch: pytest.MonkeyPatch) -> None:
    store = StoreRefusingOneWrite(refuse=0)
    ctx, batch, psm, rsm = _three_slices(monkeypatch, store)
    await bring_online(ctx, store, batch, psm, rsm)
    store.refuse, store.moved = store.updates + 1, store.updates + 3
    batch.new_batch()
    with pytest.raises(ControllerMovedError):
        await psm.handle_state_changes(ctx.all_partitions(), PartitionState.ONLINE, ElectionStrategy.PREFERRED)
    batch.clear()


@pytest.mark.parametrize("fault", [None, "unavailable", "conflict"])
async def test_isr_removal_writes_from_the_cache_and_reads_only_isrs_that_lack_the_replica(
    monkeypatch: pytest.MonkeyPatch, fault: str | None
) -> None:
    """The ISR removal's first attempt (ISR_REMOVAL_CHUNK, here 2 of 5 partitions): a partition
    whose cached ISR holds the replica is written from the cache at the cached version, without
    a read; one whose cached ISR lacks it (a leader grew the ISR, its notification not processed
    yet) is read first and the replica removed from ZooKeeper's ISR all the same. ZooKeeper
    failing after 3 writes leaves the committed ones' requests in the batch; a znode that moved
    under a write from the cache (a leader's ISR write) is read and written at its new version."""
    from controller_svc.controller import replica_state_machine

    monkeypatch.setattr(replica_state_machine, "ISR_REMOVAL_CHUNK", 2)
    ctx, store, batch, psm, rsm = machines(assignment={p: [2, 1, 3] for p in range(5)})
    await bring_online(ctx, store, batch, psm, rsm)
    stale = [TopicPartition("t", 1), TopicPartition("t", 4)]
    for tp in stale:
        store.bump(tp, (2, 3))
        ctx.partition_states[tp] = store.znodes[tp]
        store.bump(tp, (2, 3, 1))  # the leader took 1 back; the controller has not heard yet
    replicas = [PartitionAndReplica(TopicPartition("t", p), 1) for p in range(5)]
    reads: list[list[TopicPartition]] = []
    writes: list[int] = []
    bumped: list[TopicPartition] = []
    read, update = store.read, store.update
    moved = TopicPartition("t", 3)

    async def logged_read(partitions: Any) -> Any:
        reads.append(sorted(partitions))
        return await read(partitions)

    async def logged_update(states: Any) -> Any:
        writes.append(len(states))
        if fault == "conflict" and moved in states and not bumped:
            bumped.append(moved)
            store.bump(moved, (2, 1, 3))  # a leader's ISR write the cache has not seen
        return await update(states)

    monkeypatch.setattr(store, "read", logged_read)
    monkeypatch.setattr(store, "update", logged_update)
    batch.new_batch()
    if fault == "unavailable":
        store.unavailable_after = store.writes + 3
        with pytest.raises(ZkUnavailableError):
            await rsm.handle_state_changes(replicas, ReplicaState.OFFLINE)
    else:
        await rsm.handle_state_changes(replicas, ReplicaState.OFFLINE)
    told = set(batch.leader_and_isr.get(2, {})) & set(batch.leader_and_isr.get(3, {}))
    batch.clear()
    written = {tp for tp in store.znodes if 1 not in store.znodes[tp].isr}
    everything = {r.tp for r in replicas}
    assert all(rsm.state(r) is ReplicaState.OFFLINE for r in replicas)
    assert told == written
    assert dict(ctx.partition_states) == store.znodes
    if fault == "unavailable":
        assert len(written) == 3 and store.writes == 3 + len(everything)  # three of five committed
        return
    assert written == everything  # the stale ISRs' replica removed too
    assert reads[0] == stale  # the only ISRs that needed reading
    if fault is None:
        assert reads == [stale] and sorted(writes) == [1, 2, 2]
    else:  # the moved znode read again and written at its new version
        assert reads == [stale, [moved]] and sorted(writes) == [1, 1, 2, 2]
        assert store.znodes[moved].isr == (2, 3)


async def test_a_leaders_isr_write_met_by_a_removal_from_the_cache_is_not_taken_for_ours() -> None:
    """The cache still has broker 1 in t-0's ISR, but its leader has since shrunk the ISR
    without it (same leader epoch, the current controller's epoch in the znode). The removal's
    write from the cache meets a moved version and reads the state: nothing is left to remove,
    and it is not our write applied with its reply lost, so no LeaderAndIsr is sent for it (the
    leader's own ISR-change notification announces it); t-1's removal goes out as usual."""
    ctx, store, batch, psm, rsm = machines(assignment={0: [2, 1, 3], 1: [2, 1, 3]})
    await bring_online(ctx, store, batch, psm, rsm)
    t1 = TopicPartition("t", 1)
    store.bump(T0, (2, 3))
    assert store.znodes[T0].controller_epoch == ctx.epoch and 1 in ctx.partition_states[T0].isr
    batch.new_batch()
    await rsm.handle_state_changes([PartitionAndReplica(T0, 1), PartitionAndReplica(t1, 1)], ReplicaState.OFFLINE)
    told = set(batch.leader_and_isr.get(2, {}))
    batch.clear()
    assert told == {t1}
    assert ctx.partition_states[T0] == store.znodes[T0] and store.znodes[T0].isr == (2, 3)
    assert store.znodes[t1].isr == (2, 3) and store.znodes[t1].leader_epoch == ctx.partition_states[t1].leader_epoch


@pytest.mark.parametrize(
    "strategy", [ElectionStrategy.OFFLINE, ElectionStrategy.PREFERRED, ElectionStrategy.CONTROLLED_SHUTDOWN]
)
@pytest.mark.parametrize("cluster_unclean", [False, True])
def test_elections_made_once_per_replicas_and_isr_are_each_partitions_own(
    strategy: ElectionStrategy, cluster_unclean: bool
) -> None:
    """A slice elects once per (replicas, ISR, unclean permission): every partition's proposal
    is what `elect` gives it alone, its own leader epoch bumped, on replica lists and ISRs that
    repeat, with a shutting-down broker, a broker that is not live and a topic whose config
    overrides the cluster's unclean default."""
    import random

    from controller_svc.controller.partition_state_machine import StateChangeResult
    from controller_svc.core.election import elect

    rng = random.Random(f"{strategy.value}-{cluster_unclean}")
    assignments = {t: {p: rng.sample(range(1, 7), 3) for p in range(400)} for t in ("t", "u")}
    ctx = context([1, 2, 3, 4, 5], assignments)  # broker 6 is not live
    ctx.shutting_down_broker_ids.add(2)
    ctx.topic_configs["u"] = {"unclean.leader.election.enable": str(not cluster_unclean).lower()}
    tps = [TopicPartition(t, p) for t in ("t", "u") for p in range(400)]
    for tp in tps:
        replicas = assignments[tp.topic][tp.partition]
        isr = tuple(rng.sample(replicas, rng.randint(1, 3)))
        ctx.partition_states[tp] = LeaderIsrAndControllerEpoch(isr[0], rng.randint(0, 9), isr, rng.randint(0, 5), 3)
    psm = PartitionStateMachine(ctx, FakePartitionStore(), RequestBatch(9, ctx), null_log(), 9, lambda: cluster_unclean)
    result = StateChangeResult()
    decided = psm._decide(tps, strategy, result, allow_unclean=False)
    moved = 0
    for tp in tps:
        state = ctx.partition_states[tp]
        unclean = ctx.unclean_election_enabled(tp.topic, cluster_unclean)
        own = elect(strategy, ctx.assignments[tp.topic][tp.partition], state, ctx.live_broker_ids, {2}, unclean)
        if own.leader is None:
            assert tp in result.failed and tp not in decided.proposals
            continue
        moved += 1
        assert decided.proposals[tp] == (own.leader, state.leader_epoch + 1, own.isr, state.zk_version, 3), tp
        assert (tp in decided.unclean) == own.unclean, tp
    assert 0 < moved < len(tps)
