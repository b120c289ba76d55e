"""ControllerContext: the active controller's in-memory cache of cluster metadata.

No I/O. Only the event consumer task reads or changes it (one owner of state).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, TypeVar

from controller_svc.common.model import (
    BrokerInfo,
    LeaderIsrAndControllerEpoch,
    PartitionAndReplica,
    ReplicaAssignment,
    TopicPartition,
)
from controller_svc.core.metadata_encoding import EncodedStates
from controller_svc.core.tracked import TopicAssignments, TopicKeyed

_T = TypeVar("_T")


def _partitions_per_broker(parts: dict[int, ReplicaAssignment]) -> dict[int, list[int]]:
    """Broker -> the partitions of `parts` with a replica on it."""
    by_broker: dict[int, list[int]] = {}
    for p, a in parts.items():
        for r in a.replicas:
            held = by_broker.get(r)
            if held is None:
                by_broker[r] = [p]
            else:
                held.append(p)
    return by_broker


@dataclass(frozen=True, slots=True)
class BrokerDiff:
    new: frozenset[int]
    dead: frozenset[int]
    bounced: frozenset[int]
    changed_endpoints: frozenset[int]

    def __bool__(self) -> bool:
        return bool(self.new or self.dead or self.bounced or self.changed_endpoints)


def diff_brokers(known: dict[int, BrokerInfo], current: dict[int, BrokerInfo]) -> BrokerDiff:
    """Kafka's BrokerChange diff: a broker whose registration czxid went up is *bounced*
    (KAFKA-5845): handled as a failure followed by a start-up."""
    new = current.keys() - known.keys()
    dead = known.keys() - current.keys()
    both = current.keys() & known.keys()
    bounced = {b for b in both if current[b].epoch > known[b].epoch}
    changed = {b for b in both - bounced if current[b].endpoints != known[b].endpoints}
    return BrokerDiff(frozenset(new), frozenset(dead), frozenset(bounced), frozenset(changed))


@dataclass(frozen=True, slots=True)
class TopicReplicaKeys:
    """Every replica of a topic as the replica state machine keys it, the brokers named, and
    per broker the partitions it holds a replica of (a warm standby makes them while it waits,
    for the failover's passes over 3M replicas at 1M partitions)."""

    assignments: dict[int, ReplicaAssignment]
    keys: tuple[PartitionAndReplica, ...]
    brokers: frozenset[int]
    partitions: tuple[TopicPartition, ...] = ()  # in the order of `assignments`
    partitions_by_broker: dict[int, tuple[int, ...]] = field(default_factory=dict)


def topic_replica_keys(topic: str, assignments: dict[int, ReplicaAssignment]) -> TopicReplicaKeys:
    new = tuple.__new__  # the NamedTuples without their Python-level __new__
    keys: list[PartitionAndReplica] = []
    partitions: list[TopicPartition] = []
    by_broker: dict[int, list[int]] = {}
    for partition, assignment in assignments.items():
        tp = new(TopicPartition, (topic, partition))
        partitions.append(tp)
        for b in assignment.replicas:
            keys.append(new(PartitionAndReplica, (tp, b)))
            held = by_broker.get(b)
            if held is None:
                by_broker[b] = [partition]
            else:
                held.append(partition)
    return TopicReplicaKeys(
        assignments,
        tuple(keys),
        frozenset(by_broker),
        tuple(partitions),
        {b: tuple(held) for b, held in by_broker.items()},
    )


@dataclass
class ControllerContext:
    epoch: int = 0
    epoch_zk_version: int = -1
    live_brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    shutting_down_broker_ids: set[int] = field(default_factory=set)
    # Both remember the topics written, for the imbalance gauge's incremental count (tracked.py).
    assignments: dict[str, dict[int, ReplicaAssignment]] = field(default_factory=TopicAssignments)
    partition_states: dict[TopicPartition, LeaderIsrAndControllerEpoch] = field(default_factory=TopicKeyed)
    # broker id -> partitions whose replica on that broker sits on a failed log dir
    replicas_on_offline_dirs: dict[int, set[TopicPartition]] = field(default_factory=dict)
    topics_to_be_deleted: set[str] = field(default_factory=set)
    topics_ineligible_for_deletion: set[str] = field(default_factory=set)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    topic_ids: dict[str, str] = field(default_factory=dict)
    # topic -> version of its znode that did not parse (reported once per version)
    malformed_topics: dict[str, int] = field(default_factory=dict)
    # every broker id this controller has seen registered (a reassignment may target a broker
    # that is down right now, but not one that never existed)
    known_broker_ids: set[int] = field(default_factory=set)
    # UpdateMetadata's encoded partition states (core/metadata_encoding.py): a cache, never a
    # source of truth; an entry counts only while its state and assignment are the ones above.
    encoded_partition_states: EncodedStates = field(default_factory=dict)
    # The same for partitions with offline replicas: (state, assignment, offline replicas as
    # encoded, field), valid for those very objects and that list.
    encoded_offline_partition_states: dict[
        TopicPartition, tuple[LeaderIsrAndControllerEpoch, ReplicaAssignment, list[int], bytes]
    ] = field(default_factory=dict)
    # From a warm standby, for the replica state machine's start-up only (then dropped): per
    # topic, the replica keys of its assignments and the brokers they name, made from the very
    # per-topic dict now in `assignments` (valid while that object is there unchanged).
    replica_keys_hint: dict[str, TopicReplicaKeys] = field(default_factory=dict)
    # From a warm standby with the hint above: the keys of these topics' hints -> the replica
    # state machine's online value, built while it waited; the machine adopts the dict.
    replica_states_hint: tuple[dict[PartitionAndReplica, Any], frozenset[str]] | None = None
    # From a warm standby: per topic, the digest of its UpdateMetadata states (made from its
    # cached encodings, every replica live) and the brokers it names; valid while no partition
    # state or assignment has been written since the hand-over (`metadata_digests_hint`).
    _metadata_digests_hint: dict[str, tuple[bytes, frozenset[int]]] = field(default_factory=dict, repr=False)
    _metadata_digests_hint_at: tuple[int, int] = (-1, -1)
    # topic -> its partitions whose leader is not the preferred replica (only topics with some)
    _imbalance_per_topic: dict[str, int] = field(default_factory=dict, repr=False)
    # topics whose imbalance a standby's hand-over did not count (recounted at the next call)
    _imbalance_uncounted: set[str] = field(default_factory=set, repr=False)
    # topic -> its partitions being reassigned (only topics with some)
    _reassigning_per_topic: dict[str, list[int]] = field(default_factory=dict, repr=False)
    # topic -> broker -> the topic's partitions with a replica on it (`_partitions_by_broker`)
    _by_broker_per_topic: dict[str, dict[int, list[int]]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.assignments, TopicAssignments):
            self.assignments = TopicAssignments(self.assignments)
        if not isinstance(self.partition_states, TopicKeyed):
            self.partition_states = TopicKeyed(self.partition_states)

    def __repr__(self) -> str:
        return (
            f"ControllerContext(epoch={self.epoch}, live_brokers={sorted(self.live_brokers)}, "
            f"shutting_down={sorted(self.shutting_down_broker_ids)}, topics={len(self.assignments)}, "
            f"partitions={self.partition_count})"
        )

    # --- brokers ---------------------------------------------------------------------------------

    @property
    def live_broker_ids(self) -> set[int]:
        """Live and not shutting down (ControllerContext.liveBrokerIds)."""
        return set(self.live_brokers) - self.shutting_down_broker_ids

    @property
    def live_or_shutting_down_broker_ids(self) -> set[int]:
        return set(self.live_brokers)

    def broker_epoch(self, broker_id: int) -> int:
        info = self.live_brokers.get(broker_id)
        return info.epoch if info is not None else -1

    def is_replica_online(self, broker_id: int, tp: TopicPartition, include_shutting_down: bool = False) -> bool:
        if broker_id not in self.live_brokers:
            return False
        if not include_shutting_down and broker_id in self.shutting_down_broker_ids:
            return False
        return tp not in self.replicas_on_offline_dirs.get(broker_id, ())

    def online_replicas(self, tp: TopicPartition, include_shutting_down: bool = False) -> set[int]:
        return {r for r in self.replicas(tp) if self.is_replica_online(r, tp, include_shutting_down)}

    # --- topics and partitions ---------------------------------------------------------------------

    @property
    def partition_count(self) -> int:
        return sum(len(p) for p in self.assignments.values())

    def assignment(self, tp: TopicPartition) -> ReplicaAssignment | None:
        return self.assignments.get(tp.topic, {}).get(tp.partition)

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        assignment = self.assignment(tp)
        return assignment.replicas if assignment is not None else ()

    def set_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        self.assignments.setdefault(tp.topic, {})[tp.partition] = assignment  # marks the topic

    def all_partitions(self) -> list[TopicPartition]:
        # The NamedTuple built by tuple.__new__ in C loops, a topic at a time (1M per cold failover).
        result: list[TopicPartition] = []
        for topic, parts in self.assignments.items():
            result.extend(map(tuple.__new__, repeat(TopicPartition), zip(repeat(topic), parts)))
        return result

    def partitions_for_topic(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in sorted(self.assignments.get(topic, {}))]

    def partitions_on_brokers(self, broker_ids: Iterable[int]) -> set[TopicPartition]:
        wanted = set(broker_ids)
        new = tuple.__new__  # the NamedTuple without its Python-level __new__
        return {
            new(TopicPartition, (t, p))
            for t, by_broker in self._partitions_by_broker().items()
            for b in wanted
            for p in by_broker.get(b, ())
        }

    def topics_on_brokers(self, broker_ids: Iterable[int]) -> set[str]:
        """The topics with a replica on any of `broker_ids`, from the per-topic index."""
        wanted = set(broker_ids)
        return {t for t, by_broker in self._partitions_by_broker().items() if not wanted.isdisjoint(by_broker)}

    def partitions_on_broker_by_topic(self, broker_id: int) -> list[tuple[str, list[int]]]:
        """(topic, its partitions with a replica on `broker_id`), both in order: what a caller
        that walks a broker's 600k partitions (1M-partition cluster) in slices needs, without
        building and sorting one set of them first."""
        index = self._partitions_by_broker()
        return sorted((t, sorted(held)) for t, by_broker in index.items() if (held := by_broker.get(broker_id)))

    def replicas_on_brokers(
        self, broker_ids: Iterable[int], topics: Iterable[str] | None = None
    ) -> set[PartitionAndReplica]:
        """The replicas on `broker_ids`, of `topics` only when given (those being deleted, after
        a broker failure: a walk of those topics, not of the 600k replicas a broker holds at 1M
        partitions)."""
        wanted = set(broker_ids)
        index = self._partitions_by_broker()
        new = tuple.__new__
        return {
            new(PartitionAndReplica, (new(TopicPartition, (t, p)), b))
            for t in (index if topics is None else topics)
            for b in wanted
            for p in index.get(t, {}).get(b, ())
        }

    def _partitions_by_broker(self) -> dict[str, dict[int, list[int]]]:
        """Topic -> broker -> the topic's partitions with a replica there, rebuilt only for the
        topics whose assignments were written since the last call: a broker's failure, start-up
        or controlled shutdown (each of its retries) scanned every assignment for its replicas
        (0.5 s at 1M partitions), as Kafka's partitionsOnBroker does."""
        return self._refresh_topic_index(self._by_broker_per_topic, TopicAssignments.BY_BROKER, _partitions_per_broker)

    def _refresh_topic_index(
        self,
        index: dict[str, _T],
        consumer: int,
        entry: Callable[[dict[int, ReplicaAssignment]], _T],
    ) -> dict[str, _T]:
        """An index kept per topic (`entry` of its assignments, the topic left out where that is
        empty), made again only for the topics written since `consumer`'s last call."""
        everything, written = self._tracked_assignments().take_dirty(consumer)
        if everything:
            index.clear()
        assignments = self.assignments
        for topic in assignments if everything else written:
            parts = assignments.get(topic)
            value = entry(parts) if parts else None
            if value:
                index[topic] = value
            else:
                index.pop(topic, None)
        return index

    def partitions_led_by(self, broker_ids: Iterable[int]) -> set[TopicPartition]:
        wanted = set(broker_ids)
        return {tp for tp, s in self.partition_states.items() if s.leader in wanted}

    def all_replicas(self, partitions: Iterable[TopicPartition]) -> set[PartitionAndReplica]:
        return {PartitionAndReplica(tp, r) for tp in partitions for r in self.replicas(tp)}

    def offline_replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return tuple(r for r in self.replicas(tp) if not self.is_replica_online(r, tp, include_shutting_down=True))

    @property
    def partitions_being_reassigned(self) -> set[TopicPartition]:
        """Kept per topic, rescanning only the topics whose assignments were written since the
        last call: a full scan of 1M assignments is 0.3 s, and this is read at failover by
        several steps, by the reassignment gauge after every operation and by each ISR
        change notification."""
        index = self._refresh_topic_index(
            self._reassigning_per_topic,
            TopicAssignments.REASSIGNING,
            lambda parts: [p for p, a in parts.items() if a.adding or a.removing],
        )
        return {TopicPartition(t, p) for t, partitions in index.items() for p in partitions}

    def is_known_broker(self, broker_id: int) -> bool:
        if broker_id in self.live_brokers or broker_id in self.known_broker_ids:
            return True
        return any(broker_id in a.replicas for parts in self.assignments.values() for a in parts.values())

    def is_topic_queued_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_be_deleted

    def unclean_election_enabled(self, topic: str, cluster_default: bool) -> bool:
        value = self.topic_configs.get(topic, {}).get("unclean.leader.election.enable")
        if value is None:
            return cluster_default
        return value.strip().lower() == "true"

    def hand_over_imbalance(self, counts: dict[str, int]) -> None:
        """A warm standby's imbalance counts per topic, made from the very states and
        assignments it just handed over: the gauge's next count recounts only the other topics
        and those written since (a full recount at 1M partitions was half a second of a
        failover)."""
        self._tracked_states().take_dirty()
        self._tracked_assignments().take_dirty(TopicAssignments.IMBALANCE)
        assignments = self.assignments
        self._imbalance_per_topic = {t: c for t, c in counts.items() if c and t in assignments}
        self._imbalance_uncounted = {t for t in assignments if t not in counts}

    def hand_over_metadata_digests(self, digests: dict[str, tuple[bytes, frozenset[int]]]) -> None:
        """A warm standby's digests, right after it handed over the states and assignments they
        were made from."""
        self._metadata_digests_hint = digests
        self._metadata_digests_hint_at = (self._tracked_states().writes, self._tracked_assignments().writes)

    def metadata_digests_hint(self) -> dict[str, tuple[bytes, frozenset[int]]]:
        """The standby's digests while they still describe the context: no partition state or
        assignment written since they were handed over (else none)."""
        now = (self._tracked_states().writes, self._tracked_assignments().writes)
        if now != self._metadata_digests_hint_at:
            self._metadata_digests_hint = {}
        return self._metadata_digests_hint

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions_for_topic(topic):
            self.partition_states.pop(tp, None)
            # The encoding cache would otherwise keep every deleted topic's partitions.
            self.encoded_partition_states.pop(tp, None)
            self.encoded_offline_partition_states.pop(tp, None)
            for offline in self.replicas_on_offline_dirs.values():
                offline.discard(tp)
        self.assignments.pop(topic, None)
        self.topic_configs.pop(topic, None)
        self.topic_ids.pop(topic, None)
        self.replica_keys_hint.pop(topic, None)
        self.replica_states_hint = None
        self.topics_to_be_deleted.discard(topic)
        self.topics_ineligible_for_deletion.discard(topic)

    def preferred_replica_imbalance_count(self) -> int:
        """Partitions whose leader is not their preferred (first) replica, not being deleted.
        Kept per topic and recounted only for the topics whose states or assignments were
        written since the last call (Kafka's ControllerContext.updatePartitionStateMetrics):
        a gauge refreshed after every operation, at 100k-1M partitions."""
        self.recount_imbalance()
        deleting = self.topics_to_be_deleted
        return sum(count for topic, count in self._imbalance_per_topic.items() if topic not in deleting)

    def recount_imbalance(self, budget: int | None = None) -> bool:
        """Recount the imbalance of the topics written since the last count, about `budget`
        partitions of them at most (whole topics); the others stay due for the next call.
        True when none is left: a caller that must not hold the loop (an operation that moved
        the leaders of every topic at 1M partitions) counts in steps, yielding between them."""
        per_topic = self._imbalance_per_topic
        states_all, states_dirty = self._tracked_states().take_dirty()
        assignments_all, assignments_dirty = self._tracked_assignments().take_dirty(TopicAssignments.IMBALANCE)
        uncounted, self._imbalance_uncounted = self._imbalance_uncounted, set()
        if states_all or assignments_all:
            per_topic.clear()
            topics: list[str] = list(self.assignments)
        else:
            topics = list(states_dirty | assignments_dirty | uncounted)
        states = self.partition_states
        assignments = self.assignments
        new = tuple.__new__  # the NamedTuple without its Python-level __new__
        counted = 0
        for i, topic in enumerate(topics):
            if budget is not None and counted >= budget:
                self._imbalance_uncounted.update(topics[i:])
                return False
            parts = assignments.get(topic)
            count = 0
            if parts:
                counted += len(parts)
                for partition, assignment in parts.items():
                    state = states.get(new(TopicPartition, (topic, partition)))
                    if state is not None and assignment.replicas and state.leader != assignment.replicas[0]:
                        count += 1
            if count:
                per_topic[topic] = count
            else:
                per_topic.pop(topic, None)
        return True

    def set_partition_states(self, states: Mapping[TopicPartition, LeaderIsrAndControllerEpoch]) -> None:
        """`partition_states[tp] = state` for each, each topic marked written once (a slice of
        elections)."""
        self._tracked_states().set_many(states)

    def _tracked_states(self) -> TopicKeyed[LeaderIsrAndControllerEpoch]:
        states = self.partition_states
        if not isinstance(states, TopicKeyed):  # replaced by a plain dict: tracked again
            states = self.partition_states = TopicKeyed(states)
        return states

    def _tracked_assignments(self) -> TopicAssignments:
        assignments = self.assignments
        if not isinstance(assignments, TopicAssignments):
            assignments = self.assignments = TopicAssignments(assignments)
        return assignments

    def reset(self) -> None:
        self.epoch = 0
        self.epoch_zk_version = -1
        self.live_brokers.clear()
        self.shutting_down_broker_ids.clear()
        self.assignments.clear()
        self.partition_states.clear()
        self.replicas_on_offline_dirs.clear()
        self.topics_to_be_deleted.clear()
        self.topics_ineligible_for_deletion.clear()
        self.topic_configs.clear()
        self.topic_ids.clear()
        self.malformed_topics.clear()
        self.known_broker_ids.clear()
        self.encoded_partition_states.clear()
        self.encoded_offline_partition_states.clear()
        self.replica_keys_hint.clear()
        self.replica_states_hint = None
        self._metadata_digests_hint = {}
        self._imbalance_per_topic.clear()
        self._imbalance_uncounted.clear()
        self._reassigning_per_topic.clear()
        self._by_broker_per_topic.clear()
