"""How long the process's event loop is held, and the process's sign of life.

A step that computes without yielding (a failover over 100k partitions, a broker applying a
LeaderAndIsr for all of them) holds the loop: gRPC handlers, request senders and timers on it
wait. The ZooKeeper session has its own thread (zk/io_thread.py), so such a step no longer
costs the session, but operators still need to see it. A task sleeps a fixed interval and
measures how late it wakes: that lateness is the time the loop was held. Every lag is in the
`kcontroller_event_loop_lag_ms` histogram; a lag above the warning threshold (a third of the
ZooKeeper session timeout by default: a heartbeat interval) is logged with the step that was
running, counted, and written to the state-change log as `event_loop.blocked`.

The same task writes `node.alive` to the state-change log at a fixed interval (DESIGN.md
contract 5): the last sign of life the analysis uses to count detection time. A held loop
writes none, which is the truth about a process that cannot act.

A lateness says how long, not where: the step's name is the event being handled, and a hold
outside any event (or inside one of its hundred sub-steps) said nothing more (a failover at 1M
partitions held its loop 4.4 s "in no named step"; an earlier hold was found only by attaching
`py-spy dump` by hand). So a thread of the monitor looks at the loop's thread while it is held:
once the loop has not ticked for half the warning threshold, it takes the loop thread's stack
(`sys._current_frames`, as py-spy dump or Java's thread dump does) every quarter threshold
until the loop runs again; a hold that reaches the threshold is reported with those stacks
(`held_in` in the warning and the `event_loop.blocked` record), a shorter one's are dropped.
(Sampling only past the threshold missed every hold that ended less than a check interval
after it: the 1M run's 2.0 s hold against a 2 s threshold came without a stack.) Nothing is
sampled while the loop ticks: the thread wakes every quarter threshold (half a second at the
6 s session timeout) and compares two clock readings.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

from prometheus_client import Counter

from controller_svc.common.histogram import KafkaHistogram
from controller_svc.common.state_change_log import StateChangeLog

log = logging.getLogger(__name__)

LOOP_LAG_MS = KafkaHistogram(
    "kcontroller_event_loop_lag_ms", "How late the event loop ran a timer: the time it was held by a step (ms)"
)
LOOP_BLOCKED = Counter(
    "kcontroller_event_loop_blocked", "Times a step held the event loop longer than the warning threshold"
)

TICK_S = 0.1
ALIVE_INTERVAL_S = 0.5
# Stacks kept per hold (a hold of minutes is sampled every quarter threshold: the first ones
# say where it started, the distinct ones where it went).
MAX_HELD_SAMPLES = 5
# Frames of a stack kept: the innermost, where the CPU is, outward.
HELD_FRAMES = 12


def warn_threshold_s(session_timeout_ms: int) -> float:
    """A third of the session timeout: the interval at which a ZooKeeper client on this loop
    would have had to send a heartbeat."""
    return max(session_timeout_ms / 3000.0, TICK_S)


class EventLoopMonitor:
    def __init__(
        self,
        state_log: StateChangeLog,
        warn_after_s: float,
        current_step: Callable[[], str | None] = lambda: None,
        tick_s: float = TICK_S,
        alive_interval_s: float = ALIVE_INTERVAL_S,
    ) -> None:
        self._state_log = state_log
        self.warn_after_s = warn_after_s
        self._current_step = current_step
        self._tick_s = tick_s
        self._alive_interval_s = alive_interval_s
        self.max_lag_s = 0.0
        # Written by the loop at every tick (a float's assignment is atomic), read by the sampler.
        self._last_tick = time.monotonic()
        self._ticks = 0
        self._loop_thread: int | None = None
        # (the tick count the hold followed, stack) taken by the sampler thread
        self._held: list[tuple[int, str]] = []
        self._held_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"EventLoopMonitor(warn_after_s={self.warn_after_s}, max_lag_s={self.max_lag_s:.3f})"

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        stopped = threading.Event()
        sampler = threading.Thread(
            target=self._sample_while_held, args=(stopped,), name="event-loop-sampler", daemon=True
        )
        sampler.start()
        try:
            last = loop.time()
            last_alive = float("-inf")
            while True:
                self._last_tick = time.monotonic()
                await asyncio.sleep(self._tick_s)
                now = loop.time()
                self.observe(max(now - last - self._tick_s, 0.0))
                if now - last_alive >= self._alive_interval_s:
                    self._state_log.record("node.alive")
                    last_alive = now
                last = now
        finally:
            stopped.set()

    def _sample_while_held(self, stopped: threading.Event) -> None:
        """The sampler thread: the loop thread's stack, every quarter threshold while the loop
        has not ticked for half of one."""
        while not stopped.wait(self.warn_after_s / 4):
            try:
                ticks, last_tick = self._ticks, self._last_tick
                if time.monotonic() - last_tick < self.warn_after_s / 2 or self._loop_thread is None:
                    continue
                frame = sys._current_frames().get(self._loop_thread)
                if frame is None or self._ticks != ticks:
                    continue  # the loop ran meanwhile: not the hold any more
                stack = held_in(frame)
                with self._held_lock:
                    if len(self._held) < MAX_HELD_SAMPLES and (ticks, stack) not in self._held:
                        self._held.append((ticks, stack))
            except Exception:  # the monitor's own fault must not end the sampling silently
                log.exception("event loop sampler: a sample failed")

    def _take_held(self, ticks: int) -> list[str]:
        """The stacks sampled during the hold that followed tick `ticks`; older ones dropped."""
        with self._held_lock:
            held, self._held = self._held, []
        return [stack for after, stack in held if after == ticks]

    def observe(self, lag_s: float) -> None:
        ticks = self._ticks
        self._ticks = ticks + 1
        LOOP_LAG_MS.observe(lag_s * 1000.0)
        self.max_lag_s = max(self.max_lag_s, lag_s)
        if lag_s < self.warn_after_s:
            if self._held:
                self._take_held(ticks)  # a sample of a hold that ended just under the threshold
            return
        step = self._current_step()
        held = self._take_held(ticks)
        LOOP_BLOCKED.inc()
        self._state_log.record("event_loop.blocked", blocked_ms=round(lag_s * 1000.0, 1), step=step, held_in=held)
        log.warning(
            "event loop held for %.0f ms%s (warning above %.0f ms): timers, gRPC and request senders waited%s",
            lag_s * 1000.0,
            f" by {step}" if step else "",
            self.warn_after_s * 1000.0,
            "".join(f"\n  held in: {stack}" for stack in held),
        )


def held_in(frame: FrameType | None, limit: int = HELD_FRAMES) -> str:
    """A stack as one line, innermost frame first: `file:line function < caller < ...`, with
    the file's path from its package (`controller_svc/controller/term.py`). `limit` frames,
    and when none of them is the project's own (deep in a library), `...` and the first that
    is: the step of ours that called it."""
    parts: list[str] = []
    ours = False
    while frame is not None:
        code = frame.f_code
        path = _short_path(code.co_filename)
        project = path.startswith(_PROJECT)
        if len(parts) < limit:
            parts.append(f"{path}:{frame.f_lineno} {code.co_name}")
            ours = ours or project
        elif ours:
            break
        elif project:
            parts += ["...", f"{path}:{frame.f_lineno} {code.co_name}"]
            break
        frame = frame.f_back
    return " < ".join(parts)


_PROJECT = ("controller_svc/", "broker_stub/")


def _short_path(filename: str) -> str:
    for package in ("/controller_svc/", "/broker_stub/", "/site-packages/", "/lib/python"):
        at = filename.rfind(package)
        if at >= 0:
            return filename[at + 1 :]
    return filename
