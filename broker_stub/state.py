"""Everything a broker stub knows: identity and epochs, metadata cache, partition roles.

Owned by the broker's gRPC handlers, which apply one control request at a time.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import NamedTuple

from controller_svc.common.model import TopicPartition
from kcontroller.v1 import common_pb2


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


@dataclass
class BrokerState:
    broker_id: int
    broker_epoch: int = -1
    registered: bool = False
    controller_epoch: int = 0
    controller_id: int = -1
    controller_endpoint: str = ""
    live_brokers: dict[int, common_pb2.LiveBroker] = field(default_factory=dict)
    metadata: dict[TopicPartition, common_pb2.PartitionState] = field(default_factory=dict)
    roles: dict[TopicPartition, PartitionRole] = field(default_factory=dict)
    update_metadata_count: int = 0
    log_dirs: tuple[str, ...] = ("data-0",)
    offline_log_dirs: set[str] = field(default_factory=set)
    # (partition, follower) pairs the leader treats as lagging (debug RPC)
    lagging: set[tuple[TopicPartition, int]] = field(default_factory=set)
    # Bumped on every change that can make a follower eligible to rejoin an ISR, so the
    # leader's ISR maintenance rescans only when something changed.
    generation: int = 0

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

    def partitions_led(self) -> int:
        return sum(1 for r in self.roles.values() if r.role == "leader")
