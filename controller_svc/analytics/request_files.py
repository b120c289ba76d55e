"""The request_latency table and the latency histogram from the events table's local Parquet
files, computed in the driver with Arrow and numpy instead of Spark's two queries.

timelines.request_latency and timelines.latency_histogram define them; this gives the same rows
(tests/pipeline/test_request_files.py compares the two) except that the percentiles are exact,
as table_figures' are: Spark's percentile_approx (accuracy 10,000) is exact up to about 10,000
requests per (cluster, broker, API) and within 1/10,000 of the rank beyond; here the value at
rank ceil(q * n) of the sorted values, which Spark's exact summary answers. Why: those queries
were 5 Spark stages over the few request.completed records (16k at 1M events), and the last
branch of the job to finish once the invariants left Spark (invariant_files.py). Like the other
readers of the events table's files it needs the table in a local directory; job.py falls back
to Spark's queries otherwise, or when this fails.
"""

from __future__ import annotations

from typing import Any

from controller_svc.analytics import partition_tasks, table_figures
from controller_svc.analytics.events_files import EventsFiles, NotExact

SUCCESS_MARKER = partition_tasks.SUCCESS_MARKER
# timelines.latency_histogram's buckets: ceil(log2(ms)) within these, ms below 1e-9 as 1e-9.
LOWEST_BUCKET, HIGHEST_BUCKET, LEAST_MS = -4, 16, 1e-9
MEASURES = (("queue", "queue_ms"), ("rtt", "rtt_ms"))


def latency_schema() -> Any:
    """timelines.request_latency's columns as Spark writes them."""
    import pyarrow as pa

    return pa.schema(
        [
            ("cluster", pa.string()),
            ("broker", pa.int64()),
            ("api", pa.string()),
            ("requests", pa.int64()),
            ("errors", pa.int64()),
            ("partitions", pa.int64()),
            *(
                (f"{measure}_{figure}_ms", pa.float64())
                for measure in ("queue", "rtt")
                for figure in ("p50", "p99", "max")
            ),
        ]
    )


def completed(files: EventsFiles) -> Any:
    """The request.completed records with what the two figures read."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = files.read(
        "request.completed",
        {
            "broker": pa.int64(),
            "api": pa.string(),
            "error": pa.int64(),
            "partitions": pa.int64(),
            "queue_ms": pa.float64(),
            "rtt_ms": pa.float64(),
        },
    )
    for name in ("cluster", "broker", "api"):
        if table[name].null_count:
            # Spark groups nulls as one key: not worth copying for records the ingest requires them of.
            raise NotExact(f"a completed request without {name}")
    for _, column in MEASURES:
        if pc.any(pc.is_nan(table[column])).as_py():
            raise NotExact(f"a completed request with {column} NaN, which Spark orders above every number")
    return table


def latency(table: Any) -> Any:
    """timelines.request_latency of the completed requests `table`, per (cluster, broker, api)
    in that order (the percentiles exact)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = ["cluster", "broker", "api"]
    ordered = table.take(pc.sort_indices(table, sort_keys=[(name, "ascending") for name in keys]))
    starts = np.flatnonzero(partition_tasks.run_starts(ordered, keys))
    ends = np.append(starts[1:], ordered.num_rows) if len(starts) else starts
    error = ordered["error"].combine_chunks()
    failed = np.asarray(pc.fill_null(pc.not_equal(error, 0), False), dtype=np.int64)
    partitions = np.asarray(ordered["partitions"].combine_chunks().fill_null(0), dtype=np.int64)
    values = {}
    for _, column in MEASURES:
        array = ordered[column].combine_chunks()
        values[column] = (np.asarray(array.fill_null(0.0), dtype=np.float64), ~np.asarray(array.is_null(), dtype=bool))
    rows: dict[str, list[Any]] = {name: [] for name in latency_schema().names}
    firsts = ordered.select(keys).take(pa.array(starts, pa.int64())).to_pydict() if len(starts) else {}
    for at, (start, end) in enumerate(zip(starts, ends, strict=True)):
        for name in keys:
            rows[name].append(firsts[name][at])
        rows["requests"].append(int(end - start))
        rows["errors"].append(int(failed[start:end].sum()))
        rows["partitions"].append(int(partitions[start:end].sum()))
        for measure, column in MEASURES:
            numbers, valid = values[column]
            present = numbers[start:end][valid[start:end]]
            rows[f"{measure}_p50_ms"].append(table_figures.percentile(present, 0.5))
            rows[f"{measure}_p99_ms"].append(table_figures.percentile(present, 0.99))
            rows[f"{measure}_max_ms"].append(float(present.max()) if len(present) else None)
    return pa.table(rows, schema=latency_schema())


def histogram(table: Any) -> list[dict[str, Any]]:
    """timelines.latency_histogram of the completed requests `table`: per API, measure and
    bucket, the count. The bucket is Spark's ceil(log2(greatest(ms, 1e-9))), log2 computed as
    Spark's Log2 does (ln x / ln 2; the same buckets as numpy's log2 for the powers of two
    within the clamped range); a null ms counts as 1e-9 (greatest skips a null)."""
    import numpy as np
    import pyarrow.compute as pc

    found: dict[tuple[str, str, int], int] = {}
    apis = table["api"].combine_chunks()
    for measure, column in MEASURES:
        ms = np.asarray(table[column].combine_chunks().fill_null(LEAST_MS), dtype=np.float64)
        buckets = np.clip(np.ceil(np.log(np.maximum(ms, LEAST_MS)) / np.log(2.0)), LOWEST_BUCKET, HIGHEST_BUCKET)
        for api in pc.unique(apis).to_pylist():
            mine = buckets[np.asarray(pc.equal(apis, api), dtype=bool)].astype(np.int64)
            numbers, counts = np.unique(mine, return_counts=True)
            for bucket, count in zip(numbers.tolist(), counts.tolist(), strict=True):
                found[(api, measure, bucket)] = count
    return [
        {"api": api, "measure": measure, "bucket": bucket, "count": count}
        for (api, measure, bucket), count in sorted(found.items())
    ]


def write(files: EventsFiles, table_dir: str) -> tuple[Any, list[dict[str, Any]]]:
    """Writes the request_latency table into `table_dir` (a local directory, replaced; zstd as
    Spark's writer, marked written whole) and returns it with the histogram's rows."""
    table = completed(files)
    found = latency(table)
    partition_tasks.replace_table(found, table_dir)
    return found, histogram(table)
