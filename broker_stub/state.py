"""Everything a broker stub knows: identity and epochs, metadata cache, partition roles.

Owned by the broker's gRPC handlers, which apply one control request at a time.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import NamedTuple

from controller_svc.common.metadata_digest import as_field, topic_digest
from controller_svc.common.model import TopicPartition
from controller_svc.common.observed_dict import ObservedDict
from kcontroller.v1 import common_pb2

_NONE: frozenset[TopicPartition] = frozenset()


class PartitionRole(NamedTuple):
    """A NamedTuple (immutable; changed with `_replace`): a LeaderAndIsr makes one per
    partition, and a frozen dataclass's __init__ runs as Python code."""

    role: str  # leader | follower | stopped | deleted
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1


class RoleTable(ObservedDict[TopicPartition, PartitionRole]):
    """The broker's partition roles, with the counts its gauges and its ISR maintenance need
    kept as roles are written: each control request used to rescan every role (twice for the
    gauges, once more for the leader's under-replicated partitions), which at 600k replicas per
    broker made every request cost a full scan."""

    __slots__ = ("broker_id", "epochs_by_topic", "hosted", "led", "out_of_isr", "under_replicated")

    def __init__(self, broker_id: int, roles: dict[TopicPartition, PartitionRole] | None = None) -> None:
        super().__init__()
        self.broker_id = broker_id
        self.hosted = 0  # roles other than stopped
        self.led = 0  # leader, and the leader is this broker
        # led by this broker (role leader) with an ISR shorter than the replicas
        self.under_replicated: set[TopicPartition] = set()
        # the same partitions by each replica missing from their ISR: the ISR maintenance looks
        # only at those of live followers (a dead broker's, 150k per leader at 1M partitions,
        # used to be scanned five times a second for as long as it stayed dead)
        self.out_of_isr: dict[int, set[TopicPartition]] = {}
        # topic -> partition -> leader epoch, of the leader and follower roles (a failover's
        # DescribeReplicaEpochs: 600k replicas per broker at 1M partitions)
        self.epochs_by_topic: dict[str, dict[int, int]] = {}
        for tp, role in (roles or {}).items():
            self[tp] = role

    def _account(self, tp: TopicPartition, role: PartitionRole, sign: int) -> None:
        kind = role.role
        if kind == "leader" or kind == "follower":
            epochs = self.epochs_by_topic.get(tp[0])
            if sign > 0:
                if epochs is None:
                    epochs = self.epochs_by_topic[tp[0]] = {}
                epochs[tp[1]] = role.leader_epoch
            elif epochs is not None:
                epochs.pop(tp[1], None)
                if not epochs:
                    del self.epochs_by_topic[tp[0]]
        if kind != "stopped":
            self.hosted += sign
        if kind == "leader":
            if role.leader == self.broker_id:
                self.led += sign
            isr = role.isr
            if len(isr) < len(role.replicas):
                if sign > 0:
                    self.under_replicated.add(tp)
                    for replica in role.replicas:
                        if replica not in isr:
                            missing = self.out_of_isr.get(replica)
                            if missing is None:
                                missing = self.out_of_isr[replica] = set()
                            missing.add(tp)
                else:
                    self.under_replicated.discard(tp)
                    for replica in role.replicas:
                        if replica not in isr:
                            missing = self.out_of_isr.get(replica)
                            if missing is not None:
                                missing.discard(tp)
                                if not missing:
                                    del self.out_of_isr[replica]

    def set_many(self, entries: Mapping[TopicPartition, PartitionRole]) -> None:
        """`self[tp] = role` for each entry, without the per-entry indirections (a LeaderAndIsr
        applies thousands at once). A role that keeps its kind and everything the counts
        depend on (a follower's new leader epoch or ISR, a leader's new epoch) changes only
        its epoch in the index, instead of leaving every count and joining it again."""
        get = dict.get
        setitem = dict.__setitem__
        account = self._account
        epochs_by_topic = self.epochs_by_topic
        for tp, role in entries.items():
            previous = get(self, tp)
            if previous is not None:
                kind = role.role
                if kind == previous.role and (
                    kind == "follower"
                    or (
                        kind == "leader"
                        and role.leader == previous.leader
                        and role.isr == previous.isr
                        and role.replicas == previous.replicas
                    )
                ):
                    setitem(self, tp, role)
                    epochs_by_topic[tp[0]][tp[1]] = role.leader_epoch
                    continue
                account(tp, previous, -1)
            setitem(self, tp, role)
            account(tp, role, 1)

    def _added(self, tp: TopicPartition, role: PartitionRole) -> None:
        self._account(tp, role, 1)

    def _removed(self, tp: TopicPartition, role: PartitionRole) -> None:
        self._account(tp, role, -1)

    def _cleared(self) -> None:
        self.hosted = self.led = 0
        self.under_replicated.clear()
        self.out_of_isr.clear()
        self.epochs_by_topic.clear()


class MetadataCache(ObservedDict[TopicPartition, common_pb2.PartitionState]):
    """The broker's metadata cache (Kafka's MetadataCache: the partition states of the last
    UpdateMetadata), keeping each state also as the field UpdateMetadata carries it, per topic,
    so that the digests a failover asks for (common/metadata_digest.py) cost a hash of the
    topics changed since the last question, not a serialization of the whole cache. A state
    written is serialized when its topic's digest is next made, not as it is applied: that was
    half of a broker's work applying a broker failure's UpdateMetadata, on cores the new
    leaders needed. The cached messages are never changed in place (a new UpdateMetadata
    replaces them)."""

    __slots__ = ("_digests", "_fields", "_stale")

    def __init__(self, entries: dict[TopicPartition, common_pb2.PartitionState] | None = None) -> None:
        super().__init__()
        # topic -> partition -> field, None until the topic's next digest serializes it
        self._fields: dict[str, dict[int, bytes | None]] = {}
        self._digests: dict[str, bytes] = {}  # topics unchanged since their digest was made
        self._stale: set[str] = set()  # topics written since their digest was made
        for tp, state in (entries or {}).items():
            self[tp] = state

    def __setitem__(self, tp: TopicPartition, state: common_pb2.PartitionState) -> None:
        # ObservedDict's contract in one call (a failover's UpdateMetadata writes 1M).
        dict.__setitem__(self, tp, state)
        self._added(tp, state)

    def set_many(self, entries: Iterable[tuple[TopicPartition, common_pb2.PartitionState]]) -> None:
        """`self[tp] = state` for each entry (an UpdateMetadata slice: thousands), the topic's
        bookkeeping once per run of entries of one topic (a request's partitions come sorted)."""
        setitem = dict.__setitem__
        fields_by_topic = self._fields
        topic: str | None = None
        fields: dict[int, bytes | None] = {}
        for tp, state in entries:
            setitem(self, tp, state)
            if tp[0] != topic:
                topic = tp[0]
                got = fields_by_topic.get(topic)
                fields = fields_by_topic[topic] = {} if got is None else got
                self._digests.pop(topic, None)
                self._stale.add(topic)
            fields[tp[1]] = None

    def _added(self, tp: TopicPartition, state: common_pb2.PartitionState) -> None:
        topic = tp[0]
        fields = self._fields.get(topic)
        if fields is None:
            fields = self._fields[topic] = {}
        fields[tp[1]] = None
        self._digests.pop(topic, None)
        self._stale.add(topic)

    def _removed(self, tp: TopicPartition, _state: common_pb2.PartitionState) -> None:
        topic = tp[0]
        fields = self._fields.get(topic)
        if fields is not None:
            fields.pop(tp[1], None)
            if not fields:
                del self._fields[topic]
        self._digests.pop(topic, None)
        self._stale.add(topic)

    def _cleared(self) -> None:
        self._fields.clear()
        self._digests.clear()
        self._stale.clear()

    @property
    def stale_digests(self) -> int:
        return len(self._stale)

    def refresh_digests(self, max_partitions: int | None = None) -> None:
        """Make the digests of topics written since theirs was made: all of them, or topics
        until about `max_partitions` partitions were hashed (a background slice)."""
        done = 0
        get = dict.__getitem__
        new = tuple.__new__
        while self._stale and (max_partitions is None or done < max_partitions):
            topic = self._stale.pop()
            fields = self._fields.get(topic)
            if fields is None:
                continue
            ordered: list[bytes] = []
            for p in sorted(fields):
                field_ = fields[p]
                if field_ is None:
                    field_ = fields[p] = as_field(get(self, new(TopicPartition, (topic, p))).SerializeToString())
                ordered.append(field_)
            self._digests[topic] = topic_digest(ordered)
            done += len(fields)

    def digests(self) -> dict[str, bytes]:
        """Topic -> the digest of its cached partition states, for every topic cached."""
        self.refresh_digests()
        return dict(self._digests)


@dataclass
class BrokerState:
    broker_id: int
    broker_epoch: int = -1
    registered: bool = False
    controller_epoch: int = 0
    controller_id: int = -1
    controller_endpoint: str = ""
    live_brokers: dict[int, common_pb2.LiveBroker] = field(default_factory=dict)
    # A dict given here becomes the broker's MetadataCache (__post_init__).
    metadata: MetadataCache = field(default_factory=MetadataCache)
    # A dict given here becomes the broker's RoleTable (__post_init__).
    roles: RoleTable = field(default_factory=lambda: RoleTable(-1))
    update_metadata_count: int = 0
    log_dirs: tuple[str, ...] = ("data-0",)
    offline_log_dirs: set[str] = field(default_factory=set)
    # (partition, follower) pairs the leader treats as lagging (debug RPC)
    lagging: set[tuple[TopicPartition, int]] = field(default_factory=set)
    # Bumped on every change that can make a follower eligible to rejoin an ISR, so the
    # leader's ISR maintenance rescans only when something changed.
    generation: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.roles, RoleTable) or self.roles.broker_id != self.broker_id:
            self.roles = RoleTable(self.broker_id, dict(self.roles))
        if not isinstance(self.metadata, MetadataCache):
            self.metadata = MetadataCache(self.metadata)

    def __repr__(self) -> str:
        return (
            f"BrokerState(id={self.broker_id}, epoch={self.broker_epoch}, controller={self.controller_id}"
            f"@{self.controller_epoch}, partitions={len(self.roles)})"
        )

    def leader_epoch(self, tp: TopicPartition) -> int | None:
        role = self.roles.get(tp)
        return role.leader_epoch if role is not None else None

    def log_dir_of(self, tp: TopicPartition) -> str:
        """Where this broker keeps a partition: a stable hash over its log dirs."""
        return self.log_dirs[zlib.crc32(str(tp).encode()) % len(self.log_dirs)]

    def is_on_offline_dir(self, tp: TopicPartition) -> bool:
        return bool(self.offline_log_dirs) and self.log_dir_of(tp) in self.offline_log_dirs

    def under_replicated_led(self) -> set[TopicPartition]:
        """Partitions this broker leads whose ISR lacks some replica, not on a failed log dir."""
        led = self._roles().under_replicated
        return {tp for tp in led if not self.is_on_offline_dir(tp)} if self.offline_log_dirs else set(led)

    def led_missing(self, replica: int) -> Set[TopicPartition]:
        """Partitions this broker leads whose ISR lacks `replica` (the role table's index; not
        a copy, and not filtered for failed log dirs)."""
        return self._roles().out_of_isr.get(replica, _NONE)

    def hosted_and_led(self) -> tuple[int, int]:
        """Replicas not stopped, and partitions led by this broker (the gauges)."""
        roles = self._roles()
        return roles.hosted, roles.led

    def role_epochs_by_topic(self) -> dict[str, dict[int, int]]:
        """Topic -> partition -> leader epoch of the leader and follower roles."""
        return self._roles().epochs_by_topic

    def metadata_digests(self) -> dict[str, bytes]:
        return self._metadata().digests()

    def _metadata(self) -> MetadataCache:
        if not isinstance(self.metadata, MetadataCache):  # replaced by a plain dict: indexed again
            self.metadata = MetadataCache(self.metadata)
        return self.metadata

    def refresh_metadata_digests(self, max_partitions: int) -> bool:
        """A slice of the digests written since they were made; True when some are left."""
        cache = self._metadata()
        cache.refresh_digests(max_partitions)
        return cache.stale_digests > 0

    def _roles(self) -> RoleTable:
        if not isinstance(self.roles, RoleTable):  # replaced by a plain dict: indexed again
            self.roles = RoleTable(self.broker_id, self.roles)
        return self.roles
