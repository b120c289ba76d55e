"""Virtual time for an asyncio loop with no real I/O (the simulation's processes talk through
the ZooKeeper model and in-process calls only).

The loop's `time()` reads a counter; when the loop has nothing ready and would wait for its
next timer, the counter jumps to that timer instead of sleeping. Timers then fire in the order
of their virtual deadlines, a session timeout passes in no real time, and a run is a function
of its inputs alone. The controller's timers and deadlines use the loop's clock
(`asyncio.sleep`, `loop.time()`), so they follow.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from typing import Any


class StuckError(RuntimeError):
    """The run used up its real-time budget: something spins without letting time pass."""


class VirtualClock:
    def __init__(self, start: float = 1000.0, real_budget_s: float = 60.0) -> None:
        self.now = start
        self.real_deadline = time.monotonic() + real_budget_s

    def __repr__(self) -> str:
        return f"VirtualClock(now={self.now:.3f})"

    def time(self) -> float:
        return self.now


class _JumpingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """Never blocks: a wait of `timeout` seconds moves the virtual clock instead."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is not None and timeout > 0:
            self._clock.now += timeout
        if time.monotonic() > self._clock.real_deadline:
            raise StuckError(f"no progress within the real-time budget at virtual {self._clock.now:.3f}")
        return super().select(0)


def new_virtual_loop(clock: VirtualClock) -> asyncio.AbstractEventLoop:
    loop = asyncio.SelectorEventLoop(_JumpingSelector(clock))
    loop.time = clock.time  # type: ignore[method-assign]
    return loop
