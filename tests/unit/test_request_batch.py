from __future__ import annotations

import pytest

from controller_svc.common.errors import IllegalStateError
from controller_svc.common.model import LeaderIsrAndControllerEpoch, ReplicaAssignment, TopicPartition
from controller_svc.core.request_batch import RequestBatch
from tests.unit.fakes import RecordingSink, broker, context

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
ASSIGNMENT = ReplicaAssignment((1, 2, 3))


def state(leader: int, epoch: int) -> LeaderIsrAndControllerEpoch:
    return LeaderIsrAndControllerEpoch(leader, epoch, (1, 2, 3), epoch, 3)


def make() -> tuple[RequestBatch, RecordingSink]:
    ctx = context([1, 2, 3, 4], {"t": {0: [1, 2, 3], 1: [1, 2, 3]}})
    ctx.live_brokers[4] = broker(4, epoch=444)
    ctx.shutting_down_broker_ids.add(4)
    return RequestBatch(9, ctx), RecordingSink()


def test_one_state_per_broker_and_partition_last_write_wins_is_new_sticky() -> None:
    batch, sink = make()
    batch.new_batch()
    batch.add_leader_and_isr([1, 2], T0, state(1, 1), ASSIGNMENT, is_new=True)
    batch.add_leader_and_isr([1, 2], T0, state(2, 2), ASSIGNMENT, is_new=False)
    batch.send(sink)
    leader_and_isr = [(b, r) for b, api, r in sink.sent if api == "LeaderAndIsr"]
    assert [b for b, _ in leader_and_isr] == [1, 2]
    for _, request in leader_and_isr:
        assert len(request.partition_states) == 1
        p = request.partition_states[0]
        assert p.leader == 2 and p.leader_epoch == 2 and p.is_new
        assert [lb.id for lb in request.live_leaders] == [2]


def test_leader_and_isr_implies_update_metadata_to_live_and_shutting_down_brokers_in_order() -> None:
    batch, sink = make()
    batch.new_batch()
    batch.add_leader_and_isr([1], T0, state(1, 1), ASSIGNMENT, is_new=False)
    batch.add_stop_replica([1], T1, delete=False)
    batch.send(sink)
    assert [(b, api) for b, api, _ in sink.sent] == [
        (1, "LeaderAndIsr"),
        (1, "UpdateMetadata"),
        (2, "UpdateMetadata"),
        (3, "UpdateMetadata"),
        (4, "UpdateMetadata"),
        (1, "StopReplica"),
    ]
    per_broker_order = [api for b, api, _ in sink.sent if b == 1]
    assert per_broker_order == ["LeaderAndIsr", "UpdateMetadata", "StopReplica"]


def test_each_request_carries_its_brokers_epoch_and_dead_brokers_get_nothing() -> None:
    batch, sink = make()
    batch.new_batch()
    batch.add_leader_and_isr([1, 7], T0, state(1, 1), ASSIGNMENT, is_new=False)  # 7 is not live
    batch.send(sink)
    assert 7 not in {b for b, _, _ in sink.sent}
    for broker_id, _, request in sink.sent:
        assert request.broker_epoch == (444 if broker_id == 4 else 100 + broker_id)
        assert request.controller_epoch == 3 and request.controller_id == 9


def test_stop_replica_delete_is_sticky_and_epoch_is_minus_two_while_deleting() -> None:
    batch, sink = make()
    batch.ctx.partition_states[T0] = state(1, 5)
    batch.new_batch()
    batch.add_stop_replica([2], T0, delete=True)
    batch.add_stop_replica([2], T0, delete=False)
    batch.send(sink)
    (request,) = [r for _, api, r in sink.sent if api == "StopReplica"]
    assert request.partitions[0].delete_partition is True and request.partitions[0].leader_epoch == 5
    batch.ctx.topics_to_be_deleted.add("t")
    batch.new_batch()
    batch.add_stop_replica([2], T0, delete=True)
    batch.add_update_metadata([1], [T0])
    sink.sent.clear()
    batch.send(sink)
    stop = next(r for _, api, r in sink.sent if api == "StopReplica")
    metadata = next(r for _, api, r in sink.sent if api == "UpdateMetadata")
    assert stop.partitions[0].leader_epoch == -2
    assert metadata.partition_states[0].leader == -2


def test_starting_a_batch_while_one_is_pending_is_illegal() -> None:
    batch, _ = make()
    batch.new_batch()
    batch.add_update_metadata([1], [])
    with pytest.raises(IllegalStateError):
        batch.new_batch()


def test_only_stop_replica_requests_that_delete_answer_for_topic_deletion() -> None:
    """Kafka's sendStopReplicaRequests: the response callback names the partitions that the
    request deleted; a StopReplica(delete=false) has none and answers nothing."""
    answered: list[tuple[int, frozenset[TopicPartition], int]] = []
    ctx = context([1, 2, 3], {"t": {0: [1, 2, 3], 1: [2, 3]}})
    batch = RequestBatch(
        1, ctx, on_stop_replica_response=lambda b, _resp, deleted, epoch: answered.append((b, deleted, epoch))
    )
    callbacks: dict[int, object] = {}

    class Sink:
        def send(self, broker_id: int, api: str, request: object, callback: object) -> bool:
            if api == "StopReplica":
                callbacks[broker_id] = callback
            return True

    batch.new_batch()
    batch.add_stop_replica([2], T0, delete=False)
    batch.add_stop_replica([2], TopicPartition("t", 1), delete=True)
    batch.add_stop_replica([3], T0, delete=False)
    batch.send(Sink())
    assert callbacks[3] is None
    callback = callbacks[2]
    assert callable(callback)
    callback(2, "StopReplica", "the response")
    assert answered == [(2, frozenset({TopicPartition("t", 1)}), ctx.broker_epoch(2))]  # the epoch it was sent to


@pytest.mark.parametrize("seed", range(8))
def test_a_slice_of_elections_added_at_once_builds_what_one_call_per_partition_builds(seed: int) -> None:
    """add_leader_and_isr_to_replicas (the partition state machine's slices) against the single
    call it stands for, after random earlier entries: is_new ones (sticky), reassignments."""
    import random

    rng = random.Random(seed)
    built = []
    for bulk in (True, False):
        rng = random.Random(seed)
        batch, sink = make()
        ctx = batch.ctx
        for p in range(8):
            tp = TopicPartition("t", p)
            replicas = tuple(rng.sample([1, 2, 3, 4, 5], 3))
            adding = (5,) if rng.random() < 0.2 else ()
            ctx.set_assignment(tp, ReplicaAssignment(replicas + adding, adding, replicas[:1] if adding else ()))
        batch.new_batch()
        for step in range(6):
            chosen = rng.sample(range(8), rng.randrange(1, 8))
            states = {TopicPartition("t", p): state(rng.choice([1, 2, 3]), step + 1) for p in sorted(chosen)}
            if step == 0 or rng.random() < 0.4:  # a new partition's entries, to some brokers
                tp = rng.choice(list(states))
                assignment = ctx.assignment(tp)
                assert assignment is not None
                batch.add_leader_and_isr(rng.sample([1, 2, 3], 2), tp, states[tp], assignment, is_new=True)
            recipients = ctx.live_or_shutting_down_broker_ids
            if bulk:
                batch.add_leader_and_isr_to_replicas(states, recipients)
            else:
                for tp, chosen_state in states.items():
                    assignment = ctx.assignment(tp)
                    assert assignment is not None
                    brokers = [r for r in assignment.replicas if r in recipients]
                    batch.add_leader_and_isr(brokers, tp, chosen_state, assignment, is_new=False)
        batch.send(sink)
        built.append(sink.sent)
    assert built[0] == built[1]
    assert any(p.is_new for _, api, r in built[0] if api == "LeaderAndIsr" for p in r.partition_states)


def test_the_batch_built_in_steps_is_the_batch_built_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """build_steps (what an operation drives, yielding to the loop at each stop) returns the
    requests `build` returns, stopping after each broker's LeaderAndIsr and StopReplica and
    between slices of UpdateMetadata partitions."""
    import random

    from controller_svc.core import request_batch

    monkeypatch.setattr(request_batch, "BUILD_SLICE", 3)
    rng = random.Random(5)
    built = []
    for stepwise in (True, False):
        rng = random.Random(5)
        ctx = context([1, 2, 3, 4], {f"t{t}": {p: rng.sample([1, 2, 3, 4], 3) for p in range(10)} for t in range(4)})
        batch = RequestBatch(9, ctx)
        batch.new_batch()
        for topic, parts in sorted(ctx.assignments.items()):
            for p, assignment in parts.items():
                tp = TopicPartition(topic, p)
                choice = rng.random()
                if choice < 0.5:
                    leader_state = state(assignment.replicas[0], 1)
                    batch.add_leader_and_isr(assignment.replicas, tp, leader_state, assignment, False)
                elif choice < 0.8:
                    batch.add_stop_replica(assignment.replicas[1:], tp, delete=rng.random() < 0.5)
                else:
                    batch.add_update_metadata([1, 2, 3, 4], [tp])
        assert batch.entry_count() > 3
        metadata_slices = -(-len(batch.update_metadata_partitions) // 3)
        stop_replica_slices = sum(-(-len(per_broker) // 3) for per_broker in batch.stop_replica.values())
        expected_stops = len(batch.leader_and_isr) + metadata_slices + stop_replica_slices
        if stepwise:
            requests = []
            count = sum(1 for _ in batch.build_steps(requests))
            assert metadata_slices >= 2 and stop_replica_slices > len(batch.stop_replica)
            assert count == expected_stops
        else:
            requests = batch.build()
        wire = [(b, api, r.SerializeToString() if api == "StopReplica" else r.serialize()) for b, api, r in requests]
        built.append(wire)
    assert built[0] == built[1]
