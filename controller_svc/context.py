"""ControllerContext: the active controller's in-memory cache of cluster metadata.

No I/O. Only the event consumer task reads or changes it (one owner of state).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller_svc.model import BrokerInfo, LeaderIsrAndControllerEpoch, TopicPartition


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


@dataclass
class ControllerContext:
    epoch: int = 0
    epoch_zk_version: int = -1
    live_brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    shutting_down_broker_ids: set[int] = field(default_factory=set)
    # topic -> partition -> replicas in assignment order
    assignments: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)
    partition_states: dict[TopicPartition, LeaderIsrAndControllerEpoch] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (
            f"ControllerContext(epoch={self.epoch}, live_brokers={sorted(self.live_brokers)}, "
            f"topics={len(self.assignments)}, partitions={self.partition_count})"
        )

    @property
    def partition_count(self) -> int:
        return sum(len(p) for p in self.assignments.values())

    def broker_epoch(self, broker_id: int) -> int:
        info = self.live_brokers.get(broker_id)
        return info.epoch if info is not None else -1

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.assignments.get(tp.topic, {}).get(tp.partition, ())

    def all_partitions(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, parts in self.assignments.items() for p in parts]

    def offline_replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return tuple(r for r in self.replicas(tp) if r not in self.live_brokers)

    def reset(self) -> None:
        self.epoch = 0
        self.epoch_zk_version = -1
        self.live_brokers.clear()
        self.shutting_down_broker_ids.clear()
        self.assignments.clear()
        self.partition_states.clear()
