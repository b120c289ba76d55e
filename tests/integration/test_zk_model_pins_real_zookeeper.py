"""The simulation's ZooKeeper model answers as the real ZooKeeper does.

Every scenario runs twice, against the real server (Debian's package, through the project's
ZkClient) and against `tests/sim/zk_model.py` (through SimZkClient), and asserts the same
answers: versions, errors and the op a failed multi names, sequential names, czxid order,
ephemeral owners and their deletion when the session ends, one-shot watches and the events they
deliver. The model is trusted in the simulation tier only as far as these pin it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from controller_svc.adapters.zk.client import CheckOp, CreateOp, DeleteOp, SetDataOp, WatchKind, ZkClient
from controller_svc.common.errors import ZkBadVersionError, ZkNodeExistsError, ZkNoNodeError, ZkNotEmptyError
from tests.integration.harness import eventually
from tests.sim.zk_model import SimZkClient, ZooKeeperModel

pytestmark = pytest.mark.integration

Factory = Callable[[], Awaitable[Any]]


@pytest.fixture(params=["real", "model"])
async def session_factory(request: pytest.FixtureRequest, chroot_connect: str) -> AsyncIterator[Factory]:
    """Make started sessions of one ZooKeeper: the real one (a fresh chroot) or one model."""
    opened: list[Any] = []
    model = ZooKeeperModel()

    async def make() -> Any:
        client: Any = ZkClient(chroot_connect, 10000) if request.param == "real" else SimZkClient(model)
        await client.start(timeout_s=10)
        opened.append(client)
        return client

    if request.param == "real":
        first = await make()  # the chroot itself
        await first.ensure_path("/")
    yield make
    for client in opened:
        await client.close()


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[WatchKind, str]] = []

    def __call__(self, kind: WatchKind, path: str) -> None:
        self.events.append((kind, path))


async def settle() -> None:
    await asyncio.sleep(0.3)  # the real server's events cross a socket and a thread


async def test_versions_and_the_errors_of_conditional_writes(session_factory: Factory) -> None:
    zk = await session_factory()
    await zk.ensure_path("/v")
    created = await zk.create("/v/a", b"1")
    assert created.path == "/v/a" and created.stat is not None and created.stat.version == 0
    assert (await zk.set_data("/v/a", b"2", version=0)).version == 1
    with pytest.raises(ZkBadVersionError):
        await zk.set_data("/v/a", b"3", version=0)
    with pytest.raises(ZkNoNodeError):
        await zk.set_data("/v/missing", b"3")
    with pytest.raises(ZkNodeExistsError) as exists:
        await zk.create("/v/a", b"again")
    assert exists.value.op_index == 0
    with pytest.raises(ZkNotEmptyError):
        await zk.delete("/v")
    with pytest.raises(ZkBadVersionError):
        await zk.delete("/v/a", version=0)
    await zk.delete("/v/a", version=1)
    assert await zk.exists("/v/a") is None
    assert await zk.get_or_none("/v/a") is None
    assert await zk.get_children("/v") == []


async def test_a_multi_is_atomic_and_names_its_first_failing_op(session_factory: Factory) -> None:
    zk = await session_factory()
    await zk.ensure_path("/m")
    await zk.create("/m/x", b"x")
    with pytest.raises(ZkBadVersionError) as failed:
        await zk.multi([CreateOp("/m/new", b""), SetDataOp("/m/x", b"y", 5), DeleteOp("/m/x")])
    assert failed.value.op_index == 1
    assert await zk.exists("/m/new") is None and (await zk.get("/m/x"))[0] == b"x"
    with pytest.raises(ZkBadVersionError) as checked:
        await zk.multi([CheckOp("/m/x", 3), CreateOp("/m/never", b"")])
    assert checked.value.op_index == 0
    results = await zk.multi([CheckOp("/m/x", 0), SetDataOp("/m/x", b"z", 0), CreateOp("/m/y", b"")])
    assert [r.path for r in results] == ["/m/x", "/m/x", "/m/y"]
    assert results[1].stat is not None and results[1].stat.version == 1


async def test_sequential_names_count_the_parents_creates_and_czxids_grow(session_factory: Factory) -> None:
    zk = await session_factory()
    await zk.ensure_path("/s")
    first = await zk.create("/s/n_", b"", sequential=True)
    second = await zk.create("/s/n_", b"", sequential=True)
    await zk.delete(first.path)
    third = await zk.create("/s/n_", b"", sequential=True)  # a delete does not advance the sequence
    assert [first.path, second.path, third.path] == ["/s/n_0000000000", "/s/n_0000000001", "/s/n_0000000002"]
    assert first.stat.czxid < second.stat.czxid < third.stat.czxid
    assert await zk.get_children("/s") == ["n_0000000001", "n_0000000002"]


async def test_an_mzxid_names_a_write_and_a_znode_created_again_gets_a_higher_one(session_factory: Factory) -> None:
    """What a standby's reload after a lost connection relies on (adapters/zk/standby.py
    `_reload`): a znode's mzxid is the zxid of its last write, creation included, so one deleted
    and created again is back at version 0 but at a higher mzxid than any read before."""
    zk = await session_factory()
    await zk.ensure_path("/m")
    await zk.create("/m/a", b"1")
    await zk.create("/m/b", b"1")
    (a0, b0) = await zk.get_many(["/m/a", "/m/b"])
    assert a0[1].mzxid == a0[1].czxid < b0[1].mzxid == b0[1].czxid and a0[1].version == 0
    await zk.set_data("/m/b", b"2")
    await zk.delete("/m/a")
    await zk.create("/m/a", b"3")
    (a1, b1) = await zk.get_many(["/m/a", "/m/b"])
    assert a1[1].version == 0 and a1[1].mzxid == a1[1].czxid > b1[1].mzxid > b0[1].mzxid
    assert b1[1].version == 1 and b1[1].czxid == b0[1].czxid
    assert (await zk.get_many(["/m/b"]))[0][1].mzxid == b1[1].mzxid  # a read writes nothing


async def test_an_ended_sessions_ephemerals_go_and_the_watchers_hear_it(session_factory: Factory) -> None:
    ours, theirs = await session_factory(), await session_factory()
    await ours.ensure_path("/e")
    made = await theirs.create("/e/owned", b"", ephemeral=True)
    assert made.stat.ephemeral_owner == theirs.session_id != ours.session_id
    heard = Recorder()
    ours.watch_data("/e/owned", heard)
    ours.watch_children("/e", heard)
    assert await ours.exists("/e/owned", watch=True) is not None
    assert await ours.get_children("/e", watch=True) == ["owned"]
    await theirs.close()

    async def both_heard() -> bool:
        return sorted(heard.events) == sorted([(WatchKind.DELETED, "/e/owned"), (WatchKind.CHILDREN_CHANGED, "/e")])

    await eventually(both_heard, 10, what=f"the deletion events, heard {heard.events}")
    assert await ours.exists("/e/owned") is None


async def test_watches_are_one_shot_until_a_read_arms_them_again(session_factory: Factory) -> None:
    zk, writer = await session_factory(), await session_factory()
    await zk.ensure_path("/w")
    heard = Recorder()
    zk.watch_data("/w/node", heard)
    assert await zk.exists("/w/node", watch=True) is None  # an exists watch on a missing node
    await writer.create("/w/node", b"0")
    await settle()
    assert heard.events == [(WatchKind.CREATED, "/w/node")]
    await writer.set_data("/w/node", b"1")  # not armed: nothing
    await settle()
    assert heard.events == [(WatchKind.CREATED, "/w/node")]
    assert (await zk.get("/w/node", watch=True))[0] == b"1"
    await writer.set_data("/w/node", b"2")
    await writer.set_data("/w/node", b"3")  # one shot: heard once
    await settle()
    assert heard.events == [(WatchKind.CREATED, "/w/node"), (WatchKind.DATA_CHANGED, "/w/node")]
    assert await zk.exists("/w/node", watch=True) is not None
    await writer.delete("/w/node")
    await settle()
    assert heard.events[-1] == (WatchKind.DELETED, "/w/node") and len(heard.events) == 3
    zk.unwatch("/w/node")
    assert "/w/node" not in zk.watch_counts()


async def test_a_multi_that_fails_fires_no_watch_and_leaves_it_armed(session_factory: Factory) -> None:
    """The simulation found its model consuming the watches of a failed multi's ops (a fenced
    delete of a topic whose last op failed took the controller's /brokers/topics watch, and the
    next topic was never seen): ZooKeeper applies nothing of a failed multi, watches included."""
    zk, writer = await session_factory(), await session_factory()
    await zk.ensure_path("/f/parent")
    await zk.create("/f/parent/child", b"")
    heard = Recorder()
    zk.watch_children("/f/parent", heard)
    assert await zk.get_children("/f/parent", watch=True) == ["child"]
    with pytest.raises(ZkNoNodeError):
        await writer.multi([DeleteOp("/f/parent/child"), DeleteOp("/f/parent/missing")])
    await settle()
    assert heard.events == []
    await writer.create("/f/parent/another", b"")  # the watch is still armed: heard now
    await settle()
    assert heard.events == [(WatchKind.CHILDREN_CHANGED, "/f/parent")]


async def test_a_persistent_recursive_watch_hears_every_change_below_it_and_stays(session_factory: Factory) -> None:
    """addWatch(PERSISTENT_RECURSIVE), the warm standby's watch: created, deleted and
    data-changed events of the znode and every descendant (children-changed never), still armed
    after firing; with a one-shot watch on the same znode, one event reaches both callbacks; the
    arming ends with the session."""
    zk = await session_factory()
    writer = await session_factory()
    await zk.ensure_path("/tw")
    tree = Recorder()
    arming = await zk.watch_tree("/tw", tree)
    assert zk.tree_watch_intact(arming)
    await writer.create("/tw/a", b"1")
    await writer.set_data("/tw/a", b"2")
    await writer.create("/tw/a/b", b"")
    await writer.set_data("/tw", b"x")
    await writer.multi([DeleteOp("/tw/a/b")])
    await writer.create("/elsewhere", b"")
    one_shot = Recorder()
    zk.watch_data("/tw/a", one_shot)
    assert (await zk.get("/tw/a", watch=True))[0] == b"2"
    await writer.set_data("/tw/a", b"3")
    await settle()
    assert tree.events == [
        (WatchKind.CREATED, "/tw/a"),
        (WatchKind.DATA_CHANGED, "/tw/a"),
        (WatchKind.CREATED, "/tw/a/b"),
        (WatchKind.DATA_CHANGED, "/tw"),
        (WatchKind.DELETED, "/tw/a/b"),
        (WatchKind.DATA_CHANGED, "/tw/a"),
    ]
    assert one_shot.events == [(WatchKind.DATA_CHANGED, "/tw/a")]
    assert zk.tree_watch_intact(arming)
    await zk.close()
    assert not zk.tree_watch_intact(arming)


async def test_removed_watches_are_no_longer_sent_and_the_path_can_be_armed_again(session_factory: Factory) -> None:
    """removeWatches(path, Any), what a standby does at takeover: the server stops sending the
    persistent recursive watch's events (counted where they arrive, before any callback) and a
    one-shot watch on the same path ends too (why the term arms its own watches after it);
    removing where none is armed is no error, and the path can be armed again."""
    zk = await session_factory()
    writer = await session_factory()
    await zk.ensure_path("/rw")
    await writer.create("/rw/a", b"")
    tree = Recorder()
    await zk.watch_tree("/rw", tree)
    children = Recorder()
    zk.watch_children("/rw", children)
    await zk.get_children("/rw", watch=True)
    await writer.set_data("/rw/a", b"1")
    await eventually(lambda: _true(tree.events == [(WatchKind.DATA_CHANGED, "/rw/a")]), 10, what="the armed watch")
    heard_before = zk.watch_events_received

    await zk.remove_watches("/rw")
    for value in (b"2", b"3", b"4"):
        await writer.set_data("/rw/a", value)
    await writer.create("/rw/b", b"")  # would fire the one-shot child watch
    # A one-shot watch elsewhere as a marker: events arrive in zxid order, so once the
    # marker's is here, any event of the writes above would have been too.
    marker = Recorder()
    zk.watch_data("/marker", marker)
    assert await zk.exists("/marker", watch=True) is None
    await writer.create("/marker", b"")
    await eventually(lambda: _true(marker.events), 10, what="the marker's event")
    assert zk.watch_events_received == heard_before + 1
    assert tree.events == [(WatchKind.DATA_CHANGED, "/rw/a")]
    assert children.events == []

    await zk.remove_watches("/rw")  # none armed: fine
    zk.unwatch_tree("/rw")
    again = Recorder()
    await zk.watch_tree("/rw", again)
    await writer.set_data("/rw/a", b"5")
    await eventually(lambda: _true(again.events == [(WatchKind.DATA_CHANGED, "/rw/a")]), 10, what="the new arming")


async def _true(value: Any) -> bool:
    return bool(value)
