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


class StoreWithSlowMultis:
    """A ControllerZkStore whose multis all wait until released, so the test sees how many the
    partition store keeps outstanding; `outcome` says what each multi (numbered from 1) does."""

    def __init__(self, outcome: dict[int, BaseException]) -> None:
        self.outcome = outcome
        self.multis = 0
        self.outstanding = 0
        self.most_outstanding = 0
        self.ops_per_multi: list[int] = []

    async def fenced_multi(self, ops: list[Any]) -> list[OpResult]:
        import asyncio

        self.multis += 1
        number = self.multis
        self.ops_per_multi.append(len(ops))
        self.outstanding += 1
        self.most_outstanding = max(self.most_outstanding, self.outstanding)
        try:
            for _ in range(3):
                await asyncio.sleep(0)
        finally:
            self.outstanding -= 1
        if number in self.outcome:
            raise self.outcome[number]
        return [OpResult(op, op.path, ZnodeStat(op.version + 1, 0, 0, 0, 0)) for op in ops]


def _states(count: int) -> dict[TopicPartition, LeaderIsrAndControllerEpoch]:
    return {TopicPartition("t", p): LeaderIsrAndControllerEpoch(1, 1, (1,), 4, 2) for p in range(count)}


async def test_multis_are_pipelined_up_to_the_bound() -> None:
    from controller_svc.adapters.zk.partition_store import MULTIS_IN_FLIGHT

    zk = StoreWithSlowMultis({})
    store = ZkPartitionStateStore(zk, max_ops=2)  # type: ignore[arg-type]
    result = await store.update(_states(2 * (MULTIS_IN_FLIGHT + 3)))
    assert zk.multis == MULTIS_IN_FLIGHT + 3 and zk.most_outstanding == MULTIS_IN_FLIGHT
    assert len(result.written) == 2 * (MULTIS_IN_FLIGHT + 3) and result.error is None


async def test_a_multi_without_an_answer_keeps_what_the_others_in_flight_wrote() -> None:
    zk = StoreWithSlowMultis({2: ZkUnavailableError("no answer")})
    store = ZkPartitionStateStore(zk, max_ops=2)  # type: ignore[arg-type]
    result = await store.update(_states(6))
    assert zk.most_outstanding == 3
    assert sorted(tp.partition for tp in result.written) == [0, 1, 4, 5]
    assert isinstance(result.error, ZkUnavailableError) and not result.conflicts


async def test_no_multi_is_sent_after_one_went_unanswered() -> None:
    from controller_svc.adapters.zk.partition_store import MULTIS_IN_FLIGHT

    zk = StoreWithSlowMultis({1: ZkUnavailableError("no answer")})
    store = ZkPartitionStateStore(zk, max_ops=1)  # type: ignore[arg-type]
    result = await store.update(_states(MULTIS_IN_FLIGHT + 5))
    # The first wave was in flight already; the ones queued behind it are not sent.
    assert zk.multis == MULTIS_IN_FLIGHT
    assert len(result.written) == MULTIS_IN_FLIGHT - 1 and isinstance(result.error, ZkUnavailableError)


async def test_a_moved_controller_outranks_the_other_failures() -> None:
    import pytest

    from controller_svc.common.errors import ControllerMovedError, ZkNotAuthorizedError

    zk = StoreWithSlowMultis({1: ZkNotAuthorizedError("refused"), 3: ControllerMovedError("epoch moved")})
    store = ZkPartitionStateStore(zk, max_ops=2)  # type: ignore[arg-type]
    with pytest.raises(ControllerMovedError):
        await store.update(_states(6))


async def test_a_conflict_is_resolved_within_its_own_multi() -> None:
    from controller_svc.common.errors import ZkBadVersionError

    conflict = ZkBadVersionError("moved").at_op(1)
    zk = StoreWithSlowMultis({2: conflict})
    store = ZkPartitionStateStore(zk, max_ops=3)  # type: ignore[arg-type]
    result = await store.update(_states(9))
    # The second multi (partitions 3-5) failed on partition 4 and went again without it.
    assert result.conflicts == {TopicPartition("t", 4)}
    assert sorted(tp.partition for tp in result.written) == [0, 1, 2, 3, 5, 6, 7, 8]
    assert zk.ops_per_multi == [3, 3, 3, 2]


async def test_a_refused_multi_keeps_what_the_others_committed_and_is_reported_not_raised() -> None:
    from controller_svc.common.errors import ZkNotAuthorizedError

    zk = StoreWithSlowMultis({2: ZkNotAuthorizedError("refused")})
    store = ZkPartitionStateStore(zk, max_ops=2)  # type: ignore[arg-type]
    result = await store.update(_states(6))
    assert sorted(tp.partition for tp in result.written) == [0, 1, 4, 5]
    assert isinstance(result.error, ZkNotAuthorizedError)


async def test_a_bug_in_a_multi_is_raised_as_it_is() -> None:
    import pytest

    zk = StoreWithSlowMultis({2: KeyError("bug")})
    store = ZkPartitionStateStore(zk, max_ops=2)  # type: ignore[arg-type]
    with pytest.raises(KeyError):
        await store.update(_states(6))


class StoreWithZnodes:
    """A ControllerZkStore whose client answers reads from a dict of znodes."""

    def __init__(self, znodes: dict[str, bytes]) -> None:
        self.zk = self
        self.znodes = znodes

    async def get_many(self, wanted: list[str]) -> list[tuple[bytes, ZnodeStat] | None]:
        return [(self.znodes[p], ZnodeStat(4, 0, 0, 0, 0)) if p in self.znodes else None for p in wanted]


async def test_reads_drop_gone_and_corrupt_znodes_and_count_the_corrupt_ones() -> None:
    from controller_svc.adapters.zk import codecs, paths
    from controller_svc.common import metrics

    state = LeaderIsrAndControllerEpoch(2, 5, (2, 3), 0, 7)
    znodes = {
        paths.partition_state_path("t", 0): codecs.encode_partition_state(state),
        paths.partition_state_path("t", 2): b"not json",
        f"{paths.CONFIG_TOPICS}/a": b'{"version": 1, "config": {"min.insync.replicas": "2"}}',
        f"{paths.CONFIG_TOPICS}/b": b"[1, 2]",
    }
    store = ZkPartitionStateStore(StoreWithZnodes(znodes))  # type: ignore[arg-type]
    states_before = metrics.CORRUPT_ZNODES.labels("partition_state")._value.get()
    configs_before = metrics.CORRUPT_ZNODES.labels("topic_config")._value.get()
    read = await store.read([TopicPartition("t", p) for p in range(3)])
    assert read == {
        TopicPartition("t", 0): state._replace(zk_version=4),
        TopicPartition("t", 1): None,
        TopicPartition("t", 2): None,
    }
    assert metrics.CORRUPT_ZNODES.labels("partition_state")._value.get() == states_before + 1
    assert await store.read_topic_configs(["a", "b", "c"]) == {"a": {"min.insync.replicas": "2"}}
    assert metrics.CORRUPT_ZNODES.labels("topic_config")._value.get() == configs_before + 1
