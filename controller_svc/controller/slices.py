"""Scans of a whole cluster's partitions or replicas that yield to the event loop as they go.

At 1M partitions one pass over every partition state, or over a broker's 600k replicas, is
hundreds of milliseconds of CPU, and an operation made several (a controlled shutdown's or a
broker failure's scans held the controller's loop for 4-15 s in `bench.failover` at 1M). The
controller's event task owns the context and the state machines (only it changes them), so
a scan it makes can pause between slices and still see one consistent state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TypeVar

_T = TypeVar("_T")

# Items examined between two yields to the loop (tens of milliseconds of CPU).
SCAN_SLICE = 20_000


async def keep_in_slices(items: Sequence[_T], keep: Callable[[_T], bool], size: int = SCAN_SLICE) -> list[_T]:
    """`[item for item in items if keep(item)]`, yielding to the loop every `size` items."""
    kept: list[_T] = []
    for start in range(0, len(items), size):
        if start:
            await asyncio.sleep(0)
        kept.extend(filter(keep, items[start : start + size]))
    return kept
