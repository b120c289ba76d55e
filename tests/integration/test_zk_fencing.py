"""The fenced store on a real ZooKeeper: every controller write is behind the epoch check."""

from __future__ import annotations

import pytest

from controller_svc.adapters.zk import codecs, paths
from controller_svc.adapters.zk.client import CreateOp, SetDataOp, ZkClient
from controller_svc.adapters.zk.store import ControllerZkStore
from controller_svc.common.errors import ControllerMovedError

pytestmark = pytest.mark.integration


async def test_election_multi_then_fenced_writes_fail_once_the_epoch_moves(chroot_connect: str) -> None:
    ours = ZkClient(chroot_connect, 10000)
    other = ZkClient(chroot_connect, 10000)
    await ours.start(timeout_s=10)
    await other.start(timeout_s=10)
    try:
        store = ControllerZkStore(ours)
        fence = await store.register_controller_and_increment_epoch(7)
        assert fence.epoch == 1
        assert (await ours.get(paths.CONTROLLER_EPOCH))[0] == b"1"
        controller, stat = await ours.get(paths.CONTROLLER)
        assert codecs.decode_controller(controller).broker_id == 7
        assert stat.ephemeral_owner == ours.session_id

        await store.fenced_multi([CreateOp("/fenced-ok", b"1")])
        assert await ours.exists("/fenced-ok") is not None

        # Someone else moves the epoch (another controller's election).
        await other.set_data(paths.CONTROLLER_EPOCH, b"2")
        with pytest.raises(ControllerMovedError):
            await store.fenced_multi([SetDataOp("/fenced-ok", b"2"), CreateOp("/fenced-never", b"")])
        assert (await ours.get("/fenced-ok"))[0] == b"1"
        assert await ours.exists("/fenced-never") is None

        # A second election while /controller exists loses cleanly.
        with pytest.raises(ControllerMovedError):
            await ControllerZkStore(other).register_controller_and_increment_epoch(8)
        assert (await ours.get(paths.CONTROLLER_EPOCH))[0] == b"2"
    finally:
        await ours.close()
        await other.close()


async def test_fenced_write_after_session_change_is_refused(chroot_connect: str) -> None:
    zk = ZkClient(chroot_connect, 10000)
    await zk.start(timeout_s=10)
    try:
        store = ControllerZkStore(zk)
        await store.register_controller_and_increment_epoch(1)
        store.fence = type(store.fence)(store.fence.epoch, store.fence.zk_version, zk.session_id + 1)  # type: ignore[union-attr,misc]
        with pytest.raises(ControllerMovedError, match="session changed"):
            await store.fenced_multi([CreateOp("/never", b"")])
        assert await zk.exists("/never") is None
    finally:
        await zk.close()


class LostReplyClient(ZkClient):
    """A real client whose first multi is applied and then resent, as aiozk does when the
    connection drops before the reply arrives: the resend is what the caller sees."""

    armed = False
    resent = False

    async def multi(self, ops, session_id=None):  # type: ignore[no-untyped-def]
        if self.armed and not self.resent:
            self.resent = True
            await super().multi(ops, session_id)
        return await super().multi(ops, session_id)


async def test_lost_election_reply_is_resolved_by_rereading(chroot_connect: str) -> None:
    zk = LostReplyClient(chroot_connect, 10000)
    await zk.start(timeout_s=10)
    try:
        await zk.create(paths.CONTROLLER_EPOCH, b"4")
        zk.armed = True
        fence = await ControllerZkStore(zk).register_controller_and_increment_epoch(3)
        assert zk.resent
        assert fence.epoch == 5
        data, stat = await zk.get(paths.CONTROLLER_EPOCH)
        assert data == b"5" and fence.zk_version == stat.version
    finally:
        await zk.close()
