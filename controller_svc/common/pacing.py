"""Long CPU-bound steps that yield to the event loop as they go, by count and by time.

A step that owns its state (the controller's event task, the standby's copy under its lock)
can pause between items and still see one consistent state; how often it must pause is not a
count of items but the loop's time: a slice counted for a usual hour (tens of milliseconds)
is seconds in an hour when the machine is four times slower, and meanwhile nothing else on the
loop runs (gRPC answers, the senders, the metrics page).
"""

from __future__ import annotations

import asyncio

# The loop's time a paced step may run between two yields, whatever its count: a count sized
# for a usual hour is seconds in a slow one (50k partitions' metadata digests at takeover held
# the loop 2.2 s in a `bench.failover` hour four times slower than usual).
PACE_BUDGET_S = 0.05


class Pacer:
    """Yields to the loop every `size` items or once `budget_s` of the loop's clock has passed
    since the last yield, whichever comes first.

    The clock is the running loop's (`loop.time()`): the real one in production; in the
    simulation the virtual clock, which stands still while a step runs, so there the yields
    fall by count alone and a seeded run stays the same run."""

    def __init__(self, size: int, budget_s: float | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._size = size
        self._budget_s = PACE_BUDGET_S if budget_s is None else budget_s
        self._done = 0
        self._since = self._loop.time()
        self.yields = 0

    async def before(self, items: int = 1) -> None:
        """About to do `items` more: first yield if the items done since the last yield reach
        the count, or the time since it the budget."""
        if self._done >= self._size or (self._done and self._loop.time() - self._since >= self._budget_s):
            await asyncio.sleep(0)
            self.yields += 1
            self._done = 0
            self._since = self._loop.time()
        self._done += items
