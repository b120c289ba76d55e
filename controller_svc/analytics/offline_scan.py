"""The offline intervals' last step outside Spark's windows: each partition's timeline of
losses, regains and deletions, written by Spark as narrow Parquet files, then read, sorted and
scanned with Arrow and numpy in Python tasks (one per core, each taking the partitions whose
number falls to it), which write the intervals for Spark to read.

timelines.offline_intervals defines the intervals with four dependent window operators over
the same rows (`_intervals_by_window`); this computes the same rows, column for column
(tests/pipeline/test_offline_scan.py compares the two on generated timelines and on whole
histories). Why: at 10M events the windows' stage was the largest left after the ingest (2.1M
rows, a shuffle, a sort and four windows, about 8 task-seconds), and in a new process it is
also code the JIT has to compile first; Arrow's sort and numpy's loops are compiled already.
Like the ingest's fast path, it needs a local master (the tasks run the driver's Python, with
pyarrow and numpy) and a local output directory; otherwise the windows run.

The rules, as the windows apply them, per partition in timeline order:
- a deletion starts a new generation (a recreated topic's epochs begin again);
- a regain closes when no loss of its generation came before it, or its leader epoch is above
  every such loss's (a null epoch never is: Spark's comparison with null is not true);
- only losses and closing changes remain; a segment is the losses after a close up to and
  including the next close (or the partition's last row, still open);
- each segment with a loss is one interval: its first loss (detected_ts, cause, epoch), its
  least fault time (a loss's last sign of life, else its time), its close (ts, change, leader).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from controller_svc.analytics import partition_tasks

LOST, REGAINED, DELETED = 0, 1, 2
# The windows' order within a partition, with the position struct's fields flat.
SORT_COLUMNS = (
    "partition",
    "topic",
    "cluster",
    "ts",
    "regain_last",
    "pos_ts",
    "file_id",
    "block",
    "mid",
    "cause",
    "epoch",
)
OUTPUT_DDL = (
    "cluster string, topic string, partition bigint, start_ts bigint, end_ts bigint, duration_ms bigint, "
    "detected_ts bigint, detection_ms bigint, cause string, end_cause string, lost_leader_epoch bigint, "
    "new_leader bigint, new_leader_epoch bigint"
)
ROWS_DIR = "rows"
INTERVALS_DIR = "intervals"


def available() -> bool:
    """Whether the driver's Python has what the tasks use (partition_tasks.available)."""
    return partition_tasks.available()


def change_code() -> Column:
    """The timeline row's `change` as LOST, REGAINED or DELETED."""
    change = F.col("change")
    return (
        F.when(change == "lost", F.lit(LOST))
        .when(change == "regained", F.lit(REGAINED))
        .when(change == "deleted", F.lit(DELETED))
        .cast("tinyint")
    )


def intervals(timeline_rows: DataFrame, work_dir: str) -> DataFrame:
    """The intervals of `timeline_rows` (offline_intervals' rows: keys, pos, ts, epoch, cause,
    change, new_leader, alive_ts, regain_last). `work_dir`: a local directory of the job's own,
    which must stay until the returned frame has been read (the caller removes it)."""
    spark = timeline_rows.sparkSession
    rows_dir, intervals_dir = os.path.join(work_dir, ROWS_DIR), os.path.join(work_dir, INTERVALS_DIR)
    shutil.rmtree(work_dir, ignore_errors=True)
    os.makedirs(intervals_dir)
    timeline_rows.select(
        "cluster",
        "topic",
        "partition",
        "ts",
        "regain_last",
        F.col("pos.ts").alias("pos_ts"),
        F.col("pos.file_id").alias("file_id"),
        F.col("pos.block").alias("block"),
        F.col("pos.mid").alias("mid"),
        "cause",
        "epoch",
        change_code().alias("change_code"),
        "new_leader",
        "alive_ts",
    ).write.parquet(rows_dir)
    partition_tasks.run(spark, _scan_task, rows_dir, intervals_dir)
    return spark.read.schema(OUTPUT_DDL).parquet(intervals_dir)


def _scan_task(args: tuple[str, str, int, int]) -> int:
    return scan_share(*args)


def scan_share(rows_dir: str, intervals_dir: str, share: int, shares: int) -> int:
    """One task: the partitions whose number is `share` modulo `shares` (so that each
    partition's rows are in one share), sorted and scanned; writes their intervals (an empty
    file when there are none, so that the directory always holds the schema) and returns how
    many."""
    import pyarrow as pa

    table = partition_tasks.sorted_by(partition_tasks.read_share(rows_dir, share, shares), SORT_COLUMNS)
    found = intervals_of(table)
    if found is None:
        found = pa.schema(_output_fields()).empty_table()
    partition_tasks.write_part(found, intervals_dir, share)
    return int(found.num_rows)


def _output_fields() -> list[Any]:
    import pyarrow as pa

    types = {"string": pa.string(), "bigint": pa.int64()}
    return [pa.field(name, types[kind]) for name, kind in (field.split() for field in OUTPUT_DDL.split(", "))]


def _longs(column: Any) -> tuple[Any, Any]:
    """A bigint column as numpy values (0 where null) and a validity mask."""
    import numpy as np
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    valid = ~np.asarray(array.is_null(), dtype=bool)
    return np.asarray(array.fill_null(0), dtype=np.int64), valid


def _greatest_so_far(run_starts: Any, values: Any, counted: Any) -> tuple[Any, Any]:
    """Per row, the greatest of `values` where `counted`, over its run so far (runs begin where
    `run_starts`): as (the distinct values, an index into them per row, -1 where none). The
    values are ranked first, so that one running maximum over run * width + rank serves every
    run at once, whatever the values' range."""
    import numpy as np

    distinct, rank_of = np.unique(values[counted], return_inverse=True)
    ranks = np.zeros(len(values), dtype=np.int64)
    ranks[counted] = rank_of + 1
    run = np.cumsum(run_starts) - 1
    width = len(distinct) + 1
    greatest = np.maximum.accumulate(run * width + ranks) - run * width
    return distinct, greatest - 1


def _in_run_so_far(run_starts: Any, flags: Any) -> Any:
    """Per row, how many rows of its run so far (itself included) have `flags`."""
    import numpy as np

    total = np.cumsum(flags)
    first = np.flatnonzero(run_starts)
    run = np.cumsum(run_starts) - 1
    return total - (total - flags)[first][run]


def intervals_of(table: Any) -> Any:
    """The intervals of whole partitions' timelines (the columns `intervals` writes, sorted
    as SORT_COLUMNS), as an Arrow table of OUTPUT_DDL; None if none."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return None
    ts, ts_valid = _longs(table["ts"])
    pos_ts, pos_ts_valid = _longs(table["pos_ts"])
    epoch, epoch_valid = _longs(table["epoch"])
    alive_ts, alive_valid = _longs(table["alive_ts"])
    new_leader, new_leader_valid = _longs(table["new_leader"])
    change = np.asarray(table["change_code"].combine_chunks().fill_null(-1), dtype=np.int64)
    lost, regained, deleted = change == LOST, change == REGAINED, change == DELETED
    partition_starts = partition_tasks.partition_starts(table)

    # Generations: a deletion begins one. A (partition, generation) run's losses so far, and
    # the greatest of their epochs (the windows' max of (generation, epoch) over losses).
    generation_starts = partition_starts | deleted
    losses_so_far = _in_run_so_far(generation_starts, lost)
    epochs, highest = _greatest_so_far(generation_starts, epoch, lost & epoch_valid)
    above = np.zeros(len(change), dtype=bool)
    has_highest = highest >= 0
    above[has_highest] = epoch[has_highest] > epochs[highest[has_highest]]
    # A loss of this generation with a null epoch (and none with an epoch) is the highest:
    # nothing compares above it, as with Spark's null comparison.
    closes = deleted | (regained & ((losses_so_far == 0) | (epoch_valid & above)))

    kept = np.flatnonzero(lost | closes)
    if len(kept) == 0:
        return None
    kept_partition = (np.cumsum(partition_starts) - 1)[kept]
    kept_starts = np.ones(len(kept), dtype=bool)
    kept_starts[1:] = kept_partition[1:] != kept_partition[:-1]
    kept_closes, kept_lost = closes[kept], lost[kept]
    # The windows' lag(closes), true on a partition's first row: a segment begins there.
    after_close = kept_starts.copy()
    after_close[1:] |= kept_closes[:-1]
    opens = kept_lost & after_close
    has_loss = kept_lost | ~after_close
    last_of_partition = np.ones(len(kept), dtype=bool)
    last_of_partition[:-1] = kept_starts[1:]
    ends = kept_closes | last_of_partition

    # The segment's least fault so far: its greatest negated fault.
    fault = np.where(alive_valid[kept], alive_ts[kept], ts[kept])
    fault_valid = alive_valid[kept] | ts_valid[kept]
    negated_faults, least = _greatest_so_far(after_close, -fault, kept_lost & fault_valid)
    # The partition's last opening loss so far (the windows' last(opens, ignorenulls)).
    opening = np.maximum.accumulate(np.where(opens, np.arange(len(kept)), -1))
    partition_first = np.flatnonzero(kept_starts)[np.cumsum(kept_starts) - 1]
    opening = np.where(opening >= partition_first, opening, -1)

    out = np.flatnonzero(ends & has_loss)
    if len(out) == 0:
        return None
    rows = kept[out]
    first = opening[out]
    first_valid = first >= 0
    first_rows = kept[np.where(first_valid, first, 0)]
    least_at = least[out]
    fault_ts_valid = least_at >= 0
    fault_ts = (
        -negated_faults[np.where(fault_ts_valid, least_at, 0)] if len(negated_faults) else np.zeros(len(out), np.int64)
    )
    detected = pos_ts[first_rows]
    detected_valid = first_valid & pos_ts_valid[first_rows]
    # F.least: the lesser of the two, ignoring a null.
    start = np.where(
        fault_ts_valid & detected_valid, np.minimum(fault_ts, detected), np.where(fault_ts_valid, fault_ts, detected)
    )
    start_valid = fault_ts_valid | detected_valid
    is_end = kept_closes[out]
    end_ts, end_valid = ts[rows], is_end & ts_valid[rows]
    end_change = change[rows]
    end_cause = np.full(len(out), None, dtype=object)
    end_cause[is_end & (end_change == REGAINED)] = "leader_applied"
    end_cause[is_end & (end_change == DELETED)] = "topic_deleted"

    def longs(values: Any, valid: Any) -> Any:
        return pa.array(values, type=pa.int64(), mask=~valid)

    keys = table.select(["cluster", "topic", "partition"]).take(pa.array(rows))
    cause = pc.if_else(pa.array(first_valid), table["cause"].take(pa.array(first_rows)), pa.scalar(None, pa.string()))
    return pa.table(
        {
            "cluster": keys["cluster"],
            "topic": keys["topic"],
            "partition": keys["partition"],
            "start_ts": longs(start, start_valid),
            "end_ts": longs(end_ts, end_valid),
            "duration_ms": longs(end_ts - start, end_valid & start_valid),
            "detected_ts": longs(detected, detected_valid),
            "detection_ms": longs(detected - start, detected_valid & start_valid),
            "cause": cause,
            "end_cause": pa.array(end_cause, type=pa.string()),
            "lost_leader_epoch": longs(epoch[first_rows], first_valid & epoch_valid[first_rows]),
            "new_leader": longs(new_leader[rows], is_end & new_leader_valid[rows]),
            "new_leader_epoch": longs(epoch[rows], is_end & epoch_valid[rows]),
        }
    )
