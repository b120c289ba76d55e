"""The ZooKeeper session's own thread and event loop.

Kafka keeps ZooKeeper I/O off the controller thread (ZooKeeperClient's send and event threads),
so a controller step that computes for seconds never costs it its session. Here the aiozk
session (its connection, heartbeats, request replies and watch events) lives on an event loop
of its own in a daemon thread; the process's main loop hands it coroutines and gets their
results back as futures. Python's GIL switch interval (5 ms) bounds how long a busy main
thread can keep this one from sending a heartbeat, so the session survives any step of the
controller, however long it holds the main loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import ctypes.util
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from controller_svc.common.histogram import KafkaHistogram

log = logging.getLogger(__name__)

ZK_THREAD_LAG_MS = KafkaHistogram(
    "kcontroller_zookeeper_thread_lag_ms",
    "How late the ZooKeeper session's own thread ran a timer: the time it could not run at all (ms)",
)

T = TypeVar("T")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; plain asyncio works too
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _name_os_thread(name: str) -> None:
    """The kernel's name of the calling thread (what `top -H` and /proc show; at most 15
    bytes), so an operator can tell the session's thread from the controller's. Best effort."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.pthread_setname_np(ctypes.c_ulong(threading.get_ident()), name.encode()[:15])
    except (OSError, AttributeError):
        pass


# How often the thread's own loop checks how late it runs (the lag below).
LAG_TICK_S = 0.1


class ZkIoThread:
    """A daemon thread running one event loop until `stop`.

    The thread watches its own loop's lag: this loop only sends heartbeats and reads replies,
    so a late timer here means the thread itself could not run (another thread holding the GIL
    in one long C call, a collection of the whole heap, or no core free), the one way the
    session can still be lost while the main loop computes. A lag above `warn_after_s` (a
    heartbeat interval) is logged and counted (`kcontroller_zookeeper_thread_lag_ms`)."""

    def __init__(self, name: str = "zookeeper-io", warn_after_s: float | None = None) -> None:
        self.warn_after_s = warn_after_s
        self.max_lag_s = 0.0
        self.loop = _new_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._started.wait()

    def __repr__(self) -> str:
        return f"ZkIoThread({self._thread.name!r}, alive={self._thread.is_alive()})"

    def _run(self) -> None:
        _name_os_thread(self._thread.name)
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self._lag_watch = self.loop.create_task(self._watch_lag())  # cancelled with the others below
        try:
            self.loop.run_forever()
        finally:
            try:
                pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
                for task in pending:
                    task.cancel()
                if pending:
                    self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            finally:
                self.loop.close()

    async def _watch_lag(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(LAG_TICK_S)
            now = loop.time()
            lag_s = max(now - last - LAG_TICK_S, 0.0)
            last = now
            ZK_THREAD_LAG_MS.observe(lag_s * 1000.0)
            self.max_lag_s = max(self.max_lag_s, lag_s)
            if self.warn_after_s is not None and lag_s > self.warn_after_s:
                log.warning(
                    "the ZooKeeper session's thread %s could not run for %.0f ms (warning above %.0f ms): "
                    "heartbeats were late; the GIL or the cores were held elsewhere",
                    self._thread.name,
                    lag_s * 1000,
                    self.warn_after_s * 1000,
                )

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def on_this_thread(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the ZooKeeper loop and await its result on the caller's loop.
        Cancelling the caller cancels the coroutine there."""
        if self.on_this_thread():
            return await coro
        if not self.alive:
            coro.close()
            raise RuntimeError("the ZooKeeper I/O thread has stopped")
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return await asyncio.wrap_future(future)

    def call(self, callback: Callable[..., Any], *args: Any) -> None:
        """Run a plain callback on the ZooKeeper loop (in order with `run`'s coroutines)."""
        if self.on_this_thread():
            callback(*args)
        elif self.alive:
            self.loop.call_soon_threadsafe(callback, *args)

    def stop(self, timeout_s: float = 5.0) -> None:
        if self.on_this_thread():
            raise RuntimeError("the ZooKeeper I/O thread cannot stop itself")
        if self.alive:
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("the ZooKeeper I/O thread did not stop within %.1f s", timeout_s)


def deliver_to(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    """Hand a callback to the owner's loop from the ZooKeeper thread; dropped once that loop
    has closed (the process is exiting)."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        log.debug("dropping %r: its event loop is closed", callback)
