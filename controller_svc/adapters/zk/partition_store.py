"""Partition-state znodes for the state machines: batched, fenced, conditional writes.

Creates and updates go out as multis of bounded size, each behind the controller-epoch
check (so a zombie controller writes nothing). An update whose znode version moved
(a broker changed the ISR, KIP-497's path in ZooKeeper mode) is reported back as a
conflict; the rest of its multi is resubmitted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controller_svc.adapters.zk import codecs, loads, paths
from controller_svc.adapters.zk.client import CreateOp, SetDataOp, ZkOp
from controller_svc.adapters.zk.store import DEFAULT_MAX_OPS_PER_MULTI, ControllerZkStore
from controller_svc.common.errors import (
    ControllerError,
    ControllerMovedError,
    ZkBadVersionError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkUnavailableError,
)
from controller_svc.common.model import LeaderIsrAndControllerEpoch, TopicPartition, sorted_partitions

# Multis of state writes outstanding at once (each up to DEFAULT_MAX_OPS_PER_MULTI ops, about
# 100 KB): enough to keep ZooKeeper's commit pipeline full, few enough to bound memory.
MULTIS_IN_FLIGHT = 8


@dataclass
class WriteResult:
    written: dict[TopicPartition, int] = field(default_factory=dict)  # new zkVersion
    conflicts: set[TopicPartition] = field(default_factory=set)  # BadVersion / NodeExists / NoNode
    # ZooKeeper failed a multi (no answer even after retrying on the same session, or refused
    # while others committed): the partitions in `written` are committed all the same, and the caller must act on them
    # (send their requests) before raising this (Kafka's retryRequestsUntilConnected never
    # drops a committed write's effect).
    error: ControllerError | None = None

    def raise_error(self) -> None:
        if self.error is not None:
            raise self.error


class ZkPartitionStateStore:
    def __init__(self, store: ControllerZkStore, max_ops: int = DEFAULT_MAX_OPS_PER_MULTI) -> None:
        self.store = store
        self.max_ops = max_ops

    def __repr__(self) -> str:
        return f"ZkPartitionStateStore(max_ops={self.max_ops})"

    async def read(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, LeaderIsrAndControllerEpoch | None]:
        state_paths = [paths.partition_state_path(tp.topic, tp.partition) for tp in partitions]
        reads = await self.store.zk.get_many(state_paths)
        # Gone or corrupt (logged and counted): None.
        return dict(zip(partitions, loads.decode_state_reads(partitions, state_paths, reads), strict=True))

    async def read_topic_configs(self, topics: Sequence[str]) -> dict[str, dict[str, str]]:
        """The topics' /config/topics znodes as ZooKeeper holds them now (a topic without one,
        or with a corrupt one, is absent: the cluster default applies)."""
        config_paths = [f"{paths.CONFIG_TOPICS}/{t}" for t in topics]
        reads = await self.store.zk.get_many(config_paths)
        configs: dict[str, dict[str, str]] = {}
        for topic, got in zip(topics, reads, strict=True):
            config = loads.decode_config_read(topic, got) if got is not None else None  # corrupt: logged, counted
            if config is not None:
                configs[topic] = config
        return configs

    async def create(self, states: Mapping[TopicPartition, LeaderIsrAndControllerEpoch]) -> WriteResult:
        """Create state znodes (and their parents). NodeExists on a state is a conflict."""
        result = WriteResult()
        partitions = sorted_partitions(states)
        await self._ensure_parents(partitions)
        ops: list[tuple[TopicPartition, ZkOp]] = [
            (
                tp,
                CreateOp(paths.partition_state_path(tp.topic, tp.partition), codecs.encode_partition_state(states[tp])),
            )
            for tp in partitions
        ]
        await self._run(ops, result, created=True)
        return result

    async def update(self, states: Mapping[TopicPartition, LeaderIsrAndControllerEpoch]) -> WriteResult:
        """Conditional setData on each state znode at the version in `states`."""
        result = WriteResult()
        ops: list[tuple[TopicPartition, ZkOp]] = [
            (
                tp,
                SetDataOp(
                    paths.partition_state_path(tp.topic, tp.partition),
                    codecs.encode_partition_state(states[tp]),
                    states[tp].zk_version,
                ),
            )
            for tp in sorted_partitions(states)
        ]
        await self._run(ops, result, created=False)
        return result

    async def _run(self, ops: list[tuple[TopicPartition, ZkOp]], result: WriteResult, created: bool) -> None:
        """The ops in multis of at most `max_ops`, up to `MULTIS_IN_FLIGHT` of them outstanding on
        the session at once. Sent one after another, each multi waited for its own round trip
        and its own commit (ZooKeeper group-commits the transactions it has queued, so
        pipelined multis share log syncs). Safe because the multis touch disjoint znodes and each
        carries the epoch check: a conflict in one leaves the others alone, and once the epoch
        moves every multi behind it fails at the check (ZooKeeper applies one session's requests
        in order)."""
        chunks = [ops[i : i + self.max_ops] for i in range(0, len(ops), self.max_ops)]
        if len(chunks) <= 1:
            for chunk in chunks:
                await self._run_chunk(chunk, result, created)
            return
        in_flight = asyncio.Semaphore(MULTIS_IN_FLIGHT)

        async def bounded(chunk: list[tuple[TopicPartition, ZkOp]]) -> None:
            async with in_flight:
                await self._run_chunk(chunk, result, created)

        outcomes = await asyncio.gather(*(bounded(c) for c in chunks), return_exceptions=True)
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        if not failures:
            return
        # A moved controller outranks any other failure: the caller must resign. Anything but
        # a ZooKeeper error is a bug, raised as it is.
        moved = [f for f in failures if isinstance(f, ControllerMovedError)]
        bugs = [f for f in failures if not isinstance(f, ControllerError)]
        refused = [f for f in failures if isinstance(f, ControllerError)]
        if moved or bugs:
            raise (moved or bugs)[0]
        # ZooKeeper refused a multi (NoAuth, say) while others committed: reported like a
        # multi left unanswered, so the caller acts on `written` before raising it.
        if result.error is None:
            result.error = refused[0]

    async def _run_chunk(self, chunk: list[tuple[TopicPartition, ZkOp]], result: WriteResult, created: bool) -> None:
        while chunk:
            if result.error is not None:
                return  # ZooKeeper stopped answering: the caller raises once it has acted on `written`
            try:
                results = await self.store.fenced_multi([op for _, op in chunk])
            except ZkUnavailableError as e:
                result.error = e
                return
            except (ZkBadVersionError, ZkNodeExistsError, ZkNoNodeError) as e:
                tp, _ = chunk[e.op_index]
                result.conflicts.add(tp)
                chunk = chunk[: e.op_index] + chunk[e.op_index + 1 :]
                continue
            for (tp, _), op_result in zip(chunk, results, strict=True):
                # A create inside a multi comes back without a stat: a new znode is at version 0.
                result.written[tp] = 0 if created else (op_result.stat.version if op_result.stat else 0)
            chunk = []

    async def _ensure_parents(self, partitions: Sequence[TopicPartition]) -> None:
        """/brokers/topics/<t>/partitions and .../<p>, behind the epoch check, tolerating
        ones that exist (a previous controller may have died half-way)."""
        topics = sorted({tp.topic for tp in partitions})
        parents = [paths.partitions_path(t) for t in topics] + [
            paths.partition_path(tp.topic, tp.partition) for tp in partitions
        ]
        existing = await self.store.zk.get_many(parents)
        missing = [p for p, got in zip(parents, existing, strict=True) if got is None]
        ops: list[tuple[TopicPartition, ZkOp]] = [(TopicPartition(p, 0), CreateOp(p)) for p in missing]
        scratch = WriteResult()
        await self._run(ops, scratch, created=True)  # NodeExists here just means someone created it first
