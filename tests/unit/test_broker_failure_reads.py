"""A broker failure's ISR clean-up (OfflineReplica) reads from ZooKeeper only the states whose
cached ISR lacks the failed broker: those it followed are written from the cache at their
cached version (a conditional write that succeeds only on the very state cached), the
partitions it led were just written by their election. Kafka's removeReplicasFromIsr reads
every state first; either way the same requests go out and ZooKeeper ends in the same states,
which the controller's cache then holds."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from controller_svc.common.model import LeaderIsrAndControllerEpoch, PartitionAndReplica, TopicPartition
from controller_svc.controller.partition_manager import PartitionManager
from controller_svc.controller.replica_state_machine import ReplicaStateMachine
from controller_svc.core.context import ControllerContext
from tests.unit.fakes import FakePartitionStore, RecordingSink, context, null_log

DEAD = 2


class ReadCountingStore(FakePartitionStore):
    def __init__(self) -> None:
        super().__init__()
        self.read_partitions: list[TopicPartition] = []

    async def read(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, LeaderIsrAndControllerEpoch | None]:
        self.read_partitions.extend(partitions)
        return await super().read(partitions)


def _cluster(seed: int) -> tuple[ControllerContext, ReadCountingStore]:
    rng = random.Random(seed)
    assignments = {f"t{t}": {p: rng.sample([1, 2, 3, 4], 3) for p in range(rng.randrange(4, 12))} for t in range(6)}
    ctx = context([1, 2, 3, 4], assignments)
    store = ReadCountingStore()
    for topic, parts in ctx.assignments.items():
        for p, assignment in parts.items():
            tp = TopicPartition(topic, p)
            leader = rng.choice(assignment.replicas)
            # Some partitions led by the broker that fails have it alone in their ISR: their
            # election fails (no unclean election), they stay offline.
            isr = (leader,) if leader == DEAD and rng.random() < 0.3 else assignment.replicas
            state = LeaderIsrAndControllerEpoch(leader, 1, isr, 0, ctx.epoch)
            ctx.partition_states[tp] = store.znodes[tp] = state
    return ctx, store


async def _fail(seed: int, read_everything: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    if read_everything:  # what Kafka's ReplicaStateMachine does: read back every partition first
        original = ReplicaStateMachine._remove_from_isr_pipelined

        async def reading_everything(self: ReplicaStateMachine, broker_id: int, partitions: Any, updated: Any) -> Any:
            fresh = await self.store.read(partitions)
            self.ctx.set_partition_states({tp: state for tp, state in fresh.items() if state is not None})
            return await original(self, broker_id, partitions, updated)

        monkeypatch.setattr(ReplicaStateMachine, "_remove_from_isr_pipelined", reading_everything)
        monkeypatch.setattr(ReplicaStateMachine, "handle_state_changes", _without_the_elections_writes)
    ctx, store = _cluster(seed)
    before = dict(ctx.partition_states)
    sink = RecordingSink()
    manager = PartitionManager(9, ctx, store, sink, null_log(), lambda: False)
    await manager.initialize_state_machines()
    del ctx.live_brokers[DEAD]
    await manager.on_broker_failure({DEAD})
    monkeypatch.undo()
    return {
        "before": before,
        "ctx": ctx,
        "read": list(store.read_partitions),
        "sent": [(b, api, r.SerializeToString()) for b, api, r in sink.sent],
        "znodes": dict(store.znodes),
    }


_handle_state_changes = ReplicaStateMachine.handle_state_changes


async def _without_the_elections_writes(self: ReplicaStateMachine, replicas: Any, target: Any, **_: Any) -> Any:
    return await _handle_state_changes(self, replicas, target)


@pytest.mark.parametrize("seed", range(6))
async def test_the_clean_up_reads_only_what_the_elections_did_not_write(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    ours = await _fail(seed, read_everything=False, monkeypatch=monkeypatch)
    kafkas = await _fail(seed, read_everything=True, monkeypatch=monkeypatch)
    before, after = ours["before"], ours["ctx"].partition_states
    led = {tp for tp, s in before.items() if s.leader == DEAD}
    elected = {tp for tp in led if after[tp].leader not in (DEAD, -1)}
    stuck = led - elected  # the dead broker was alone in the ISR
    followed = {tp for tp, s in before.items() if DEAD in s.isr and tp not in led}
    assert elected and stuck and followed  # every kind is in the cluster
    assert ours["read"] == []  # every cached ISR holding the broker is current: none read
    assert dict(ours["ctx"].partition_states) == ours["znodes"]
    assert set(kafkas["read"]) == led | followed
    assert ours["sent"] == kafkas["sent"] and ours["znodes"] == kafkas["znodes"]
    assert all(DEAD not in after[tp].isr for tp in elected | followed)
    assert all(after[tp].leader == -1 and after[tp].isr == (DEAD,) for tp in stuck)


async def test_a_state_changed_since_the_election_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the cached state is no longer the one the election wrote (something read a newer one
    in between), the clean-up reads it like any other."""
    ctx, store = _cluster(0)
    sink = RecordingSink()
    manager = PartitionManager(9, ctx, store, sink, null_log(), lambda: False)
    await manager.initialize_state_machines()
    led = sorted(tp for tp, s in ctx.partition_states.items() if s.leader == DEAD and len(s.isr) > 1)
    original = ReplicaStateMachine.handle_state_changes

    async def after_a_refresh(self: ReplicaStateMachine, replicas: Any, target: Any, **kwargs: Any) -> Any:
        written = kwargs.get("written_this_event") or {}
        assert led[0] in written
        ctx.partition_states[led[0]] = written[led[0]]._replace()  # equal, not the same object
        return await original(self, replicas, target, **kwargs)

    monkeypatch.setattr(ReplicaStateMachine, "handle_state_changes", after_a_refresh)
    del ctx.live_brokers[DEAD]
    await manager.on_broker_failure({DEAD})
    assert led[0] in store.read_partitions
    assert not set(led[1:]) & set(store.read_partitions)


async def test_a_partition_followed_by_two_failed_brokers_loses_both_from_its_isr() -> None:
    """Each failed broker's removal starts from the state the one before it wrote (cached as
    written, at its new version): nothing read, the leader epoch bumped by each."""
    ctx = context([1, 2, 3, 4, 5], {"t": {p: [1, 2, 3] for p in range(12)}})
    store = ReadCountingStore()
    for p in range(12):
        tp = TopicPartition("t", p)
        ctx.partition_states[tp] = store.znodes[tp] = LeaderIsrAndControllerEpoch(1, 1, (1, 2, 3), 0, ctx.epoch)
    manager = PartitionManager(9, ctx, store, RecordingSink(), null_log(), lambda: False)
    await manager.initialize_state_machines()
    del ctx.live_brokers[2], ctx.live_brokers[3]
    await manager.on_broker_failure({2, 3})
    assert all(store.znodes[TopicPartition("t", p)].isr == (1,) for p in range(12))
    assert all(store.znodes[TopicPartition("t", p)].leader_epoch == 3 for p in range(12))
    assert dict(ctx.partition_states) == store.znodes
    assert store.read_partitions == []


async def test_a_live_brokers_failed_log_dir_reads_every_partition_back() -> None:
    """Replicas of a live broker going offline (a failed log dir): the new leaders its
    partitions were just given could take it back into their ISR, so the clean-up reads back
    the states the elections wrote (their cached ISR lacks the broker), as Kafka does."""
    ctx, store = _cluster(0)
    manager = PartitionManager(9, ctx, store, RecordingSink(), null_log(), lambda: False)
    await manager.initialize_state_machines()
    on_dead = {PartitionAndReplica(tp, DEAD) for tp in ctx.partition_states if DEAD in ctx.replicas(tp)}
    ctx.replicas_on_offline_dirs[DEAD] = {r.tp for r in on_dead}
    led = {tp for tp, s in ctx.partition_states.items() if s.leader == DEAD}
    await manager.on_replicas_become_offline(on_dead)
    elected = {tp for tp in led if ctx.partition_states[tp].leader not in (DEAD, -1)}
    assert elected  # some were elected
    assert elected <= set(store.read_partitions)
    assert dict(ctx.partition_states) == store.znodes
