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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

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

    def __repr__(self) -> str:
        return f"EventLoopMonitor(warn_after_s={self.warn_after_s}, max_lag_s={self.max_lag_s:.3f})"

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        last_alive = float("-inf")
        while True:
            await asyncio.sleep(self._tick_s)
            now = loop.time()
            self.observe(max(now - last - self._tick_s, 0.0))
            if now - last_alive >= self._alive_interval_s:
                self._state_log.record("node.alive")
                last_alive = now
            last = now

    def observe(self, lag_s: float) -> None:
        LOOP_LAG_MS.observe(lag_s * 1000.0)
        self.max_lag_s = max(self.max_lag_s, lag_s)
        if lag_s < self.warn_after_s:
            return
        step = self._current_step()
        LOOP_BLOCKED.inc()
        self._state_log.record("event_loop.blocked", blocked_ms=round(lag_s * 1000.0, 1), step=step)
        log.warning(
            "event loop held for %.0f ms%s (warning above %.0f ms): timers, gRPC and request senders waited",
            lag_s * 1000.0,
            f" by {step}" if step else "",
            self.warn_after_s * 1000.0,
        )
