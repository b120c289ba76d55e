"""The aiozk adapter: one ZooKeeper session, watches that only call back, multi-ops with
per-op results, pipelined reads, and session-loss / new-session notifications.

The session runs on its own thread and event loop (`io_thread.py`, Kafka's ZooKeeperClient
threads): every request is carried out there and its result handed back to the caller's loop;
watch and session callbacks are delivered to the loop that started the client, in the order
ZooKeeper sent them. A caller that holds its own loop for seconds delays only its own work,
never the session's heartbeats.

aiozk exceptions never leave this module: they become `controller_svc.common.errors` types
(kazoo's and httpcore's translation at the boundary). Nothing here knows about
controllers or brokers.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

import aiozk
from aiozk import exc as zk_exc
from aiozk import protocol
from aiozk.protocol.primitives import Int, UString
from aiozk.protocol.request import Request
from aiozk.protocol.response import Response
from aiozk.states import States

from controller_svc.adapters.zk.io_thread import ZkIoThread, deliver_to

# The wire's data types are part of this module's interface (callers import them from here).
from controller_svc.adapters.zk.wire import MULTI_READ_BATCH, NO_NODE, MultiReadRequest, OpReply, WriteMultiRequest
from controller_svc.adapters.zk.wire import CheckOp as CheckOp
from controller_svc.adapters.zk.wire import CreateOp as CreateOp
from controller_svc.adapters.zk.wire import DeleteOp as DeleteOp
from controller_svc.adapters.zk.wire import OpResult as OpResult
from controller_svc.adapters.zk.wire import SetDataOp as SetDataOp
from controller_svc.adapters.zk.wire import ZkOp as ZkOp
from controller_svc.adapters.zk.wire import ZnodeStat as ZnodeStat
from controller_svc.common import metrics
from controller_svc.common.errors import (
    ControllerError,
    ZkBadVersionError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkNotAuthorizedError,
    ZkNotEmptyError,
    ZkUnavailableError,
    ZkUnimplementedError,
)
from controller_svc.common.tasks import spawn
from controller_svc.common.zk_settings import ZkDigestAuth, parse_connect_string

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")


class _MultiReadUnsupported(Exception):
    pass


def translate(error: BaseException, path: str = "") -> ControllerError:
    if isinstance(error, ControllerError):
        return error
    if isinstance(error, zk_exc.NodeExists):
        return ZkNodeExistsError(path)
    if isinstance(error, zk_exc.NoNode):
        return ZkNoNodeError(path)
    if isinstance(error, zk_exc.BadVersion):
        return ZkBadVersionError(path)
    if isinstance(error, zk_exc.NotEmpty):
        return ZkNotEmptyError(path)
    if isinstance(error, zk_exc.NoAuth | zk_exc.AuthFailed | zk_exc.InvalidACL):
        return ZkNotAuthorizedError(
            f"ZooKeeper refused {type(error).__name__} on {path or '?'}: check zookeeper.auth.* and the znode's ACL"
        )
    if isinstance(error, zk_exc.ZKError | OSError | asyncio.TimeoutError):
        return ZkUnavailableError(f"ZooKeeper request on {path or '?'} failed: {type(error).__name__} {error}")
    return ControllerError(f"unexpected ZooKeeper error on {path or '?'}: {type(error).__name__} {error}")


class WatchKind(enum.IntEnum):
    CREATED = protocol.WatchEvent.CREATED
    DELETED = protocol.WatchEvent.DELETED
    DATA_CHANGED = protocol.WatchEvent.DATA_CHANGED
    CHILDREN_CHANGED = protocol.WatchEvent.CHILDREN_CHANGED


# --- persistent recursive watches (ZooKeeper 3.6+, OpCode.addWatch = 106) ------------------------
# One watch on a subtree that stays armed after it fires: created, deleted and data-changed
# events of the znode and every descendant (never children-changed), delivered in zxid order
# and, like every watch event, before the reply to any request the server answers after the
# change. It lives on the connection: a reconnect (even within the session) loses it, and
# SetWatches after a reconnect does not restore what changed meanwhile, so an arming is only
# good for the connection it was made on (`TreeWatchArming`).

_PERSISTENT_RECURSIVE = 1
# RemoveWatchesRequest's watcher type Any (Watcher.WatcherType): every watch on the path.
_WATCHER_TYPE_ANY = 3


class _AddWatchRequest(Request):  # type: ignore[misc]
    opcode = 106
    writes_data = False
    parts = (("path", UString), ("mode", Int))


class _AddWatchResponse(Response):  # type: ignore[misc]
    """Registered in aiozk's response table for opcode 106 by its metaclass; no body."""

    opcode = 106
    parts = ()


@dataclass(frozen=True, slots=True, eq=False)
class TreeWatchArming:
    """Where a persistent recursive watch was armed: this session's connection at the time.
    Every event on the subtree since then has been delivered while `ZkClient.tree_watch_intact`
    holds for it."""

    path: str
    session_id: int
    connection: object


SessionCallback = Callable[[], None]
# Called with the kind of event and the path (relative to the chroot). It must only enqueue.
WatchCallback = Callable[[WatchKind, str], None]


def digest_acl(auth: ZkDigestAuth) -> list[Any]:
    """The ACL our znodes get with `zookeeper.set.acl` (Kafka's secure ACLs): anyone may read,
    only this identity may change them."""
    owner = protocol.acl.ACL.make(
        scheme="digest", id=auth.digest_id, read=True, write=True, create=True, delete=True, admin=True
    )
    return [owner, protocol.WORLD_READABLE]


def _on_io_thread(
    method: Callable[Concatenate[ZkClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[ZkClient, P], Coroutine[Any, Any, T]]:
    """Run the method's body on the session's thread; the caller awaits it on its own loop.
    A call made on the session's thread already (one method using another) runs in place."""

    async def on_io_thread(self: ZkClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        io = self._io
        if io is None:
            raise ZkUnavailableError("the ZooKeeper client is not started (or was closed)")
        return await io.run(method(self, *args, **kwargs))

    on_io_thread.__name__ = method.__name__
    on_io_thread.__qualname__ = method.__qualname__
    on_io_thread.__doc__ = method.__doc__
    return on_io_thread


class ZkClient:
    """One ZooKeeper session, re-created by aiozk after expiry.

    `on_session_lost` runs (synchronously, it must only enqueue) when the session is
    gone; `on_new_session` when a session is connected again after that. Kafka's
    ZooKeeperClient calls these beforeInitializingSession / afterInitializingSession.
    """

    def __init__(
        self,
        connect: str,
        session_timeout_ms: int,
        max_in_flight: int = 100,
        on_session_lost: SessionCallback | None = None,
        on_new_session: SessionCallback | None = None,
        auth: ZkDigestAuth | None = None,
        set_acl: bool = False,
    ) -> None:
        if set_acl and auth is None:
            raise ValueError("zookeeper.set.acl needs digest credentials (zookeeper.auth.user and a password)")
        self._auth = auth
        self._set_acl = set_acl
        self.connect_string = connect
        servers, chroot = parse_connect_string(connect)
        self._servers = servers
        self._chroot = chroot
        self._session_timeout_ms = session_timeout_ms
        self._client: Any = None
        self._max_in_flight = max(1, max_in_flight)
        self._on_session_lost = on_session_lost
        self._on_new_session = on_new_session
        self._monitor_task: asyncio.Task[None] | None = None
        self._closing = False
        self._watches: dict[tuple[WatchKind, str], list[Callable[[str], None]]] = {}
        # Persistent recursive watches: full path -> callbacks (changed on the session's thread).
        self._tree_watches: dict[str, list[WatchCallback]] = {}
        self._multi_read: bool | None = None  # unknown until the first multiRead
        # Watch events the server sent this session (every kind, whoever listens).
        self.watch_events_received = 0
        self._io: ZkIoThread | None = None
        # The loop that started the client: watch and session callbacks are delivered there.
        self._owner_loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"ZkClient({self.connect_string!r}, session=0x{self.session_id:x})"

    @property
    def session_id(self) -> int:
        if self._client is None:
            return 0
        return int(self._client.session.session_id or 0)

    @property
    def session_timeout_s(self) -> float:
        return self._session_timeout_ms / 1000.0

    @property
    def connected(self) -> bool:
        return self._client is not None and self._client.session.state == States.CONNECTED

    async def start(self, timeout_s: float | None = None) -> None:
        self._owner_loop = asyncio.get_running_loop()
        # A lag of a third of the session timeout is a heartbeat interval missed.
        io = self._io = ZkIoThread(f"zookeeper-io-{id(self):x}", warn_after_s=self._session_timeout_ms / 3000.0)
        try:
            await io.run(self._start_session(timeout_s))
        except BaseException:
            self._io = None
            await asyncio.to_thread(io.stop)
            raise

    async def _start_session(self, timeout_s: float | None) -> None:
        self._client = aiozk.ZKClient(
            self._servers,
            chroot=self._chroot,
            session_timeout=self._session_timeout_ms / 1000.0,
            default_acl=digest_acl(self._auth) if self._set_acl and self._auth is not None else None,
        )
        if self._auth is not None:
            self._authenticate_every_connection(self._client.session, self._auth)
        self._install_event_dispatch(self._client.session)
        self._count_state_changes(self._client.session)
        try:
            await asyncio.wait_for(self._client.start(), timeout_s)
        except Exception as e:
            await self._abandon()
            raise translate(e, "/") from e
        self._monitor_task = spawn(self._monitor_session(), "zk-session-monitor")
        if self._set_acl and self._chroot:
            await self._secure_chroot()
        log.info("ZooKeeper session 0x%x established with %s", self.session_id, self.connect_string)

    def _count_state_changes(self, session: Any) -> None:
        """Mark Kafka's SessionExpireListener meters as aiozk's session state machine moves (on
        the session's thread): SUSPENDED is a lost connection, CONNECTED and READ_ONLY a
        (re)connection, LOST an expired or refused session unless this client is closing."""
        machine = session.state
        transition_to = machine.transition_to
        meters = {
            States.SUSPENDED: metrics.ZK_DISCONNECTS,
            States.CONNECTED: metrics.ZK_SYNC_CONNECTS,
            States.READ_ONLY: metrics.ZK_READ_ONLY_CONNECTS,
            States.LOST: metrics.ZK_EXPIRES,
        }

        def counted(state: str) -> None:
            before = machine.current_state
            transition_to(state)
            if state != before and not (state == States.LOST and (self._closing or session.closing)):
                meters[state].inc()

        machine.transition_to = counted

    def _install_event_dispatch(self, session: Any) -> None:
        """Route watch events of the persistent recursive watches (by path prefix; aiozk keys its
        callbacks by exact path and knows no such watch), then aiozk's own dispatch. aiozk's
        table is a defaultdict: an event for a path nobody registered would leave an empty entry
        that every later SetWatches re-sends, so such events stop here. Connections bind the
        session's `event_dispatch` when they are made, so this is set before the first one."""
        original = session.event_dispatch
        chroot = self._chroot or ""

        def dispatch(event: Any) -> None:
            if event.type:
                self.watch_events_received += 1
                path = event.path
                # A persistent recursive watch never sends children-changed: such an event is a
                # one-shot child watch's (e.g. the active controller's on /brokers/topics).
                tree_watches = self._tree_watches if event.type != WatchKind.CHILDREN_CHANGED else {}
                for prefix, callbacks in tree_watches.items():
                    if path == prefix or path.startswith(prefix + "/"):
                        relative = path[len(chroot) :] or "/"
                        for callback in callbacks:
                            self._deliver(self._run_watch_callback, callback, WatchKind(event.type), relative)
                if (event.type, path) not in session.watch_callbacks:
                    return
            original(event)

        session.event_dispatch = dispatch

    @staticmethod
    def _run_watch_callback(callback: WatchCallback, kind: WatchKind, path: str) -> None:
        try:
            callback(kind, path)
        except Exception:
            log.exception("watch callback for %s %s failed", kind.name, path)

    async def _secure_chroot(self) -> None:
        """The chroot node is the parent of /controller, /brokers and the rest: whoever may create
        and delete its children there could delete /controller. If it is open to the world (for
        instance created by a tool before us), give it our secure ACL, as Kafka's
        zookeeper-security-migration does. Without a chroot, ZooKeeper's shared root is left alone."""
        assert self._auth is not None
        try:
            await self._client.ensure_path("/")
            current = await self._client.get_acl("/")
            open_to_all = any(
                entry.id.scheme == "world" and (entry.perms & ~protocol.acl.ACL.READ_PERM) for entry in current
            )
            if open_to_all:
                await self._client.set_acl("/", digest_acl(self._auth), force=True)
                log.warning("ZooKeeper chroot %s was writable by anyone; set to the secure ACL", self._chroot)
        except Exception as e:
            raise translate(e, self._chroot or "/") from e

    @staticmethod
    def _authenticate_every_connection(session: Any, auth: ZkDigestAuth) -> None:
        """ZooKeeper keeps auth per connection: send it right after each (re)connection's
        handshake, before the session is usable, as the Java client's primeConnection does.
        Requests on one connection are processed in order, so nothing runs unauthenticated."""
        establish = session.establish_session

        async def establish_and_authenticate() -> None:
            await establish()
            sent = session.conn.send(
                protocol.AuthRequest(type=0, scheme="digest", auth=f"{auth.user}:{auth.password}".encode())
            )

            def check(future: asyncio.Future[Any]) -> None:
                if not future.cancelled() and future.exception() is not None:
                    log.error("ZooKeeper digest authentication as %r failed: %s", auth.user, future.exception())

            sent.add_done_callback(check)

        session.establish_session = establish_and_authenticate

    async def _abandon(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                await asyncio.wait_for(client.close(), 2)
            except Exception:
                log.debug("closing a half-started ZooKeeper client failed", exc_info=True)

    async def close(self) -> None:
        io, self._io = self._io, None
        self._closing = True
        if io is None:
            return
        try:
            await io.run(self._close_session())
        finally:
            await asyncio.to_thread(io.stop)

    async def _close_session(self) -> None:
        if self._monitor_task is not None:
            self._monitor_task.cancel()
            try:
                await self._monitor_task
            except asyncio.CancelledError:
                pass
        if self._client is not None:
            try:
                await asyncio.wait_for(self._client.close(), 5)
            except Exception as e:
                log.warning("closing the ZooKeeper session failed: %s", e)
            self._client = None

    async def _monitor_session(self) -> None:
        session = self._client.session
        known_session = self.session_id
        while not self._closing:
            await session.state.wait_for(States.LOST)
            if self._closing:
                return
            log.warning("ZooKeeper session 0x%x lost (expired or closed by the server)", known_session)
            if self._on_session_lost is not None:
                self._deliver(self._on_session_lost)
            await session.state.wait_for(States.CONNECTED)
            if self._closing:
                return
            known_session = self.session_id
            log.warning("new ZooKeeper session 0x%x", known_session)
            if self._on_new_session is not None:
                self._deliver(self._on_new_session)

    def _deliver(self, callback: Callable[..., None], *args: Any) -> None:
        """From the session's thread to the owner's loop (watch and session callbacks only
        enqueue there: Kafka's ZNodeChangeHandler -> eventManager.put)."""
        assert self._owner_loop is not None
        deliver_to(self._owner_loop, callback, *args)

    @_on_io_thread
    async def wait_connected(self) -> None:
        await self._client.session.state.wait_for(States.CONNECTED)

    # --- watches ------------------------------------------------------------------------------

    def watch_data(self, path: str, callback: WatchCallback) -> None:
        """Call back on created / deleted / data-changed events of `path`.

        The callback stays registered; the server-side watch is one-shot and is re-armed
        by the next `get`/`exists` with watch=True (as Kafka's ZNodeChangeHandler is).
        """
        for kind in (WatchKind.CREATED, WatchKind.DELETED, WatchKind.DATA_CHANGED):
            self._add_watch(kind, path, callback)

    def watch_children(self, path: str, callback: WatchCallback) -> None:
        """Call back when the children of `path` change, or when `path` itself is created
        (a children read of a missing node arms an exists watch instead)."""
        self._add_watch(WatchKind.CHILDREN_CHANGED, path, callback)
        self._add_watch(WatchKind.CREATED, path, callback)

    def watch_counts(self) -> dict[str, int]:
        """Callbacks registered per path (relative to the chroot), all kinds together: what a
        term of office holds, for tests and debugging."""
        chroot = self._chroot or ""
        counts: dict[str, int] = {}
        for (_kind, full), callbacks in self._watches.items():
            if callbacks:
                path = full[len(chroot) :] or "/"
                counts[path] = counts.get(path, 0) + len(callbacks)
        return counts

    def unwatch(self, path: str) -> None:
        """Drop every callback registered on `path`."""
        full = self._client.normalize_path(path)
        assert self._io is not None
        for kind in WatchKind:
            for wrapper in self._watches.pop((kind, full), []):
                self._io.call(self._client.session.remove_watch_callback, int(kind), full, wrapper)

    def _add_watch(self, kind: WatchKind, path: str, callback: WatchCallback) -> None:
        full = self._client.normalize_path(path)

        def run_callback() -> None:
            try:
                callback(kind, path)
            except Exception:
                log.exception("watch callback for %s %s failed", kind.name, path)

        def fire(_full_path: str) -> None:  # on the session's thread
            self._deliver(run_callback)

        self._watches.setdefault((kind, full), []).append(fire)
        # aiozk's watch table is the session thread's: change it there, in order with the reads
        # that arm the watch.
        assert self._io is not None
        self._io.call(self._client.session.add_watch_callback, int(kind), full, fire)

    @_on_io_thread
    async def watch_tree(self, path: str, callback: WatchCallback) -> TreeWatchArming:
        """Call back on every created / deleted / data-changed event of `path` and its
        descendants, from now until `unwatch_tree`, through a persistent recursive watch
        (ZooKeeper 3.6+; ZkUnimplementedError before). The callback stays registered across
        reconnects, the server-side watch does not: re-arm it when `tree_watch_intact` says
        the returned arming is gone, and treat what happened in between as unseen."""
        full = self._client.normalize_path(path)
        session = self._client.session
        callbacks = self._tree_watches.setdefault(full, [])
        if callback not in callbacks:
            callbacks.append(callback)
        before = session.conn
        try:
            await session.send(_AddWatchRequest(path=full, mode=_PERSISTENT_RECURSIVE))
        except (zk_exc.Unimplemented, zk_exc.UnknownError) as e:
            raise ZkUnimplementedError(f"ZooKeeper has no addWatch (needs 3.6+): {e}") from e
        except Exception as e:
            raise translate(e, path) from e
        after = session.conn
        if before is not after or after is None:
            # aiozk resent it on a new connection: armed there, but events may have been
            # missed in between. Report an arming that is already broken.
            return TreeWatchArming(path, self.session_id, object())
        return TreeWatchArming(path, self.session_id, after)

    def tree_watch_intact(self, arming: TreeWatchArming) -> bool:
        """The watch armed then is still armed and nothing it saw was lost: same session, same
        connection, still connected."""
        client = self._client
        if client is None or self._closing:
            return False
        session = client.session
        return (
            session.conn is arming.connection
            and session.session_id == arming.session_id
            and session.state == States.CONNECTED
            and not getattr(arming.connection, "closing", False)
        )

    def unwatch_tree(self, path: str) -> None:
        """Drop the callbacks of a tree watch (the server-side watch ends with the connection;
        its events are ignored until then: `remove_watches` ends it at once)."""
        full = self._client.normalize_path(path)
        assert self._io is not None
        self._io.call(self._tree_watches.pop, full, None)

    @_on_io_thread
    async def remove_watches(self, path: str) -> None:
        """End every watch this connection holds on exactly `path` on the server
        (removeWatches with WatcherType.Any), the persistent recursive one included, so the
        server stops sending its events: each costs a parse on this thread, and a tree over
        every partition state changes thousands of times in one controller operation.
        ZooKeeper 3.6-3.8 have no narrower type for a persistent watch (PersistentRecursive
        came in 3.9), so a one-shot watch on the same path goes too: call this before arming
        the ones to keep. One connection's requests are applied in order. Local callbacks are
        left alone (`unwatch_tree` drops a tree watch's). None armed is fine."""
        full = self._client.normalize_path(path)
        try:
            await self._client.session.send(protocol.RemoveWatchesRequest(path=full, type=_WATCHER_TYPE_ANY))
        except zk_exc.NoWatcher:
            return
        except Exception as e:
            raise translate(e, path) from e

    # --- reads ------------------------------------------------------------------------------

    async def _read(self, path: str, call: Callable[[], Any]) -> Any:
        """Run an idempotent read, retrying through a connection loss (e.g. the ZooKeeper
        server we were connected to died) for up to one session timeout, as Kafka's
        ZooKeeperClient does; only then report the session as unavailable."""
        deadline = asyncio.get_running_loop().time() + self._session_timeout_ms / 1000.0
        while True:
            try:
                return await call()
            except (zk_exc.TimeoutError, zk_exc.ConnectError, zk_exc.ConnectionLoss, OSError) as e:
                if asyncio.get_running_loop().time() >= deadline or self._closing:
                    raise translate(e, path) from e
                await asyncio.sleep(0.1)
            except Exception as e:
                raise translate(e, path) from e

    @_on_io_thread
    async def get(self, path: str, watch: bool = False) -> tuple[bytes, ZnodeStat]:
        data, stat = await self._read(path, lambda: self._client.get(path, watch=watch))
        return (data or b""), ZnodeStat.of(stat)

    @_on_io_thread
    async def get_or_none(self, path: str, watch: bool = False) -> tuple[bytes, ZnodeStat] | None:
        try:
            return await self.get(path, watch=watch)
        except ZkNoNodeError:
            if watch:
                # A get on a missing node sets no watch; an exists does (ZooKeeper semantics).
                if await self.exists(path, watch=True) is not None:
                    return await self.get(path, watch=watch)
            return None

    @_on_io_thread
    async def exists(self, path: str, watch: bool = False) -> ZnodeStat | None:
        full = self._client.normalize_path(path)
        try:
            response = await self._read(path, lambda: self._client.send(protocol.ExistsRequest(path=full, watch=watch)))
        except ZkNoNodeError:
            return None
        return ZnodeStat.of(response.stat)

    @_on_io_thread
    async def get_children(self, path: str, watch: bool = False) -> list[str]:
        children = await self._read(path, lambda: self._client.get_children(path, watch=watch))
        return sorted(children)

    @_on_io_thread
    async def get_children_or_empty(self, path: str, watch: bool = False) -> list[str]:
        try:
            return await self.get_children(path, watch=watch)
        except ZkNoNodeError:
            if watch:
                await self.exists(path, watch=True)
            return []

    @_on_io_thread
    async def pipelined(self, calls: Iterable[Callable[[], Any]]) -> list[Any]:
        """Run many read coroutines with at most `max_in_flight` outstanding on the session
        (zookeeper.max.in.flight.requests); results in call order."""
        semaphore = asyncio.Semaphore(self._max_in_flight)

        async def bounded(call: Callable[[], Any]) -> Any:
            async with semaphore:
                return await call()

        return list(await asyncio.gather(*(bounded(c) for c in calls)))

    @_on_io_thread
    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, ZnodeStat] | None]:
        """Many reads, in call order; a missing znode gives None. Batched with multiRead where
        the server has it (3.6+), else pipelined single reads."""
        if not paths:
            return []
        if self._multi_read is not False:
            try:
                return await self._get_many_multi_read(paths)
            except _MultiReadUnsupported:
                log.warning("ZooKeeper has no multiRead (needs 3.6+); reading znodes one by one")
                self._multi_read = False
        return await self.pipelined([functools.partial(self.get_or_none, p) for p in paths])

    async def _get_many_multi_read(self, paths: Sequence[str]) -> list[tuple[bytes, ZnodeStat] | None]:
        batches = [paths[i : i + MULTI_READ_BATCH] for i in range(0, len(paths), MULTI_READ_BATCH)]
        results = await self.pipelined([functools.partial(self._multi_read_batch, b) for b in batches])
        flat: list[tuple[bytes, ZnodeStat] | None] = []
        for batch in results:
            flat.extend(batch)
        return flat

    async def _multi_read_batch(self, paths: Sequence[str]) -> list[tuple[bytes, ZnodeStat] | None]:
        chroot = self._chroot or ""

        def request() -> Any:
            # Our paths are already normalized: prefixing the chroot is all aiozk's normalize_path does.
            return self._client.session.send(MultiReadRequest([chroot + p for p in paths]))

        try:
            response = await self._read(paths[0], request)
        except ControllerError as e:
            if isinstance(e.__cause__, zk_exc.Unimplemented | zk_exc.UnknownError):
                raise _MultiReadUnsupported() from e
            raise
        self._multi_read = True
        out: list[tuple[bytes, ZnodeStat] | None] = []
        for path, item in zip(paths, response.results, strict=True):
            if isinstance(item, int):
                if item == NO_NODE:
                    out.append(None)
                    continue
                raise translate(zk_exc.get_response_error(item), path)
            out.append(item)
        return out

    # --- writes -----------------------------------------------------------------------------

    @_on_io_thread
    async def create(self, path: str, data: bytes = b"", ephemeral: bool = False, sequential: bool = False) -> OpResult:
        result = (await self.multi([CreateOp(path, data, ephemeral, sequential)]))[0]
        if result.stat is None:
            # ZooKeeper answers a create inside a multi without the stat; the czxid is needed
            # (broker epoch), so read it.
            # None when someone deleted it in between: the create itself succeeded.
            result = OpResult(result.op, result.path, await self.exists(result.path))
        return result

    @_on_io_thread
    async def set_data(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        try:
            return ZnodeStat.of(await self._client.set(path, data, version))
        except Exception as e:
            raise translate(e, path) from e

    @_on_io_thread
    async def delete(self, path: str, version: int = -1) -> None:
        full = self._client.normalize_path(path)
        try:
            await self._client.send(protocol.DeleteRequest(path=full, version=version))
        except Exception as e:
            raise translate(e, path) from e

    @_on_io_thread
    async def ensure_path(self, path: str) -> None:
        """Create `path` and its parents as persistent empty znodes where missing."""
        parts = [p for p in path.split("/") if p]
        current = ""
        for part in parts:
            current = f"{current}/{part}"
            if await self.exists(current) is not None:
                continue
            try:
                await self.create(current)
            except ZkNodeExistsError:
                pass

    def _full_paths(self, paths: list[str]) -> list[str]:
        """aiozk's normalize_path of each path (the chroot prefixed, empty components dropped).
        A multi's paths are ours, already normal: checked for all of them at once in C loops,
        they only get the chroot (one Python call per path, 10k at a controlled shutdown of a
        broker leading 10k, was on the session's thread, which shares the GIL with the
        controller's loop)."""
        joined = "\n".join(paths)
        if (
            joined.startswith("/")
            and joined.count("\n/") == len(paths) - 1
            and "//" not in joined
            and "/\n" not in joined
            and not joined.endswith("/")
        ):
            chroot = self._client.chroot  # aiozk's, normalized
            return [chroot + p for p in paths] if chroot else paths
        return [self._client.normalize_path(p) for p in paths]

    @_on_io_thread
    async def multi(self, ops: Sequence[ZkOp], session_id: int | None = None) -> list[OpResult]:
        """Run `ops` atomically. Raises the first failing op's translated error, its `op_index` naming the op.

        With `session_id`, the ops are sent only on that session (checked on the session's
        thread as the request goes out): a controller's fenced write must never go out on a
        newer session than the one it was elected in (ZkUnavailableError if it would)."""
        if not ops:
            return []
        full_paths = self._full_paths([op.path for op in ops])
        request = WriteMultiRequest(ops, full_paths, self._client.default_acl)
        if session_id is not None and self.session_id != session_id:
            raise ZkUnavailableError(f"session 0x{session_id:x} has ended; not sending on 0x{self.session_id:x}")
        try:
            response = await self._client.send(request)
        except Exception as e:
            raise translate(e, ops[0].path) from e
        denormalize = self._client.denormalize_path
        chrooted = bool(self._client.chroot)
        results: list[OpResult] = []
        for index, (op, full, reply) in enumerate(zip(ops, full_paths, response.responses, strict=False)):
            if isinstance(reply, OpReply):
                path = reply.path or full
                results.append(OpResult(op, denormalize(path) if chrooted else path, reply.stat))
                continue
            if isinstance(reply, BaseException):
                if isinstance(reply, zk_exc.RolledBack | zk_exc.RuntimeInconsistency):
                    continue
                raise translate(reply, op.path).at_op(index)
            # An op type the fast parser leaves to aiozk (none ZkClient sends today).
            stat = getattr(reply, "stat", None)
            path = denormalize(getattr(reply, "path", None) or full)
            results.append(OpResult(op, path, ZnodeStat.of(stat) if stat is not None else None))
        if len(results) != len(ops):
            # Every op was rolled back without a named cause: treat as unavailable and let the caller retry.
            raise ZkUnavailableError(f"multi of {len(ops)} ops rolled back without an error")
        return results
