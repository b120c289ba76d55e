"""The failover's per-topic metadata digests (common/metadata_digest.py): what a broker reports
of its metadata cache, what the controller computes over its UpdateMetadata, and the topics
each broker is then sent (core/replica_epochs.topics_lacking)."""

from __future__ import annotations

import random

from broker_stub import replica_manager
from broker_stub.state import BrokerState, MetadataCache
from controller_svc.common.model import LEADER_DURING_DELETE, LeaderIsrAndControllerEpoch, TopicPartition
from controller_svc.core.context import ControllerContext
from controller_svc.core.replica_epochs import topics_lacking
from controller_svc.core.request_batch import RequestBatch, metadata_topic_digests
from kcontroller.v1 import broker_pb2, common_pb2
from tests.unit.fakes import context


def _cluster() -> tuple[ControllerContext, BrokerState]:
    """A context with three topics (one with a replica on dead broker 4, one partition without
    a state znode) and broker 1 after applying the controller's UpdateMetadata of everything,
    through the request's wire bytes as a broker parses them."""
    ctx = context(
        [1, 2, 3],
        {
            "a": {p: [1 + p % 3, 1 + (p + 1) % 3, 1 + (p + 2) % 3] for p in range(12)},
            "b": {0: [1, 4], 1: [4, 2]},
            "c": {0: [2, 3], 1: [3, 2]},
        },
    )
    for topic, parts in ctx.assignments.items():
        for p, assignment in parts.items():
            if (topic, p) == ("c", 1):
                continue  # no state znode yet
            leader = assignment.replicas[0]
            ctx.partition_states[TopicPartition(topic, p)] = LeaderIsrAndControllerEpoch(
                leader, 5 + p, tuple(r for r in assignment.replicas if r != 4), 7 + p, 2
            )
    broker = BrokerState(broker_id=1, broker_epoch=ctx.broker_epoch(1))
    _apply_update(ctx, broker, ctx.all_partitions())
    return ctx, broker


def _apply_update(ctx: ControllerContext, broker: BrokerState, partitions: list[TopicPartition]) -> None:
    batch = RequestBatch(controller_id=9, ctx=ctx)
    batch.new_batch()
    batch.add_update_metadata([1], partitions)
    ((_broker_id, _api, request),) = batch.build()
    batch.clear()
    result = replica_manager.apply_update_metadata(broker, request.parse())
    assert result.applied


def _ask_digests(broker: BrokerState, epoch: int = 3) -> dict[str, bytes]:
    result, answer = replica_manager.apply_describe_replica_epochs(
        broker,
        broker_pb2.DescribeReplicaEpochsRequest(
            controller_id=9, controller_epoch=epoch, broker_epoch=broker.broker_epoch, metadata_digests=True
        ),
    )
    assert result.applied
    return {d.topic: d.digest for d in answer.metadata_digests}


def test_a_broker_that_applied_the_update_reports_the_controllers_digest_of_every_topic() -> None:
    ctx, broker = _cluster()
    ours = metadata_topic_digests(ctx, ["a", "b", "c"])
    assert _ask_digests(broker) == ours
    assert len(set(ours.values())) == 3
    assert topics_lacking(["a", "b", "c"], ours, _ask_digests(broker)) == frozenset()


def test_not_asked_no_digests() -> None:
    _ctx, broker = _cluster()
    _result, answer = replica_manager.apply_describe_replica_epochs(
        broker, broker_pb2.DescribeReplicaEpochsRequest(controller_id=9, controller_epoch=3, broker_epoch=0)
    )
    assert answer.metadata_digests == []


def test_any_change_of_what_the_update_would_carry_changes_its_topics_digest_only() -> None:
    ctx, broker = _cluster()
    held = _ask_digests(broker)
    a1 = TopicPartition("a", 1)

    def lacking() -> frozenset[str]:
        return topics_lacking(["a", "b", "c"], metadata_topic_digests(ctx, ["a", "b", "c"]), held)

    state = ctx.partition_states[a1]
    for changed in (
        state._replace(leader_epoch=state.leader_epoch + 1),
        state._replace(isr=state.isr[:1]),
        state._replace(zk_version=state.zk_version + 1),
        state._replace(controller_epoch=state.controller_epoch + 1),
        state._replace(leader=state.isr[1]),
    ):
        ctx.partition_states[a1] = changed
        assert lacking() == {"a"}, changed
    ctx.partition_states[a1] = state
    assert lacking() == frozenset()
    # Broker 4 comes back: b's offline replicas are no longer offline.
    ctx.live_brokers[4] = ctx.live_brokers[1]
    assert lacking() == {"b"}
    del ctx.live_brokers[4]
    # A topic being deleted is always sent (its partitions' leader becomes -2).
    ctx.topics_to_be_deleted.add("c")
    assert lacking() == {"c"}


def test_a_broker_that_missed_an_update_is_sent_the_topic_and_then_holds_it() -> None:
    ctx, broker = _cluster()
    a3 = TopicPartition("a", 3)
    before = ctx.partition_states[a3]
    ctx.partition_states[a3] = before._replace(isr=before.isr[:2], zk_version=before.zk_version + 1)
    ours = metadata_topic_digests(ctx, ["a", "b", "c"])
    assert topics_lacking(["a", "b", "c"], ours, _ask_digests(broker)) == {"a"}
    _apply_update(ctx, broker, [tp for tp in ctx.all_partitions() if tp.topic == "a"])
    assert topics_lacking(["a", "b", "c"], ours, _ask_digests(broker)) == frozenset()


def test_without_a_report_every_topic_is_sent() -> None:
    ours = {"a": b"x", "b": b"y"}
    assert topics_lacking(["a", "b", "c"], ours, None) == {"a", "b", "c"}
    assert topics_lacking(["a", "b", "c"], ours, {}) == {"a", "b", "c"}
    assert topics_lacking(["a", "b", "c"], ours, {"a": b"x", "b": b"y", "c": b"z"}) == {"c"}


def test_the_cache_digests_equal_a_fresh_computation_after_any_writes() -> None:
    rng = random.Random(13)
    cache = MetadataCache()
    plain: dict[TopicPartition, common_pb2.PartitionState] = {}
    for step in range(3000):
        tp = TopicPartition(rng.choice("xyz"), rng.randrange(20))
        action = rng.random()
        if action < 0.6:
            state = common_pb2.PartitionState(
                topic=tp.topic, partition=tp.partition, leader=rng.randrange(3), leader_epoch=step, isr=[1, 2]
            )
            cache[tp] = plain[tp] = state
        elif action < 0.9:
            cache.pop(tp, None)
            plain.pop(tp, None)
        elif action < 0.95:
            cache.setdefault(tp, common_pb2.PartitionState(topic=tp.topic, partition=tp.partition))
            plain.setdefault(tp, cache[tp])
        elif action < 0.96:
            # an UpdateMetadata slice's bulk write: topics in runs, a topic coming back later
            entries = [
                (
                    bulk := TopicPartition(rng.choice("xyz"), rng.randrange(20)),
                    common_pb2.PartitionState(topic=bulk.topic, partition=bulk.partition, leader_epoch=step, isr=[1]),
                )
                for _ in range(rng.randrange(6))
            ]
            cache.set_many(entries)
            plain.update(entries)
        elif action < 0.97:
            cache.digests()  # made, then invalidated by later writes
        elif action < 0.999:
            cache.refresh_digests(rng.randrange(1, 30))  # a background slice
        else:
            cache.clear()
            plain.clear()
        if step % 97 == 0:
            assert cache.digests() == MetadataCache(plain).digests()
    assert cache.digests() == MetadataCache(plain).digests()
    assert set(cache.digests()) == {tp.topic for tp in plain}


def test_a_standbys_digest_counts_only_while_nothing_was_written_and_its_brokers_are_live() -> None:
    ctx, _broker = _cluster()
    computed = metadata_topic_digests(ctx, ["a", "b", "c"])
    ctx.hand_over_metadata_digests({"a": (b"standby-a", frozenset({1, 2, 3})), "b": (b"standby-b", frozenset({1, 4}))})
    got = metadata_topic_digests(ctx, ["a", "b", "c"])
    # b names dead broker 4: its digest would be of fields without offline replicas.
    assert got == {**computed, "a": b"standby-a"}
    ctx.topics_to_be_deleted.add("a")
    assert "a" not in metadata_topic_digests(ctx, ["a", "b", "c"])
    ctx.topics_to_be_deleted.discard("a")
    ctx.partition_states[TopicPartition("c", 0)] = ctx.partition_states[TopicPartition("c", 0)]
    assert metadata_topic_digests(ctx, ["a", "b", "c"]) == computed  # a write: the hint is gone
    ctx.hand_over_metadata_digests({"a": (b"standby-a", frozenset({1, 2, 3}))})
    ctx.set_assignment(TopicPartition("c", 2), ctx.assignments["c"][0])
    assert metadata_topic_digests(ctx, ["a"]) == {"a": computed["a"]}


def test_an_update_applies_its_partitions_in_order_deletions_included() -> None:
    """A deleted topic's partition (leader -2) leaves the cache where the request has it: a
    state before it is removed, one after it stays."""
    broker = BrokerState(broker_id=1, broker_epoch=3)

    def state(topic: str, partition: int, leader: int) -> common_pb2.PartitionState:
        return common_pb2.PartitionState(topic=topic, partition=partition, leader=leader, leader_epoch=1, isr=[1])

    request = broker_pb2.UpdateMetadataRequest(
        controller_id=9,
        controller_epoch=1,
        broker_epoch=3,
        partition_states=[
            state("a", 0, 1),
            state("a", 1, 1),
            state("b", 0, 1),
            state("a", 0, LEADER_DURING_DELETE),
            state("b", 1, LEADER_DURING_DELETE),
            state("b", 1, 2),
            state("c", 0, 1),
        ],
    )
    assert replica_manager.apply_update_metadata(broker, request).applied
    assert {tp: s.leader for tp, s in broker.metadata.items()} == {
        TopicPartition("a", 1): 1,
        TopicPartition("b", 0): 1,
        TopicPartition("b", 1): 2,
        TopicPartition("c", 0): 1,
    }
    assert broker.metadata.digests() == MetadataCache(dict(broker.metadata)).digests()
