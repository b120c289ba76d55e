"""The figures of the offline intervals (per cluster availability, offline partitions over time,
the longest intervals) and of the controllers (failover availability, the failovers and tenures
the report lists) from their tables' local Parquet files, read with Arrow and computed with numpy
in the driver, instead of Spark queries.

job.py's `_offline_availability`, `_offline_series`, `_failover_availability` and the listing
queries define the figures; this computes the same values (tests/pipeline/test_table_figures.py
compares the two) except that the percentiles are exact: Spark's percentile_approx (accuracy
10,000) is exact up to about 10,000 values per cluster and within 1/10,000 of the rank beyond;
here the value at rank ceil(q * n) of the sorted values, as Spark's exact summary answers
(QuantileSummaries.query). Why: the offline figures' three queries were 12 Spark stages on the
last step of the job's longest branch (2.0 s of a cold run at 1M events, 0.6-0.8 s warm), the
controllers' four another 6 at the end of the other long branch, on tables of a few dozen to
400k rows that Arrow reads in milliseconds. Like the timelines' scans, it needs the tables in a
local directory (job.py falls back to the queries otherwise)."""

from __future__ import annotations

import math
from typing import Any

# Spark's percentile_approx default accuracy: a quantile this close to 0 or 1 is the least or
# the greatest value (QuantileSummaries.query).
RELATIVE_ERROR = 1.0 / 10_000


def read(table_dir: str) -> Any:
    """The offline intervals table in `table_dir`, as an Arrow table without Spark's metadata."""
    import pyarrow.dataset as ds

    return ds.dataset(table_dir, format="parquet").to_table().replace_schema_metadata(None)


def _clusters(table: Any) -> list[tuple[Any, Any]]:
    """(cluster name, row mask) per distinct cluster (a null name is one cluster, as Spark's
    groupBy has it)."""
    import numpy as np
    import pyarrow.compute as pc

    names = table["cluster"]
    result = []
    for name in pc.unique(names).to_pylist():
        mask = pc.is_null(names) if name is None else pc.fill_null(pc.equal(names, name), False)
        result.append((name, np.asarray(mask, dtype=bool)))
    return result


def _longs(column: Any) -> tuple[Any, Any]:
    """A bigint column as numpy values (0 where null) and a validity mask."""
    import numpy as np

    array = column.combine_chunks()
    return np.asarray(array.fill_null(0), dtype=np.int64), ~np.asarray(array.is_null(), dtype=bool)


def percentile(values: Any, quantile: float) -> Any:
    """Spark's percentile_approx of `values` (a numpy array, no nulls) when its summary is exact:
    the value at rank ceil(quantile * n) of the sorted values (the least or the greatest within
    RELATIVE_ERROR of 0 or 1); None for no values."""
    import numpy as np

    count = len(values)
    if count == 0:
        return None
    ordered = np.sort(values)
    if quantile <= RELATIVE_ERROR:
        return ordered[0].item()
    if quantile >= 1 - RELATIVE_ERROR:
        return ordered[-1].item()
    rank = math.ceil(quantile * count)
    return ordered[min(max(rank, 1), count) - 1].item()


def offline_availability(table: Any) -> dict[Any, dict[str, Any]]:
    """Per cluster, what job._offline_availability gives (the percentiles exact)."""
    import numpy as np
    import pyarrow as pa

    duration, duration_valid = _longs(table["duration_ms"])
    detection, detection_valid = _longs(table["detection_ms"])
    open_ = np.asarray(table["end_ts"].combine_chunks().is_null(), dtype=bool)
    keys = table.select(["cluster", "topic", "partition"])
    result: dict[Any, dict[str, Any]] = {}
    for name, rows in _clusters(table):
        durations = duration[rows & duration_valid]
        detections = detection[rows & detection_valid]
        affected = keys.filter(pa.array(rows)).group_by(["topic", "partition"]).aggregate([]).num_rows
        result[name] = dict(
            offline_intervals=int(rows.sum()),
            partitions_affected=affected,
            offline_partition_ms=int(durations.sum()),
            longest_offline_ms=int(durations.max()) if len(durations) else None,
            p50_offline_ms=percentile(durations, 0.5),
            p99_offline_ms=percentile(durations, 0.99),
            still_offline=int((rows & open_).sum()),
            offline_detection_ms=int(detections.sum()),
            longest_offline_detection_ms=int(detections.max()) if len(detections) else None,
        )
    return result


def offline_series(table: Any, bounds: dict[Any, tuple[int, int]]) -> dict[Any, list[dict[str, Any]]]:
    """Offline partitions over time per cluster, as job._offline_series gives them: `bounds`
    has each cluster's first time and bucket width (clusters without are left out). Each
    bucket with a change: its start, its peak (the highest level after any millisecond's
    changes, netted, within it) and the level at its end."""
    import numpy as np

    start, start_valid = _longs(table["start_ts"])
    end, end_valid = _longs(table["end_ts"])
    result: dict[Any, list[dict[str, Any]]] = {}
    for name, rows in _clusters(table):
        if name not in bounds:
            continue
        first_ts, width = bounds[name]
        ts = np.concatenate([start[rows & start_valid], end[rows & end_valid]])
        delta = np.concatenate(
            [np.ones(int((rows & start_valid).sum()), np.int64), -np.ones(int((rows & end_valid).sum()), np.int64)]
        )
        if len(ts) == 0:
            continue
        # Spark's floor of a double quotient, computed the same way.
        bucket = np.floor((ts - first_ts).astype(np.float64) / float(width)).astype(np.int64)
        order = np.lexsort((ts, bucket))
        ts, bucket, delta = ts[order], bucket[order], delta[order]
        # One change per millisecond: the sum of its deltas.
        new_ms = np.ones(len(ts), dtype=bool)
        new_ms[1:] = (ts[1:] != ts[:-1]) | (bucket[1:] != bucket[:-1])
        ms_starts = np.flatnonzero(new_ms)
        net, ms_bucket = np.add.reduceat(delta, ms_starts), bucket[ms_starts]
        new_bucket = np.ones(len(net), dtype=bool)
        new_bucket[1:] = ms_bucket[1:] != ms_bucket[:-1]
        bucket_starts = np.flatnonzero(new_bucket)
        running = np.cumsum(net)
        before_bucket = (running - net)[bucket_starts][np.cumsum(new_bucket) - 1]
        within = running - before_bucket
        peaks = np.maximum(np.maximum.reduceat(within, bucket_starts), 0)
        levels = np.add.reduceat(net, bucket_starts)
        entries, level = [], 0
        for index, number in enumerate(ms_bucket[bucket_starts]):
            begin = level
            level += int(levels[index])
            entries.append({"ts": first_ts + int(number) * width, "peak": begin + int(peaks[index]), "last": level})
        result[name] = entries
    return result


def longest_offline(table: Any, limit: int) -> list[dict[str, Any]]:
    """The `limit` longest intervals (still open first, then by duration, then by start), as
    rows."""
    import pyarrow.compute as pc

    order = pc.sort_indices(
        table, sort_keys=[("duration_ms", "descending", "at_start"), ("start_ts", "ascending", "at_start")]
    )
    rows: list[dict[str, Any]] = table.take(order[:limit]).to_pylist()
    return rows


def failover_availability(table: Any) -> dict[Any, dict[str, Any]]:
    """Per cluster, what job._failover_availability gives (the median exact)."""
    import numpy as np

    total, total_valid = _longs(table["total_ms"])
    detection, detection_valid = _longs(table["detection_ms"])
    election, election_valid = _longs(table["election_ms"])
    # Spark's greatest(x, 0) skips a null: 0.
    detected = np.where(detection_valid, np.maximum(detection, 0), 0)
    elected = np.where(election_valid, np.maximum(election, 0), 0)
    result: dict[Any, dict[str, Any]] = {}
    for name, rows in _clusters(table):
        totals = total[rows & total_valid]
        detections = detection[rows & detection_valid]
        result[name] = dict(
            failovers=int(rows.sum()),
            longest_failover_ms=int(totals.max()) if len(totals) else None,
            p50_failover_ms=percentile(totals, 0.5),
            controller_gap_ms=int((detected[rows] + elected[rows]).sum()),
            failover_detection_ms=int(detected[rows].sum()),
            longest_failover_detection_ms=int(detections.max()) if len(detections) else None,
        )
    return result


def first_rows(table: Any, columns: list[str], limit: int) -> list[dict[str, Any]]:
    """The first `limit` rows in ascending order of `columns` (nulls first, as Spark's orderBy)."""
    import pyarrow.compute as pc

    order = pc.sort_indices(table, sort_keys=[(name, "ascending", "at_start") for name in columns])
    rows: list[dict[str, Any]] = table.take(order[:limit]).to_pylist()
    return rows
