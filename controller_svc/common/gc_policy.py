"""Python's cyclic garbage collector at 100k-1M partitions.

A full collection walks every container object the process holds, with the GIL held: at 1M
partitions that is tens of millions of objects (partition states, assignments, replica keys),
0.5-1 s per collection on an idle core and several times that on a loaded one. Collections
run whenever enough new objects accumulate, so a failover (millions of new replica keys) ran
several, and a GIL held that long also starves the ZooKeeper session's own thread
(adapters/zk/io_thread.py), which is how a session was lost mid-failover at 1M partitions.

The metadata is long-lived and acyclic (tuples, frozen dataclasses, dicts of them), so after
a bulk load it is moved to the collector's permanent generation (`gc.freeze`, as CPython's
documentation suggests for long-lived heaps) and no later collection walks it again. Objects
frozen still go by reference counting when dropped; only a cycle among them would never be
collected, which metadata does not form.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger(__name__)

# Below this many changes (partitions in a request, znodes in a load) a freeze is not worth it.
BULK_THRESHOLD = 10_000


def freeze_after_bulk_load(what: str, size: int) -> bool:
    """Freeze every object alive now when `size` (the changes `what` made) is a bulk one."""
    if size < BULK_THRESHOLD:
        return False
    started = time.monotonic()
    gc.freeze()
    log.debug(
        "%s: %d objects moved to the collector's permanent generation in %.1f ms",
        what,
        gc.get_freeze_count(),
        (time.monotonic() - started) * 1000,
    )
    return True
