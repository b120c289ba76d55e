"""PySpark's Python worker daemon (`pyspark.daemon`), with zip archives on the import path read
once rather than before every task, the tasks' modules imported and frozen for the garbage
collector before it forks a worker (freeze_preloaded), and each task's socket acknowledging at
once (acknowledging_at_once).

Before each task a PySpark worker calls `importlib.invalidate_caches()`
(`pyspark.worker_util.setup_spark_files`), and on Python 3.10 and 3.11 a zip importer re-reads
its archive's whole directory there (CPython gh-103200; since 3.12 invalidation only marks the
cache stale). A local worker's path holds three archives, PySpark's `pyspark.zip`, py4j's and
Spark's core jar (5,264 entries): on a 2-core machine every task paid about 180 ms for them,
whatever it did (33 tasks that return their input took 3.0 s in a warm JVM, 0.86 s from this
daemon: bench.analytics_python_tasks), and the analysis runs its ingest, leadership and
offline-interval work as Python tasks.

Here an archive's directory is read again only when its file changed (its modification time,
size or inode), which is when re-reading could find anything new. `session.build` names this
module as `spark.python.daemon.module` on a local master, where the workers run the driver's
own Python and packages; the daemon forks the workers, which inherit the change.
"""

from __future__ import annotations

import gc
import importlib
import os
import socket
import sys
import zipimport
from collections.abc import Callable
from typing import Any

# What the analysis' Python tasks run and import (ingest.py's fast path, partition_tasks.run's
# callers), imported by the daemon before it forks a worker: see freeze_preloaded.
TASK_MODULES = (
    "numpy",
    "pyarrow.compute",
    "pyarrow.dataset",
    "pyarrow.json",
    "pyarrow.parquet",
    "controller_svc.analytics.arrow_ingest",
    "controller_svc.analytics.leadership_scan",
    "controller_svc.analytics.offline_files",
    "controller_svc.analytics.offline_scan",
    "controller_svc.analytics.record_search",
)

# The signature of each archive's file when its directory was last read.
_read_as: dict[str, tuple[int, int, int] | None] = {}


def _signature(archive: str) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(archive)
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


def read_archives_once() -> bool:
    """Makes zip importers re-read an archive's directory on invalidation only when the file
    changed. Returns False where the standard library already invalidates lazily (3.12+)."""
    if sys.version_info >= (3, 12) or getattr(zipimport.zipimporter.invalidate_caches, "_reads_once", False):
        return False
    eager = zipimport.zipimporter.invalidate_caches

    def invalidate_caches(self: Any) -> None:
        signature = _signature(self.archive)
        if signature is not None and _read_as.get(self.archive) == signature:
            return
        eager(self)
        _read_as[self.archive] = signature

    invalidate_caches._reads_once = True  # type: ignore[attr-defined]
    # The archives imported from so far were read as the process started: as they are now.
    for archive in list(getattr(zipimport, "_zip_directory_cache", {})):
        _read_as[archive] = _signature(archive)
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]
    return True


def freeze_preloaded(modules: tuple[str, ...] = TASK_MODULES) -> int:
    """Imports the tasks' modules, then moves every object alive into the collector's permanent
    generation (gc.freeze), which the workers forked from here inherit. PySpark's worker runs a
    full collection after every task (`pyspark.daemon.manager`), which walked every object of
    PySpark, pyarrow and numpy each time (15-25 ms a task on a 2-core machine; with the socket
    below, 33 trivial tasks 0.13 s against 0.84 s: bench.analytics_python_tasks). Frozen
    objects are still freed when their last reference goes; only a cycle among them would
    outlive its use. A module that cannot be imported is left out: a task that needs it fails
    as it would have, and its caller falls back to Spark's reader or queries. Returns how many
    objects were frozen."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def acknowledging_at_once(worker: Callable[[socket.socket, bool], int]) -> Callable[[socket.socket, bool], int]:
    """`pyspark.daemon.worker` (which runs one task on the socket from the JVM) with the socket in
    TCP quick-ACK mode first. The JVM sends a task in several small writes on a loopback TCP
    socket without TCP_NODELAY (PythonWorkerFactory): Nagle's algorithm holds each write until
    the one before it is acknowledged, and Linux delays the worker's ACK up to 40 ms, so every
    Python task waited about 40 ms doing nothing: most of what a trivial Python task cost
    (bench.analytics_python_tasks times it with and without this daemon). The kernel
    may leave the mode on its own, hence set again before every task. A socket that has no such
    option (not TCP, not Linux) is left as it is."""
    quick_ack = getattr(socket, "TCP_QUICKACK", None)

    def run(sock: socket.socket, authenticated: bool) -> int:
        if quick_ack is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, quick_ack, 1)
            except OSError:
                pass
        return worker(sock, authenticated)

    return run


def main() -> None:
    read_archives_once()
    from pyspark import daemon

    freeze_preloaded()
    # manager() looks the name up in its module for every task it forks or reuses a worker for.
    daemon.worker = acknowledging_at_once(daemon.worker)
    daemon.manager()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
