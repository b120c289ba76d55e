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

Freezing after a load is not enough: one operation at 1M partitions (a broker failure: 600k
replicas leave their ISRs) itself creates millions of objects, and the collector's rule (a
full collection whenever the objects that survived young collections grow by a quarter)
ran full collections over them again and again while the operation went on: 26% of the
GIL-holding samples of such an operation were `gc_collect_main`, and the ZooKeeper thread
could not run for 9 s (profiled with py-spy --gil --native at 1M partitions). So the
collector is off while the controller handles an event (and while a broker applies a
request, and while a standby loads its copy); what the step left alive is frozen at its end
when it is a bulk, and the collector is on again between steps.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterator

from prometheus_client import Gauge

log = logging.getLogger(__name__)

FROZEN_OBJECTS = Gauge(
    "kcontroller_gc_frozen_objects",
    "About the objects moved to the collector's permanent generation so far (gc.freeze after bulk "
    "steps: the container objects each step left alive, by the collector's own count), never walked "
    "again; frozen objects freed since are still counted",
)

# Below this many changes (partitions in a request, znodes in a load) a freeze is not worth it.
BULK_THRESHOLD = 10_000


def freeze_after_bulk_load(what: str, size: int) -> bool:
    """Freeze every object alive now when `size` (the changes `what` made) is a bulk one."""
    if size < BULK_THRESHOLD:
        return False
    started = time.monotonic()
    # What the freeze moves, about: the youngest generation's count, the container objects made
    # and still alive since its last collection (none runs during a step), i.e. what the bulk
    # step left alive; the older generations' few since the last freeze are not counted. Any
    # exact count walks objects: gc.get_objects of the young generations listed the millions a
    # step at 1M partitions leaves (a 3.1 s hold of the controller's loop after a controlled
    # shutdown there, found by the loop monitor's held_in), the permanent generation's own
    # count (gc.get_freeze_count) every frozen object (90 ms per 9M on an idle core).
    moving = gc.get_count()[0]
    gc.freeze()  # splices the generations' lists: no walk
    FROZEN_OBJECTS.inc(moving)
    log.debug(
        "%s: %d objects moved to the collector's permanent generation in %.1f ms",
        what,
        moving,
        (time.monotonic() - started) * 1000,
    )
    return True


@contextlib.contextmanager
def no_collection_during(what: str) -> Iterator[None]:
    """The collector off for one step; at its end, freeze what it left alive if that is a bulk
    (the collector's count of new container objects still alive), then the collector on again.
    A step inside another (or concurrent with it on the loop) leaves the switch to the outer."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        grown = gc.get_count()[0]
        if grown >= BULK_THRESHOLD:
            freeze_after_bulk_load(what, grown)
        gc.enable()
