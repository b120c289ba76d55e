"""A cold load's partition states (adapters/zk/loads.py): read a bounded number of batches ahead
of the one being decoded, every partition mapped to its own znode, missing ones dropped from
the context, corrupt ones skipped and counted."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from controller_svc.adapters.zk import codecs, loads, paths
from controller_svc.adapters.zk.client import ZnodeStat
from controller_svc.common import metrics
from controller_svc.common.model import LeaderIsrAndControllerEpoch, TopicPartition
from controller_svc.core.context import ControllerContext


class BatchedZk:
    """get_many answered a loop turn later, with the reads outstanding counted."""

    def __init__(self, znodes: dict[str, bytes]) -> None:
        self.znodes = znodes
        self.outstanding = 0
        self.most_outstanding = 0
        self.batches: list[int] = []

    async def get_many(self, wanted: Sequence[str]) -> list[tuple[bytes, ZnodeStat] | None]:
        self.outstanding += 1
        self.most_outstanding = max(self.most_outstanding, self.outstanding)
        self.batches.append(len(wanted))
        await asyncio.sleep(0)
        self.outstanding -= 1
        return [
            (self.znodes[p], ZnodeStat(version=7, czxid=0, mzxid=0, ephemeral_owner=0, num_children=0))
            if p in self.znodes
            else None
            for p in wanted
        ]


async def test_states_are_read_ahead_in_batches_and_each_lands_on_its_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(loads, "MULTI_READ_BATCH", 3)
    monkeypatch.setattr(loads, "READ_AHEAD", 2)
    partitions = [TopicPartition(t, p) for t in ("a", "b") for p in range(7)]
    znodes = {
        paths.partition_state_path(tp.topic, tp.partition): codecs.encode_partition_state(
            LeaderIsrAndControllerEpoch(tp.partition % 3 + 1, tp.partition, (1, 2), 0, 4)
        )
        for tp in partitions
        if tp != TopicPartition("b", 5)  # gone from ZooKeeper
    }
    znodes[paths.partition_state_path("a", 2)] = b"{not json"
    ctx = ControllerContext()
    ctx.partition_states[TopicPartition("b", 5)] = LeaderIsrAndControllerEpoch(1, 1, (1,), 1, 1)  # stale
    corrupt_before = metrics.CORRUPT_ZNODES.labels("partition_state")._value.get()
    zk = BatchedZk(znodes)
    await loads.load_partition_states(zk, ctx, partitions)  # type: ignore[arg-type]
    assert zk.batches == [3, 3, 3, 3, 2] and zk.most_outstanding == 2
    expected = {
        tp: LeaderIsrAndControllerEpoch(tp.partition % 3 + 1, tp.partition, (1, 2), 7, 4)
        for tp in partitions
        if tp not in (TopicPartition("b", 5), TopicPartition("a", 2))
    }
    assert dict(ctx.partition_states) == expected
    assert metrics.CORRUPT_ZNODES.labels("partition_state")._value.get() == corrupt_before + 1


async def test_a_failed_read_leaves_nothing_outstanding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loads, "MULTI_READ_BATCH", 1)
    monkeypatch.setattr(loads, "READ_AHEAD", 3)
    started: list[asyncio.Future[Any]] = []

    class FailingZk:
        async def get_many(self, wanted: Sequence[str]) -> list[Any]:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            started.append(future)
            if len(started) == 1:
                raise ConnectionError("ZooKeeper went away")
            return await future  # never answered: must be cancelled

    partitions = [TopicPartition("a", p) for p in range(5)]
    with pytest.raises(ConnectionError):
        await loads.load_partition_states(FailingZk(), ControllerContext(), partitions)  # type: ignore[arg-type]
    assert len(started) == 3  # the reads ahead, no more
    assert all(f.cancelled() for f in started[1:])


def _stat(version: int) -> ZnodeStat:
    return ZnodeStat(version=version, czxid=0, mzxid=0, ephemeral_owner=0, num_children=0)


def test_state_reads_decode_as_a_batch_or_one_by_one_with_the_same_result() -> None:
    partitions = [TopicPartition("t", p) for p in range(6)]
    state_paths = [paths.partition_state_path(tp.topic, tp.partition) for tp in partitions]
    states = [LeaderIsrAndControllerEpoch(p % 3 + 1, p, (p % 3 + 1, 2), 0, 3) for p in range(6)]
    reads: list[tuple[bytes, ZnodeStat] | None] = [
        (codecs.encode_partition_state(s), _stat(10 + i)) for i, s in enumerate(states)
    ]
    whole = loads.decode_state_reads(partitions, state_paths, reads)
    assert whole == [s._replace(zk_version=10 + i) for i, s in enumerate(states)]

    # One gone and one corrupt: the others as before, those two None, the corrupt one counted.
    reads[1] = None
    reads[4] = (b'{"leader": 1}', _stat(3))
    corrupt_before = metrics.CORRUPT_ZNODES.labels("partition_state")._value.get()
    mixed = loads.decode_state_reads(partitions, state_paths, reads)
    assert mixed == [None if i in (1, 4) else state for i, state in enumerate(whole)]
    assert metrics.CORRUPT_ZNODES.labels("partition_state")._value.get() == corrupt_before + 1

    # Every znode there but one corrupt: the batch falls back to one by one.
    reads[1] = (codecs.encode_partition_state(states[1]), _stat(11))
    assert loads.decode_state_reads(partitions, state_paths, reads) == [
        None if i == 4 else state for i, state in enumerate(whole)
    ]
    assert metrics.CORRUPT_ZNODES.labels("partition_state")._value.get() == corrupt_before + 2
