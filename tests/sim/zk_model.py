"""An in-memory model of ZooKeeper with its exact semantics, for the simulation tier.

The one place a ZooKeeper model belongs in this project (DESIGN.md, test layers), and only
because `tests/integration/test_zk_model_pins_real_zookeeper.py` runs the same scenarios
against the real server and this model and requires the same answers.

Modelled: znodes with data version, czxid, mzxid, pzxid and ephemeral owner; sequential
names numbered by the parent's child creates; one zxid per write (a multi is one
transaction); sessions, their expiry (ephemerals deleted, watches fired to the others) and
close; one-shot data, exist and child watches per session, delivered in zxid order; atomic multi
whose failure names the first failing op; faults: a request not applied and unanswered, a
request applied but its reply lost (both surface as ZkUnavailableError, as a hung server's do).

`SimZkClient` offers the same methods as `controller_svc.adapters.zk.client.ZkClient`, so the real
controller and broker code runs on it unchanged.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller_svc.adapters.zk.client import (
    CheckOp,
    CreateOp,
    DeleteOp,
    OpResult,
    SetDataOp,
    TreeWatchArming,
    WatchCallback,
    WatchKind,
    ZkOp,
    ZnodeStat,
)
from controller_svc.common.errors import (
    ControllerError,
    ZkBadVersionError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkNotAuthorizedError,
    ZkNotEmptyError,
    ZkUnavailableError,
)


@dataclass
class Znode:
    data: bytes
    czxid: int
    mzxid: int
    pzxid: int
    version: int = 0
    cversion: int = 0
    ephemeral_owner: int = 0
    children: set[str] = field(default_factory=set)

    def stat(self) -> ZnodeStat:
        return ZnodeStat(self.version, self.czxid, self.mzxid, self.ephemeral_owner, len(self.children))


def _parent(path: str) -> str:
    parent = path.rsplit("/", 1)[0]
    return parent or "/"


def _check_path(path: str) -> None:
    if not path.startswith("/") or (path != "/" and path.endswith("/")) or "//" in path:
        raise ValueError(f"invalid ZooKeeper path {path!r}")


# (session id, kind, path): a watch event for one session.
WatchEvent = tuple[int, WatchKind, str]


class ZooKeeperModel:
    """The server side: the data tree, the sessions and their watches."""

    def __init__(self) -> None:
        self.zxid = 0
        self.nodes: dict[str, Znode] = {"/": Znode(b"", 0, 0, 0)}
        self._session_ids = itertools.count(0x100)
        self.live_sessions: set[int] = set()
        # One-shot server-side watches: path -> sessions.
        self.data_watches: dict[str, set[int]] = {}
        self.exist_watches: dict[str, set[int]] = {}
        self.child_watches: dict[str, set[int]] = {}
        # Persistent recursive watches (addWatch, 3.6+): path -> sessions; never consumed.
        self.tree_watches: dict[str, set[int]] = {}
        self.listeners: dict[int, Callable[[WatchKind, str], None]] = {}
        # Called after every committed multi (session, ops), before its watches fire: the
        # campaign's checks of what may commit (e.g. no controller write without the epoch fence).
        self.on_commit: Callable[[int, Sequence[ZkOp]], None] | None = None
        # What the faults did when they landed (kind -> count), for the campaign's report.
        self.landed: collections.Counter[str] = collections.Counter()

    def __repr__(self) -> str:
        return f"ZooKeeperModel(zxid={self.zxid}, znodes={len(self.nodes)}, sessions={sorted(self.live_sessions)})"

    # --- sessions -------------------------------------------------------------------------------

    def open_session(self, listener: Callable[[WatchKind, str], None]) -> int:
        session = next(self._session_ids)
        self.live_sessions.add(session)
        self.listeners[session] = listener
        return session

    def end_session(self, session: int) -> None:
        """Expiry or close: the session's ephemerals go (their watches fire for the others)."""
        if session not in self.live_sessions:
            return
        self.live_sessions.discard(session)
        self.listeners.pop(session, None)
        for watches in (self.data_watches, self.exist_watches, self.child_watches, self.tree_watches):
            for sessions in watches.values():
                sessions.discard(session)
        owned = sorted((p for p, n in self.nodes.items() if n.ephemeral_owner == session), reverse=True)
        if owned:
            self.zxid += 1
            events: list[WatchEvent] = []
            for path in owned:
                self._delete(path, self.zxid, events)
            self._deliver(events)

    def _require(self, session: int) -> None:
        if session not in self.live_sessions:
            raise ZkUnavailableError(f"session 0x{session:x} has expired")

    # --- reads ----------------------------------------------------------------------------------

    def get(self, session: int, path: str, watch: bool) -> tuple[bytes, ZnodeStat]:
        self._require(session)
        node = self.nodes.get(path)
        if node is None:
            raise ZkNoNodeError(path)
        if watch:
            self.data_watches.setdefault(path, set()).add(session)
        return node.data, node.stat()

    def exists(self, session: int, path: str, watch: bool) -> ZnodeStat | None:
        self._require(session)
        node = self.nodes.get(path)
        if watch:
            target = self.data_watches if node is not None else self.exist_watches
            target.setdefault(path, set()).add(session)
        return node.stat() if node is not None else None

    def get_children(self, session: int, path: str, watch: bool) -> list[str]:
        self._require(session)
        node = self.nodes.get(path)
        if node is None:
            raise ZkNoNodeError(path)
        if watch:
            self.child_watches.setdefault(path, set()).add(session)
        return sorted(node.children)

    def add_tree_watch(self, session: int, path: str) -> None:
        """addWatch(path, PERSISTENT_RECURSIVE): created, deleted and data-changed events of
        `path` and every descendant, until the session ends (never children-changed)."""
        self._require(session)
        self.tree_watches.setdefault(path, set()).add(session)

    def remove_watches(self, session: int, path: str) -> None:
        """removeWatches(path, Any): every watch of the session on exactly `path` ends, the
        persistent recursive one and one-shot ones alike (none armed is no error here; the real
        server's NoWatcher is ignored by the client)."""
        self._require(session)
        for watches in (self.data_watches, self.exist_watches, self.child_watches, self.tree_watches):
            sessions = watches.get(path)
            if sessions is not None:
                sessions.discard(session)
                if not sessions:
                    del watches[path]

    def _fire_tree(self, path: str, kind: WatchKind) -> list[WatchEvent]:
        if not self.tree_watches:
            return []
        sessions: set[int] = set()
        ancestor = path
        while True:
            sessions |= self.tree_watches.get(ancestor, set())
            if ancestor == "/":
                break
            ancestor = _parent(ancestor)
        return [(s, kind, path) for s in sorted(sessions)]

    # --- writes ---------------------------------------------------------------------------------

    def multi(self, session: int, ops: Sequence[ZkOp]) -> list[OpResult]:
        """All ops or none, as one transaction (one zxid). The first failing op is named."""
        self._require(session)
        snapshot = {p: _copy(n) for p, n in self.nodes.items()}
        # A multi that fails triggers no watch: the watches its ops fired are armed again.
        armed = [{p: set(s) for p, s in w.items()} for w in (self.data_watches, self.exist_watches, self.child_watches)]
        zxid = self.zxid + 1
        events: list[WatchEvent] = []
        results: list[OpResult] = []
        for index, op in enumerate(ops):
            try:
                results.append(self._apply(session, op, zxid, events))
            except ControllerError as e:
                self.nodes = snapshot
                self.data_watches, self.exist_watches, self.child_watches = armed
                raise e.at_op(index) from None
        if any(not isinstance(op, CheckOp) for op in ops):
            self.zxid = zxid
        if self.on_commit is not None:
            self.on_commit(session, ops)
        self._deliver(events)
        return results

    def _apply(self, session: int, op: ZkOp, zxid: int, events: list[WatchEvent]) -> OpResult:
        _check_path(op.path)
        if isinstance(op, CheckOp):
            node = self.nodes.get(op.path)
            if node is None:
                raise ZkNoNodeError(op.path)
            if op.version != -1 and node.version != op.version:
                raise ZkBadVersionError(op.path)
            return OpResult(op, op.path, node.stat())
        if isinstance(op, CreateOp):
            parent_path = _parent(op.path)
            parent = self.nodes.get(parent_path)
            if parent is None:
                raise ZkNoNodeError(parent_path)
            if parent.ephemeral_owner:
                raise ControllerError(f"{parent_path} is ephemeral: it cannot have children")
            path = f"{op.path}{parent.cversion:010d}" if op.sequential else op.path
            if path in self.nodes:
                raise ZkNodeExistsError(path)
            self.nodes[path] = Znode(op.data, zxid, zxid, zxid, ephemeral_owner=session if op.ephemeral else 0)
            parent.children.add(path.rsplit("/", 1)[1])
            parent.cversion += 1
            parent.pzxid = zxid
            events += self._fire(self.exist_watches, path, WatchKind.CREATED)
            events += self._fire(self.data_watches, path, WatchKind.CREATED)
            events += self._fire_tree(path, WatchKind.CREATED)
            events += self._fire(self.child_watches, parent_path, WatchKind.CHILDREN_CHANGED)
            # A create inside a multi answers without a stat, as ZooKeeper's Create does.
            return OpResult(op, path, None)
        if isinstance(op, SetDataOp):
            node = self.nodes.get(op.path)
            if node is None:
                raise ZkNoNodeError(op.path)
            if op.version != -1 and node.version != op.version:
                raise ZkBadVersionError(op.path)
            node.data = op.data
            node.version += 1
            node.mzxid = zxid
            events += self._fire(self.data_watches, op.path, WatchKind.DATA_CHANGED)
            events += self._fire_tree(op.path, WatchKind.DATA_CHANGED)
            return OpResult(op, op.path, node.stat())
        assert isinstance(op, DeleteOp)
        node = self.nodes.get(op.path)
        if node is None:
            raise ZkNoNodeError(op.path)
        if op.version != -1 and node.version != op.version:
            raise ZkBadVersionError(op.path)
        if node.children:
            raise ZkNotEmptyError(op.path)
        self._delete(op.path, zxid, events)
        return OpResult(op, op.path, None)

    def _delete(self, path: str, zxid: int, events: list[WatchEvent]) -> None:
        del self.nodes[path]
        parent_path = _parent(path)
        parent = self.nodes[parent_path]
        parent.children.discard(path.rsplit("/", 1)[1])
        # No cversion step: the real server numbers sequential children by creates alone
        # (create, create, delete, create gives ..0, ..1, ..2; pinned by the real-ZooKeeper test).
        parent.pzxid = zxid
        events += self._fire(self.data_watches, path, WatchKind.DELETED)
        events += self._fire(self.child_watches, path, WatchKind.DELETED)
        events += self._fire_tree(path, WatchKind.DELETED)
        events += self._fire(self.child_watches, parent_path, WatchKind.CHILDREN_CHANGED)

    @staticmethod
    def _fire(watches: dict[str, set[int]], path: str, kind: WatchKind) -> list[WatchEvent]:
        sessions = watches.pop(path, set())
        return [(s, kind, path) for s in sorted(sessions)]

    def _deliver(self, events: Iterable[WatchEvent]) -> None:
        # A session gets one notification per (kind, path) per trigger, in order.
        seen: set[WatchEvent] = set()
        for event in events:
            if event in seen:
                continue
            seen.add(event)
            session, kind, path = event
            listener = self.listeners.get(session)
            if listener is not None:
                listener(kind, path)


def _copy(node: Znode) -> Znode:
    return Znode(
        node.data,
        node.czxid,
        node.mzxid,
        node.pzxid,
        node.version,
        node.cversion,
        node.ephemeral_owner,
        set(node.children),
    )


class SimZkClient:
    """`ZkClient`'s methods over the model, for the real controller and broker code.

    Callbacks registered with watch_data / watch_children stay until `unwatch`; the server-side
    watch is one-shot and re-armed by the next read with watch=True (as with ZkClient). Watch
    events are delivered with `loop.call_soon`, in the order the model produced them. Faults on
    writes: `fail_next_writes(n)` fails the next n multis unapplied, `lose_next_write_replies(n)`
    applies them and loses their replies; both raise ZkUnavailableError, as a write to a hung
    server does. Reads have no such fault: the real ZkClient retries a read through a lost
    connection for up to a session timeout, after which the session has expired anyway.
    `expire()` ends the session (on_session_lost), `renew()` opens a new one (on_new_session)."""

    def __init__(
        self,
        model: ZooKeeperModel,
        session_timeout_ms: int = 6000,
        on_session_lost: Callable[[], None] | None = None,
        on_new_session: Callable[[], None] | None = None,
    ) -> None:
        self.model = model
        self._session_timeout_ms = session_timeout_ms
        self._on_session_lost = on_session_lost
        self._on_new_session = on_new_session
        self._session = 0
        # Told each new session id (the simulation tracks which sessions are controllers').
        self.on_session: Callable[[int], None] | None = None
        self._callbacks: dict[tuple[WatchKind, str], list[WatchCallback]] = {}
        # Tree watch callbacks by path prefix, and the "connection" (here: the session) their
        # server-side watches were armed on.
        self._tree_callbacks: dict[str, list[WatchCallback]] = {}
        self.watch_events_received = 0  # ZkClient's count of the server's watch events
        self._connection = object()
        self._fail_next = 0
        self._lose_next = 0
        # A paused process (SIGSTOP): requests and notifications wait for the gate.
        self._gate: asyncio.Event | None = None
        self._buffered: list[tuple[WatchKind, str]] = []
        self._pause_at_next_write_s = 0.0
        # A hung server: reads wait until then (loop time) before they are answered.
        self._hung_until = 0.0
        # Writes under these paths are refused (NoAuth: an ACL this identity does not pass).
        self.refused_prefixes: set[str] = set()
        self._hang_next: tuple[str, float] | None = None

    def __repr__(self) -> str:
        return f"SimZkClient(session=0x{self._session:x})"

    # --- session --------------------------------------------------------------------------------

    @property
    def session_id(self) -> int:
        return self._session

    @property
    def session_timeout_s(self) -> float:
        return self._session_timeout_ms / 1000.0

    @property
    def connected(self) -> bool:
        return self._session in self.model.live_sessions

    async def start(self, timeout_s: float | None = None) -> None:
        self._session = self.model.open_session(self._on_event)

    async def close(self) -> None:
        self.model.end_session(self._session)

    async def wait_connected(self) -> None:
        return None

    def expire(self) -> bool:
        """The server expires the session (False if it had already ended: a client holds one
        session at a time, and an ended one cannot expire again)."""
        if self._session not in self.model.live_sessions:
            return False
        self.model.end_session(self._session)
        if self._on_session_lost is not None:
            self._on_session_lost()
        return True

    async def renew(self) -> None:
        """A new session after expiry; watches with callbacks are re-armed (aiozk's SetWatches)."""
        if self._session in self.model.live_sessions:
            return
        self._session = self.model.open_session(self._on_event)
        self._connection = object()
        if self.on_session is not None:
            self.on_session(self._session)
        for kind, path in list(self._callbacks):
            if kind == WatchKind.CHILDREN_CHANGED:
                if path in self.model.nodes:
                    self.model.child_watches.setdefault(path, set()).add(self._session)
            elif kind in (WatchKind.DATA_CHANGED, WatchKind.DELETED, WatchKind.CREATED):
                self.model.exists(self._session, path, watch=True)
        if self._on_new_session is not None:
            self._on_new_session()

    def set_session_callbacks(
        self, on_session_lost: Callable[[], None] | None, on_new_session: Callable[[], None] | None
    ) -> None:
        self._on_session_lost = on_session_lost
        self._on_new_session = on_new_session

    def end_silently(self) -> None:
        """The server expires the session of a process that is gone: nobody is told."""
        self.model.end_session(self._session)

    # --- faults ---------------------------------------------------------------------------------

    def fail_next_writes(self, count: int = 1) -> None:
        self._fail_next += count

    def lose_next_write_replies(self, count: int = 1) -> None:
        self._lose_next += count

    def pause(self, seconds: float) -> None:
        """The process stops for `seconds` (SIGSTOP, a long GC pause): its requests and watch
        notifications wait; past the session timeout the server expires its session (its
        ephemerals go) without it knowing. When it resumes, the requests that waited meet the
        expired session, and only then is it told (on_session_lost), as a real client learns
        it on reconnecting: in between, a zombie acts on what it believed."""
        if self._gate is not None:
            return
        loop = asyncio.get_running_loop()
        self._gate = asyncio.Event()
        self.model.landed["process_paused"] += 1
        if seconds > self.session_timeout_s:
            loop.call_later(self.session_timeout_s, self._expire_while_paused, self._session)
        loop.call_later(seconds, self._resume)

    def pause_at_next_write(self, seconds: float) -> None:
        """Pause (as `pause`) when this client next writes: the process stops in the middle of
        an operation, and its write goes out when it resumes."""
        self._pause_at_next_write_s = seconds

    def hang_reads(self, seconds: float) -> None:
        """The server this client reads from hangs: reads sent in the next `seconds` are answered
        only when it ends (the real client moves to another server and retries them)."""
        self._hung_until = asyncio.get_running_loop().time() + seconds

    @property
    def paused(self) -> bool:
        return self._gate is not None

    def _expire_while_paused(self, session: int) -> None:
        if self._gate is not None and session in self.model.live_sessions:
            self.model.end_session(session)
            self.model.landed["session_expired_while_paused"] += 1

    def _resume(self) -> None:
        gate, self._gate = self._gate, None
        if gate is None:
            return
        gate.set()  # the waiting requests run first (their wake-ups are queued before the below)
        buffered, self._buffered = self._buffered, []
        loop = asyncio.get_running_loop()
        if self._session in self.model.live_sessions:
            for kind, path in buffered:
                self._on_event(kind, path)
        elif self._on_session_lost is not None:
            loop.call_soon(self._on_session_lost)
            loop.call_later(0.1, lambda: asyncio.ensure_future(self.renew()))

    async def wait_if_paused(self) -> bool:
        """Wait while the process is paused; True if it was."""
        gate = self._gate
        if gate is None:
            return False
        await gate.wait()
        return True

    def hang_next_read(self, prefix: str, seconds: float) -> None:
        """The next read of a path under `prefix` hangs for `seconds` (then is answered): a
        window placed inside one step of the controller (e.g. its failover's first read of the
        ISR-change notifications)."""
        self._hang_next = (prefix, seconds)

    async def _before_read(self, path: str = "") -> None:
        await self.wait_if_paused()
        if self._hang_next is not None and path.startswith(self._hang_next[0]):
            seconds = self._hang_next[1]
            self._hang_next = None
            self.model.landed["next_read_hung"] += 1
            await asyncio.sleep(seconds)
        delay = self._hung_until - asyncio.get_running_loop().time()
        if delay > 0:
            self.model.landed["read_hung"] += 1
            await asyncio.sleep(delay)

    def _refuse(self, ops: Sequence[ZkOp]) -> None:
        for op in ops:
            if not isinstance(op, CheckOp) and any(op.path.startswith(p) for p in self.refused_prefixes):
                raise ZkNotAuthorizedError(f"ZooKeeper refused NoAuth on {op.path} (simulated ACL)")

    def _before(self, path: str) -> None:
        if self._fail_next:
            self._fail_next -= 1
            raise ZkUnavailableError(f"ZooKeeper request on {path} failed: no answer (simulated)")

    def _after(self, path: str) -> None:
        if self._lose_next:
            self._lose_next -= 1
            self.model.landed["write_reply_lost"] += 1
            raise ZkUnavailableError(f"ZooKeeper request on {path} failed: reply lost (simulated)")

    # --- watches --------------------------------------------------------------------------------

    def watch_data(self, path: str, callback: WatchCallback) -> None:
        for kind in (WatchKind.CREATED, WatchKind.DELETED, WatchKind.DATA_CHANGED):
            self._callbacks.setdefault((kind, path), []).append(callback)

    def watch_children(self, path: str, callback: WatchCallback) -> None:
        for kind in (WatchKind.CHILDREN_CHANGED, WatchKind.CREATED):
            self._callbacks.setdefault((kind, path), []).append(callback)

    def unwatch(self, path: str) -> None:
        for kind in WatchKind:
            self._callbacks.pop((kind, path), None)

    def watch_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for (_kind, path), callbacks in self._callbacks.items():
            if callbacks:
                counts[path] = counts.get(path, 0) + len(callbacks)
        return counts

    async def watch_tree(self, path: str, callback: WatchCallback) -> TreeWatchArming:
        """ZkClient.watch_tree. Its callbacks run when the event is committed, not a loop step
        later: ZooKeeper delivers a watch event before the reply to any later request on the
        connection, and the model answers requests synchronously, so only this keeps that order
        (a standby's takeover relies on it; one-shot callbacks keep their call_soon)."""
        await self._before_read(path)
        callbacks = self._tree_callbacks.setdefault(path, [])
        if callback not in callbacks:
            callbacks.append(callback)
        self.model.add_tree_watch(self._session, path)
        return TreeWatchArming(path, self._session, self._connection)

    def tree_watch_intact(self, arming: TreeWatchArming) -> bool:
        return (
            arming.session_id == self._session
            and arming.connection is self._connection
            and self._session in self.model.live_sessions
        )

    def unwatch_tree(self, path: str) -> None:
        self._tree_callbacks.pop(path, None)

    async def remove_watches(self, path: str) -> None:
        """ZkClient.remove_watches: the server's watches on `path` end (callbacks stay)."""
        await self._before_read(path)
        self.model.remove_watches(self._session, path)

    def _on_event(self, kind: WatchKind, path: str) -> None:
        self.watch_events_received += 1
        if self._gate is not None:
            self._buffered.append((kind, path))
            return
        if kind != WatchKind.CHILDREN_CHANGED:
            for prefix, tree_callbacks in list(self._tree_callbacks.items()):
                if path == prefix or path.startswith(prefix + "/"):
                    for tree_callback in list(tree_callbacks):
                        tree_callback(kind, path)
        for callback in list(self._callbacks.get((kind, path), [])):
            asyncio.get_running_loop().call_soon(callback, kind, path)

    # --- reads ----------------------------------------------------------------------------------

    async def get(self, path: str, watch: bool = False) -> tuple[bytes, ZnodeStat]:
        await self._before_read(path)
        return self.model.get(self._session, path, watch)

    async def get_or_none(self, path: str, watch: bool = False) -> tuple[bytes, ZnodeStat] | None:
        try:
            return await self.get(path, watch=watch)
        except ZkNoNodeError:
            if watch and await self.exists(path, watch=True) is not None:
                return await self.get(path, watch=watch)
            return None

    async def exists(self, path: str, watch: bool = False) -> ZnodeStat | None:
        await self._before_read(path)
        return self.model.exists(self._session, path, watch)

    async def get_children(self, path: str, watch: bool = False) -> list[str]:
        await self._before_read(path)
        return self.model.get_children(self._session, path, watch)

    async def get_children_or_empty(self, path: str, watch: bool = False) -> list[str]:
        try:
            return await self.get_children(path, watch=watch)
        except ZkNoNodeError:
            if watch:
                await self.exists(path, watch=True)
            return []

    async def pipelined(self, calls: Iterable[Callable[[], Any]]) -> list[Any]:
        return [await call() for call in calls]

    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, ZnodeStat] | None]:
        return [await self.get_or_none(p) for p in paths]

    # --- writes ---------------------------------------------------------------------------------

    async def multi(self, ops: Sequence[ZkOp], session_id: int | None = None) -> list[OpResult]:
        if not ops:
            return []
        if self._pause_at_next_write_s > 0:
            seconds, self._pause_at_next_write_s = self._pause_at_next_write_s, 0.0
            self.pause(seconds)
        if await self.wait_if_paused() and self._session not in self.model.live_sessions:
            self.model.landed["write_after_pause_refused"] += 1
        if session_id is not None and session_id != self._session:
            # The request waited (a paused process) while its session ended and a new one began.
            self.model.landed["write_on_a_newer_session_refused"] += 1
            raise ZkUnavailableError(f"session 0x{session_id:x} has ended; not sending on 0x{self._session:x}")
        self._refuse(ops)
        self._before(ops[0].path)
        results = self.model.multi(self._session, ops)
        self._after(ops[0].path)
        return results

    async def create(self, path: str, data: bytes = b"", ephemeral: bool = False, sequential: bool = False) -> OpResult:
        result = (await self.multi([CreateOp(path, data, ephemeral, sequential)]))[0]
        return OpResult(result.op, result.path, await self.exists(result.path))

    async def set_data(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        try:
            result = (await self.multi([SetDataOp(path, data, version)]))[0]
        except ControllerError as e:
            e.op_index = -1  # a single write, not a multi: its error is the op's own
            raise
        assert result.stat is not None
        return result.stat

    async def delete(self, path: str, version: int = -1) -> None:
        try:
            await self.multi([DeleteOp(path, version)])
        except ControllerError as e:
            e.op_index = -1
            raise

    async def ensure_path(self, path: str) -> None:
        current = ""
        for part in [p for p in path.split("/") if p]:
            current = f"{current}/{part}"
            if await self.exists(current) is not None:
                continue
            try:
                await self.create(current)
            except ZkNodeExistsError:
                pass
