"""UpdateMetadata's partition states encoded once and kept (core/metadata_encoding.py): the
joined fields parse as the messages built each time would; an entry is used only for the very
state and assignment objects it was made from; partitions whose encoding depends on more (an
topic being deleted, no state yet) are never taken from the cache; one with offline replicas
is kept apart, valid for that list of offline replicas."""

from __future__ import annotations

from controller_svc.common.model import LeaderIsrAndControllerEpoch, ReplicaAssignment, TopicPartition
from controller_svc.core.metadata_encoding import encode_field, encode_online, remember
from controller_svc.core.request_batch import RequestBatch, metadata_partition_fields
from kcontroller.v1 import broker_pb2
from tests.unit.fakes import RecordingSink, context

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


def _ctx():  # type: ignore[no-untyped-def]
    ctx = context([1, 2, 3], {"t": {0: [1, 2, 3], 1: [2, 3, 4], 2: [3, 1, 2]}, "gone": {0: [1, 2]}})
    ctx.partition_states[T0] = LeaderIsrAndControllerEpoch(1, 5, (1, 2, 3), 7, 2)
    ctx.partition_states[T1] = LeaderIsrAndControllerEpoch(2, 3, (2, 3), 4, 2)
    ctx.partition_states[TopicPartition("gone", 0)] = LeaderIsrAndControllerEpoch(1, 1, (1, 2), 1, 2)
    ctx.topics_to_be_deleted.add("gone")
    return ctx


def _parse(fields: list[bytes]) -> broker_pb2.UpdateMetadataRequest:
    return broker_pb2.UpdateMetadataRequest.FromString(b"".join(fields))


def test_the_joined_fields_parse_as_the_partition_states() -> None:
    ctx = _ctx()
    partitions = [T0, T1, T2, TopicPartition("gone", 0)]
    request = _parse(metadata_partition_fields(ctx, partitions))
    got = {(p.topic, p.partition): p for p in request.partition_states}
    assert [(p.topic, p.partition) for p in request.partition_states] == [(tp.topic, tp.partition) for tp in partitions]
    t0 = got[("t", 0)]
    assert (t0.leader, t0.leader_epoch, list(t0.isr), t0.zk_version, t0.controller_epoch) == (1, 5, [1, 2, 3], 7, 2)
    assert list(t0.replicas) == [1, 2, 3] and not t0.offline_replicas
    assert list(got[("t", 1)].offline_replicas) == [4]  # broker 4 is not live
    assert got[("t", 2)].leader == -1 and got[("t", 2)].leader_epoch == -1  # no state yet
    assert got[("gone", 0)].leader == -2  # being deleted
    # Only the common case is kept: t-0; and t-1 apart, with its offline replica.
    assert set(ctx.encoded_partition_states) == {T0}
    assert set(ctx.encoded_offline_partition_states) == {T1}


def test_an_offline_entry_is_used_only_while_the_same_replicas_are_offline() -> None:
    ctx = _ctx()
    first = metadata_partition_fields(ctx, [T1])[0]
    assert metadata_partition_fields(ctx, [T1])[0] is first  # from the cache
    ctx.live_brokers[4] = ctx.live_brokers[1]  # broker 4 back: the common case, no offline replica
    back = metadata_partition_fields(ctx, [T1])[0]
    assert not _parse([back]).partition_states[0].offline_replicas
    del ctx.live_brokers[3]  # now 3 is offline instead
    other = metadata_partition_fields(ctx, [T1])[0]
    assert list(_parse([other]).partition_states[0].offline_replicas) == [3]
    ctx.topics_to_be_deleted.add("t")  # a deletion's leader -2 is never from the cache
    assert _parse(metadata_partition_fields(ctx, [T1])).partition_states[0].leader == -2
    ctx.topics_to_be_deleted.discard("t")
    ctx.partition_states[T1] = LeaderIsrAndControllerEpoch(4, 4, (2, 4), 5, 2)  # a new state
    assert _parse(metadata_partition_fields(ctx, [T1])).partition_states[0].leader == 4


def test_an_entry_is_used_only_for_the_objects_it_was_made_from() -> None:
    ctx = _ctx()
    first = metadata_partition_fields(ctx, [T0])[0]
    assert metadata_partition_fields(ctx, [T0])[0] is first  # the same bytes object: from the cache
    # A new state (as every change makes) is encoded again, with what it says.
    ctx.partition_states[T0] = LeaderIsrAndControllerEpoch(2, 6, (2, 3), 8, 3)
    again = metadata_partition_fields(ctx, [T0])[0]
    assert again != first and _parse([again]).partition_states[0].leader == 2
    # So is a new assignment with the same replicas (equal, but not the object the entry names).
    ctx.assignments["t"][0] = ReplicaAssignment((2, 3, 1))
    moved = metadata_partition_fields(ctx, [T0])[0]
    assert list(_parse([moved]).partition_states[0].replicas) == [2, 3, 1]


def test_a_stale_entry_made_elsewhere_is_never_used() -> None:
    ctx = _ctx()
    old_state = LeaderIsrAndControllerEpoch(3, 1, (3,), 1, 1)
    # An entry made from an older state (e.g. by a standby before the state changed).
    remember(ctx.encoded_partition_states, T0, old_state, ctx.assignments["t"][0])
    assert ctx.encoded_partition_states[T0][2] == encode_online(T0, old_state, ctx.assignments["t"][0])
    field = metadata_partition_fields(ctx, [T0])[0]
    assert _parse([field]).partition_states[0].leader == 1


def test_the_update_metadata_request_a_batch_sends_parses_whole() -> None:
    ctx = _ctx()
    batch, sink = RequestBatch(9, ctx), RecordingSink()
    batch.new_batch()
    batch.add_update_metadata([1, 2], [T0, T1])
    batch.send(sink)
    sent = [r for _, api, r in sink.sent if api == "UpdateMetadata"]
    assert len(sent) == 2
    for parsed in sent:  # RecordingSink parses what the broker would (head + shared body)
        assert parsed.controller_id == 9
        assert [(p.topic, p.partition) for p in parsed.partition_states] == [("t", 0), ("t", 1)]
        assert sorted(b.id for b in parsed.live_brokers) == [1, 2, 3]


def test_a_deleted_topic_leaves_nothing_in_the_cache() -> None:
    """Topic churn must not grow the cache: removing a topic drops its partitions' entries."""
    ctx = _ctx()
    metadata_partition_fields(ctx, [T0])
    assert T0 in ctx.encoded_partition_states
    ctx.remove_topic("t")
    assert ctx.encoded_partition_states == {}


def test_a_partition_with_offline_replicas_is_derived_from_its_online_encoding_byte_for_byte() -> None:
    """with_offline_replicas (a broker failure's UpdateMetadata of the partitions its
    LeaderAndIsr just encoded) against protobuf's own serialization, which the brokers' digests
    re-make: any difference would show as every such topic resent at the next failover."""
    import random

    from controller_svc.core.metadata_encoding import state_message, with_offline_replicas

    rng = random.Random(7)
    for _ in range(300):
        tp = TopicPartition(rng.choice(["t", "ü-topic", "x" * 150]), rng.choice([0, 1, 127, 128, 70000]))
        replicas = rng.sample([0, 1, 2, 3, 200, 1000, 70000], rng.randrange(1, 5))
        state = LeaderIsrAndControllerEpoch(
            rng.choice([-1, 0, replicas[0]]),
            rng.choice([0, 1, 300]),
            tuple(rng.sample(replicas, rng.randrange(0, len(replicas) + 1))),
            rng.choice([0, 5, 1 << 20]),
            rng.choice([0, 1, 129]),
        )
        offline = rng.sample(replicas, rng.randrange(1, len(replicas) + 1))
        online = encode_online(tp, state, ReplicaAssignment(tuple(replicas)))
        expected = state_message(tp, state, list(replicas), state.leader)
        expected.offline_replicas.extend(offline)
        assert with_offline_replicas(online, offline) == encode_field(expected)
    assert with_offline_replicas(online, [-3]) is None


def test_a_batch_derives_the_offline_encoding_only_from_its_own_state_and_assignment() -> None:
    ctx = _ctx()
    # T1 has broker 4 offline; an online encoding of an older state is in the cache
    old = LeaderIsrAndControllerEpoch(3, 1, (3,), 1, 1)
    remember(ctx.encoded_partition_states, T1, old, ctx.assignments["t"][1])
    t1 = _parse(metadata_partition_fields(ctx, [T1])).partition_states[0]
    assert (t1.leader, t1.leader_epoch, list(t1.offline_replicas)) == (2, 3, [4])
    # the current state's online encoding (a LeaderAndIsr's): derived from it, same message
    ctx.encoded_offline_partition_states.clear()
    remember(ctx.encoded_partition_states, T1, ctx.partition_states[T1], ctx.assignments["t"][1])
    assert _parse(metadata_partition_fields(ctx, [T1])).partition_states[0] == t1


def test_an_online_field_is_what_upb_serializes_byte_for_byte() -> None:
    """The field joined from pieces against the message built and serialized by upb: zero
    (omitted) and one- and two-byte values, the limit of the tables and beyond it, no leader,
    empty, negative and large replica lists, empty and non-ASCII topics."""
    import random

    from controller_svc.core.metadata_encoding import state_message

    rng = random.Random(7)
    edges = [0, 1, 127, 128, 16383, 16384, 2**31 - 1]
    for _ in range(20000):
        tp = TopicPartition(rng.choice(["", "t", "led-003", "é" * rng.randint(1, 70)]), rng.choice(edges[:-1]))
        state = LeaderIsrAndControllerEpoch(
            rng.choice([-1, *edges, rng.randint(0, 20000)]),
            rng.choice([*edges, rng.randint(0, 40000)]),
            tuple(rng.sample(range(-1, 20000), rng.randint(0, 5))),
            rng.choice([*edges, rng.randint(0, 40000)]),
            rng.choice([*edges, rng.randint(0, 40000)]),
        )
        assignment = ReplicaAssignment(tuple(rng.sample(range(-1, 20000), rng.randint(0, 5))))
        expected = encode_field(state_message(tp, state, list(assignment.replicas), state.leader))
        assert encode_online(tp, state, assignment) == expected, (tp, state, assignment)
    listed = LeaderIsrAndControllerEpoch(1, 2, [1, 2], 3, 4)  # type: ignore[arg-type]
    assert encode_online(T0, listed, ReplicaAssignment((1, 2))) == encode_field(state_message(T0, listed, [1, 2], 1))
