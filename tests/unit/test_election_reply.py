"""The election multi whose reply is lost after ZooKeeper applied it (KAFKA-13407's symptom:
/controller naming a process that does not know it won)."""

from __future__ import annotations

from typing import Any

import pytest

from controller_svc.adapters.zk import codecs, paths
from controller_svc.adapters.zk.client import CreateOp, OpResult, SetDataOp, ZnodeStat
from controller_svc.adapters.zk.store import ControllerZkStore
from controller_svc.common.errors import ZkUnavailableError


class ZkLosingReplies:
    """Just enough of a ZooKeeper session: znodes with versions and ephemeral owners; the
    election multi is applied (or not) and its reply lost."""

    def __init__(self, apply_then_lose: bool) -> None:
        self.session_id = 0x42
        self.apply_then_lose = apply_then_lose
        self.znodes: dict[str, tuple[bytes, int, int]] = {paths.CONTROLLER_EPOCH: (b"4", 4, 0)}

    async def get_or_none(self, path: str, watch: bool = False) -> tuple[bytes, ZnodeStat] | None:
        if path not in self.znodes:
            return None
        data, version, owner = self.znodes[path]
        return data, ZnodeStat(version, 1, 1, owner, 0)

    async def multi(self, ops: list[Any], session_id: int | None = None) -> list[OpResult]:
        if self.apply_then_lose:
            for op in ops:
                if isinstance(op, CreateOp):
                    self.znodes[op.path] = (op.data, 0, self.session_id if op.ephemeral else 0)
                elif isinstance(op, SetDataOp):
                    self.znodes[op.path] = (op.data, self.znodes[op.path][1] + 1, 0)
        raise ZkUnavailableError("the reply never came")


async def test_an_applied_election_whose_reply_was_lost_is_won() -> None:
    zk = ZkLosingReplies(apply_then_lose=True)
    store = ControllerZkStore(zk)  # type: ignore[arg-type]
    fence = await store.register_controller_and_increment_epoch(3)
    assert (fence.epoch, fence.zk_version, fence.session_id) == (5, 5, 0x42)
    assert codecs.decode_controller(zk.znodes[paths.CONTROLLER][0]).broker_id == 3
    assert store.fence == fence


async def test_an_election_that_was_not_applied_stays_unavailable() -> None:
    zk = ZkLosingReplies(apply_then_lose=False)
    store = ControllerZkStore(zk)  # type: ignore[arg-type]
    with pytest.raises(ZkUnavailableError):
        await store.register_controller_and_increment_epoch(3)
    assert store.fence is None and paths.CONTROLLER not in zk.znodes
