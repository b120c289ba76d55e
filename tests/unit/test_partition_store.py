"""The partition-state store's bounded multis when ZooKeeper fails part-way: what earlier
multis committed is reported with the error, not lost in it."""

from __future__ import annotations

from typing import Any

from controller_svc.adapters.zk.client import OpResult, ZnodeStat
from controller_svc.adapters.zk.partition_store import ZkPartitionStateStore
from controller_svc.common.errors import ZkUnavailableError
from controller_svc.common.model import LeaderIsrAndControllerEpoch, TopicPartition


class StoreFailingOnMulti:
    """A ControllerZkStore whose n-th fenced multi gets no answer."""

    def __init__(self, fail_on: int) -> None:
        self.fail_on = fail_on
        self.multis = 0

    async def fenced_multi(self, ops: list[Any]) -> list[OpResult]:
        self.multis += 1
        if self.multis == self.fail_on:
            raise ZkUnavailableError("no answer")
        return [OpResult(op, op.path, ZnodeStat(op.version + 1, 0, 0, 0, 0)) for op in ops]


async def test_a_failed_later_multi_keeps_what_earlier_ones_wrote() -> None:
    store = ZkPartitionStateStore(StoreFailingOnMulti(fail_on=2), max_ops=2)  # type: ignore[arg-type]
    states = {TopicPartition("t", p): LeaderIsrAndControllerEpoch(1, 1, (1,), 4, 2) for p in range(5)}
    result = await store.update(states)
    assert result.written == {TopicPartition("t", 0): 5, TopicPartition("t", 1): 5}
    assert isinstance(result.error, ZkUnavailableError) and not result.conflicts


class ZkWithoutAnswers:
    """A ZkClient whose first `failures` multis get no answer; `new_session_after` swaps the
    session after that many (the old one expired)."""

    session_timeout_s = 5.0

    def __init__(self, failures: int, new_session_after: int | None = None) -> None:
        self.failures = failures
        self.new_session_after = new_session_after
        self.calls = 0
        self.session_id = 0x10

    async def multi(self, ops: list[Any], session_id: int | None = None) -> list[OpResult]:
        self.calls += 1
        if self.new_session_after is not None and self.calls > self.new_session_after:
            self.session_id = 0x11
        if self.calls <= self.failures:
            raise ZkUnavailableError("no answer")
        return [OpResult(op, op.path, None) for op in ops]


async def test_a_fenced_write_without_an_answer_is_retried_on_the_same_session_only() -> None:
    from controller_svc.adapters.zk.client import SetDataOp
    from controller_svc.adapters.zk.store import ControllerZkStore, EpochFence
    from controller_svc.common.errors import ControllerMovedError

    zk = ZkWithoutAnswers(failures=2)
    store = ControllerZkStore(zk)  # type: ignore[arg-type]
    store.fence = EpochFence(epoch=3, zk_version=3, session_id=0x10)
    results = await store.fenced_multi([SetDataOp("/a", b"x")])
    assert zk.calls == 3 and [r.path for r in results] == ["/a"]

    zk = ZkWithoutAnswers(failures=5, new_session_after=1)
    store = ControllerZkStore(zk)  # type: ignore[arg-type]
    store.fence = EpochFence(epoch=3, zk_version=3, session_id=0x10)
    try:
        await store.fenced_multi([SetDataOp("/a", b"x")])
    except ControllerMovedError:
        pass
    else:
        raise AssertionError("a write retried on a new session must resign, not succeed")
    assert zk.calls == 2
