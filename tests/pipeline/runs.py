"""Helpers for tests that run the whole analysis: with some of the job's settings, and with a
record of what the ingest returned (ingest.FromTasks: what the fast path's tasks found besides
the records), to show where a figure came from."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest


@contextlib.contextmanager
def ingest_results() -> Iterator[list[Any]]:
    """Every ingest.ingest result while the block runs, in order."""
    from controller_svc.analytics import ingest

    seen: list[Any] = []
    real = ingest.ingest

    def recording(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        seen.append(found)
        return found

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ingest, "ingest", recording)
        yield seen


def analyze(spark: Any, logs: pathlib.Path, out: pathlib.Path, settings: dict[str, bool]) -> Any:
    """job.analyze of `logs` into `out` with the job's boolean `settings` (Spark conf names), unset after."""
    from controller_svc.analytics import job

    for name, on in settings.items():
        spark.conf.set(name, "true" if on else "false")
    try:
        return job.analyze(spark, [str(logs)], str(out))
    finally:
        for name in settings:
            spark.conf.unset(name)
