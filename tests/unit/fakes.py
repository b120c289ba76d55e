"""In-memory fakes of the core's ports (unit tests of the pure core only)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller_svc.common.errors import ControllerError, ZkUnavailableError
from controller_svc.common.model import (
    BrokerInfo,
    EndPoint,
    LeaderIsrAndControllerEpoch,
    ReplicaAssignment,
    TopicPartition,
)
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.core.context import ControllerContext
from controller_svc.core.request_batch import PreSerialized


@dataclass
class Outcome:
    written: dict[TopicPartition, int] = field(default_factory=dict)
    conflicts: set[TopicPartition] = field(default_factory=set)
    error: ControllerError | None = None

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error


class FakePartitionStore:
    """Partition-state znodes with versions; `bump` simulates a broker's ISR write."""

    def __init__(self) -> None:
        self.znodes: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
        self.writes = 0
        # After this many writes, ZooKeeper stops answering: the rest of an update fails (as a
        # later multi of a large write does), what was written stays written.
        self.unavailable_after: int | None = None
        # /config/topics as ZooKeeper holds it (the controller's cache may differ)
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.config_reads = 0

    async def read_topic_configs(self, topics: Sequence[str]) -> dict[str, dict[str, str]]:
        self.config_reads += 1
        return {t: dict(self.topic_configs[t]) for t in topics if t in self.topic_configs}

    def bump(self, tp: TopicPartition, isr: tuple[int, ...]) -> None:
        s = self.znodes[tp]
        self.znodes[tp] = LeaderIsrAndControllerEpoch(
            s.leader, s.leader_epoch, isr, s.zk_version + 1, s.controller_epoch
        )

    async def read(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, LeaderIsrAndControllerEpoch | None]:
        return {tp: self.znodes.get(tp) for tp in partitions}

    async def create(self, states: Mapping[TopicPartition, LeaderIsrAndControllerEpoch]) -> Outcome:
        outcome = Outcome()
        for tp, state in states.items():
            if tp in self.znodes:
                outcome.conflicts.add(tp)
                continue
            self.znodes[tp] = LeaderIsrAndControllerEpoch(
                state.leader, state.leader_epoch, state.isr, 0, state.controller_epoch
            )
            outcome.written[tp] = 0
            self.writes += 1
        return outcome

    async def update(self, states: Mapping[TopicPartition, LeaderIsrAndControllerEpoch]) -> Outcome:
        outcome = Outcome()
        for tp, state in states.items():
            if self.unavailable_after is not None and self.writes >= self.unavailable_after:
                outcome.error = ZkUnavailableError("ZooKeeper gave no answer (fake)")
                break
            current = self.znodes.get(tp)
            if current is None or current.zk_version != state.zk_version:
                outcome.conflicts.add(tp)
                continue
            version = current.zk_version + 1
            self.znodes[tp] = LeaderIsrAndControllerEpoch(
                state.leader, state.leader_epoch, state.isr, version, state.controller_epoch
            )
            outcome.written[tp] = version
            self.writes += 1
        return outcome


class RecordingSink:
    def __init__(self) -> None:
        self.sent: list[tuple[int, str, Any]] = []

    def send(self, broker_id: int, api: str, request: Any, callback: Any) -> bool:
        if isinstance(request, PreSerialized):
            # What the broker will parse: the per-broker head and the body, concatenated.
            request = request.parse()
        self.sent.append((broker_id, api, request))
        return True


def broker(broker_id: int, epoch: int | None = None) -> BrokerInfo:
    return BrokerInfo(
        broker_id,
        (EndPoint("PLAINTEXT", "h", 9000 + broker_id, "PLAINTEXT"),),
        None,
        epoch if epoch is not None else 100 + broker_id,
    )


def context(
    live: Sequence[int], assignments: Mapping[str, Mapping[int, Sequence[int]]], epoch: int = 3
) -> ControllerContext:
    ctx = ControllerContext(epoch=epoch, epoch_zk_version=epoch)
    ctx.live_brokers = {b: broker(b) for b in live}
    for topic, parts in assignments.items():
        ctx.assignments[topic] = {p: ReplicaAssignment(tuple(r)) for p, r in parts.items()}
    return ctx


def null_log() -> StateChangeLog:
    return StateChangeLog(None, "test")
