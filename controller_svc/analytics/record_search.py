"""timelines.last_record_before in Python tasks: for each query (keys, a time), the latest
record time of the same keys before it (at or before it when inclusive). Spark writes the
queries and the records as one narrow Parquet table; one task per core reads the keys that fall
to it (by a hash of the keys), sorts queries and records together with Arrow and reads each
query's answer off a running index with numpy (partition_tasks.py); Spark reads the answers.

Why: the failover incidents and the offline intervals each search the lost node's last sign of
life, and Spark's search (time buckets cut into slots, a broadcast join, two aggregates, and a
query of its own to choose between that and a sort) is several stages of small plans, which a
new JVM must also generate and compile code for. Alternated with it at 1M events, the cold
command took 32.4 s against 33.9 s (medians of four), the offline intervals' step about 2 s
less; warm runs were within the noise (bench/results/analytics-1m-record-search-ab-*.json).
Like the timelines' scans it needs a local master and a local directory;
timelines.last_record_before falls back to Spark's search otherwise, or when a task fails.

The answer is the plain join's: a query meets the records whose keys equal its own (a null key
meets none) and whose time is before its own (or equal, when inclusive); null when none does.
tests/pipeline/test_sorted_joins.py compares it with that join on random data.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from controller_svc.analytics import partition_tasks

ROWS_DIR = "rows"
ANSWERS_DIR = "answers"
# The hash of a row's keys, which decides its task (partition_tasks.read_share).
SHARE_COLUMN = "_share"
TIME_COLUMN, QUERY_COLUMN = "_t", "_query"
# The key types a task can read back and write again unchanged.
KEY_TYPES: dict[str, str] = {"string": "string", "bigint": "int64", "int": "int32"}


def searchable(frame: DataFrame, keys: Sequence[str]) -> bool:
    """Whether the keys' types are ones the tasks carry (KEY_TYPES)."""
    return all(frame.schema[key].dataType.simpleString() in KEY_TYPES for key in keys)


def answers(
    timed: DataFrame, records: DataFrame, keys: Sequence[str], inclusive: bool, alias: str, work_dir: str
) -> DataFrame:
    """Per distinct (keys, `_at`) of `timed` (the query times, none null), the latest `ts` of
    `records` with the same keys before `_at` (at or before it when `inclusive`), as `alias`
    (null when there is none): columns keys, `_at`, `alias`. `work_dir`: a local directory of
    the caller's own, which must stay until the returned frame has been read."""
    spark = timed.sparkSession
    key_fields = [timed.schema[key] for key in keys]
    rows_dir, answers_dir = os.path.join(work_dir, ROWS_DIR), os.path.join(work_dir, ANSWERS_DIR)
    shutil.rmtree(work_dir, ignore_errors=True)
    os.makedirs(answers_dir)
    # Both sides' keys as the queries' types, so that equal keys hash alike.
    share = F.hash(*[F.col(key).cast("string") for key in keys]).cast("bigint").alias(SHARE_COLUMN)
    queries = timed.select(*keys, F.col("_at").alias(TIME_COLUMN), F.lit(True).alias(QUERY_COLUMN))
    found = records.select(
        *[F.col(field.name).cast(field.dataType) for field in key_fields],
        F.col("ts").cast("bigint").alias(TIME_COLUMN),
        F.lit(False).alias(QUERY_COLUMN),
    )
    queries.unionByName(found).select("*", share).write.parquet(rows_dir)
    key_types = tuple((field.name, field.dataType.simpleString()) for field in key_fields)
    partition_tasks.run(spark, _search_task, rows_dir, answers_dir, key_types, inclusive, alias)
    answer_schema = T.StructType([*key_fields, T.StructField("_at", T.LongType()), T.StructField(alias, T.LongType())])
    return spark.read.schema(answer_schema).parquet(answers_dir)


def _search_task(args: tuple[Any, ...]) -> int:
    return search_share(*args)


def _rows_schema(key_types: Sequence[tuple[str, str]]) -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            *[pa.field(name, pa.type_for_alias(KEY_TYPES[kind])) for name, kind in key_types],
            pa.field(TIME_COLUMN, pa.int64()),
            pa.field(QUERY_COLUMN, pa.bool_()),
            pa.field(SHARE_COLUMN, pa.int64()),
        ]
    )


def search_share(
    rows_dir: str,
    answers_dir: str,
    key_types: Sequence[tuple[str, str]],
    inclusive: bool,
    alias: str,
    share: int,
    shares: int,
) -> int:
    """One task: the keys whose hash is `share` modulo `shares`; writes their queries' answers
    (a file even when there are none) and returns how many."""
    table = partition_tasks.read_share(rows_dir, share, shares, SHARE_COLUMN, _rows_schema(key_types))
    found = latest_before(table, [name for name, _ in key_types], inclusive, alias)
    partition_tasks.write_part(found, answers_dir, share)
    return int(found.num_rows)


def latest_before(table: Any, keys: Sequence[str], inclusive: bool, alias: str) -> Any:
    """The answers for the queries among `table`'s rows (keys, _t, _query: queries and records
    together, in any order): one row per distinct (keys, _t) of a query, with `_at` its time
    and `alias` the latest record time before it (at or before, when `inclusive`), or null."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    # A null key meets no record, as in a join; a record without a time is no answer.
    usable = functools.reduce(pc.and_, [pc.is_valid(table[name]) for name in (*keys, TIME_COLUMN)])
    table = table.filter(usable)
    # At the same time a record counts for the query only when inclusive: it sorts first then.
    query_order = "ascending" if inclusive else "descending"
    order = [*[(key, "ascending") for key in keys], (TIME_COLUMN, "ascending"), (QUERY_COLUMN, query_order)]
    table = table.take(pc.sort_indices(table, sort_keys=order))
    rows = table.num_rows
    is_query = np.asarray(table[QUERY_COLUMN].combine_chunks().fill_null(False), dtype=bool)
    times = np.asarray(table[TIME_COLUMN].combine_chunks(), dtype=np.int64)
    starts = partition_tasks.run_starts(table, keys)
    run_first = np.flatnonzero(starts)[np.cumsum(starts) - 1] if rows else np.zeros(0, dtype=np.int64)
    # The last record row so far (rows are in time order within a run): the latest record.
    last_record = np.maximum.accumulate(np.where(is_query, -1, np.arange(rows))) if rows else np.zeros(0, np.int64)
    found = last_record >= run_first
    queries = np.flatnonzero(is_query)
    latest = pa.array(times[np.where(found, last_record, 0)][queries], type=pa.int64(), mask=~found[queries])
    picked = table.select(list(keys)).take(pa.array(queries, type=pa.int64()))
    answered = pa.table(
        [*[picked[key] for key in keys], pa.array(times[queries], type=pa.int64()), latest],
        names=[*keys, "_at", alias],
    )
    # The same query time twice (two losses in one millisecond) has one answer: one row.
    distinct = answered.group_by([*keys, "_at"], use_threads=False).aggregate([(alias, "max")])
    return distinct.select([*keys, "_at", f"{alias}_max"]).rename_columns([*keys, "_at", alias])
