"""Dicts of the controller's context that keep their gauges' counts as they are written.

The offline-partition and preferred-replica-imbalance gauges are refreshed after every
operation. Recounted by full scans, that is O(partitions) per operation: at 1M partitions,
creating one 1000-partition topic cost 0.3 s of full scans (profiled during the 1M benchmark's
set-up, where it made set-up quadratic). Kafka keeps both counts incrementally
(ControllerContext.updatePartitionStateMetrics, called by every setter of a partition's state,
leadership or assignment); here the dicts themselves do it, so that no writer can forget to:

- `TopicKeyed` (partition states, keyed by TopicPartition) and `TopicAssignments` (keyed by
  topic) remember which topics were written since their owner last asked (`take_dirty`); the
  imbalance count recounts only those topics.
- `CountedStates` (the partition state machine's states) counts, per topic, the entries whose
  value is one chosen state, exactly, on every write.

They are dict subclasses so that every read (`get`, `[]`, `in`, iteration: the hot loops of
a failover) stays dict's own C code; only writes pay a Python call.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from typing import Any, Generic, TypeVar

from controller_svc.common.model import ReplicaAssignment, TopicPartition
from controller_svc.common.observed_dict import MISSING, ObservedDict

V = TypeVar("V")


K = TypeVar("K")


class _DirtyTopics(dict[K, V], Generic[K, V]):
    """A dict that remembers, for each of its `CONSUMERS` readers, the topics of the keys
    written since that reader's last `take_dirty`."""

    __slots__ = ("_all_dirty", "_dirty", "writes")
    CONSUMERS = 1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._dirty: list[set[str]] = [set() for _ in range(self.CONSUMERS)]
        self._all_dirty = [True] * self.CONSUMERS
        # Counts every write: equal counts mean nothing was written in between.
        self.writes = 0

    @staticmethod
    def _topic_of(key: Any) -> str:
        raise NotImplementedError

    def take_dirty(self, consumer: int = 0) -> tuple[bool, set[str]]:
        """(everything changed, the topics written) since this consumer's last call."""
        result = (self._all_dirty[consumer], self._dirty[consumer])
        self._all_dirty[consumer], self._dirty[consumer] = False, set()
        return result

    def _mark(self, key: Any) -> None:
        self.writes += 1
        topic = self._topic_of(key)
        for dirty in self._dirty:
            dirty.add(topic)

    def _mark_all(self) -> None:
        self.writes += 1
        self._all_dirty = [True] * self.CONSUMERS

    def __setitem__(self, key: K, value: V) -> None:
        self._mark(key)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: K) -> None:
        self._mark(key)
        dict.__delitem__(self, key)

    def pop(self, key: K, default: Any = MISSING) -> Any:
        self._mark(key)
        return dict.pop(self, key) if default is MISSING else dict.pop(self, key, default)

    def popitem(self) -> tuple[K, V]:
        key, value = dict.popitem(self)
        self._mark(key)
        return key, value

    def setdefault(self, key: K, default: Any = None) -> Any:
        self._mark(key)
        return dict.setdefault(self, key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        # The bulk write of a load (1M partitions at once): dict's own update, and one recount
        # of everything next time, which a load needs anyway.
        dict.update(self, *args, **kwargs)
        self._mark_all()

    def __ior__(self, other: Any) -> _DirtyTopics[K, V]:  # type: ignore[override,misc]
        self.update(other)
        return self

    def clear(self) -> None:
        dict.clear(self)
        self._mark_all()


class TopicKeyed(_DirtyTopics[TopicPartition, V]):
    """Keyed by partition (the partition states)."""

    __slots__ = ()
    _topic_of = staticmethod(operator.itemgetter(0))  # type: ignore[assignment]  # C, per write

    def set_many(self, entries: Mapping[TopicPartition, V]) -> None:
        """Each entry as `self[key] = value` would write it, with each topic marked once: an
        election slice writes a thousand states of one or a few topics."""
        if not entries:
            return
        self.writes += len(entries)
        topics = set(map(self._topic_of, entries))
        for dirty in self._dirty:
            dirty |= topics
        dict.update(self, entries)


class TopicAssignments(_DirtyTopics[str, dict[int, ReplicaAssignment]]):
    """Topic -> partition -> assignment. A write into a topic's own dict is not seen:
    ControllerContext.set_assignment, the one place that does it, marks the topic itself.
    Three readers: the imbalance count (IMBALANCE), the index of reassignments (REASSIGNING) and
    the index of partitions per broker (BY_BROKER)."""

    __slots__ = ()
    CONSUMERS = 3
    IMBALANCE = 0
    REASSIGNING = 1
    BY_BROKER = 2

    @staticmethod
    def _topic_of(key: Any) -> str:
        return str(key)


class CountedStates(ObservedDict[TopicPartition, V], Generic[V]):
    """A dict keyed by partition that counts, per topic, the entries whose value is `counted`
    (compared by identity: enum members)."""

    __slots__ = ("counted", "per_topic")

    def __init__(self, counted: V) -> None:
        super().__init__()
        self.counted = counted
        self.per_topic: dict[str, int] = {}

    def _count(self, topic: str, delta: int) -> None:
        remaining = self.per_topic.get(topic, 0) + delta
        if remaining:
            self.per_topic[topic] = remaining
        else:
            self.per_topic.pop(topic, None)

    def __setitem__(self, key: TopicPartition, value: V) -> None:
        # ObservedDict's contract in one call (the state machines write 1M states at failover).
        counted = self.counted
        previous = dict.get(self, key, MISSING)
        if (previous is counted) is not (value is counted):
            self._count(key[0], 1 if value is counted else -1)
        dict.__setitem__(self, key, value)

    def _added(self, key: TopicPartition, value: V) -> None:
        if value is self.counted:
            self._count(key[0], 1)

    def _removed(self, key: TopicPartition, value: V) -> None:
        if value is self.counted:
            self._count(key[0], -1)

    def _cleared(self) -> None:
        self.per_topic.clear()

    def set_many(self, keys: Iterable[TopicPartition], value: V) -> None:
        """`self[key] = value` for each key, counting in one pass (an election slice)."""
        counted = self.counted
        get = dict.get
        per_topic = self.per_topic
        for key in keys:
            previous = get(self, key, MISSING)
            if (previous is counted) is not (value is counted):
                delta = 1 if value is counted else -1
                remaining = per_topic.get(key[0], 0) + delta
                if remaining:
                    per_topic[key[0]] = remaining
                else:
                    per_topic.pop(key[0], None)
            dict.__setitem__(self, key, value)

    def replace_all(self, entries: dict[TopicPartition, V]) -> None:
        """Every entry at once (a failover's start-up: 1M partitions), by dict's own update and
        one count of the `counted` ones, instead of a Python call per entry."""
        dict.clear(self)
        dict.update(self, entries)
        per_topic: dict[str, int] = {}
        counted = self.counted
        for key, value in entries.items():
            if value is counted:
                per_topic[key[0]] = per_topic.get(key[0], 0) + 1
        self.per_topic = per_topic
