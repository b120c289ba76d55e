"""The leadership timeline outside Spark's window: the controllers' leader changes, written by
Spark as Parquet files, read, sorted and scanned with Arrow and numpy in Python tasks
(partition_tasks.py), which write the leadership table themselves, and the narrow timeline the
offline intervals read.

timelines.leadership defines each change's previous leader and the next change's time and
position with one window over the changes (`timelines.leadership_by_window`); this computes the
same rows, column for column (tests/pipeline/test_leadership_scan.py compares the two on
generated changes and on whole histories). Why: at 10M events that window's stage was the
largest after the ingest in the partitions' branch (827k rows, each with two arrays and three
strings: 5.6 task-seconds, sorting 1.2 of them), and writing the table from its cache another
2.3; Spark's write of the changes, Arrow's sort and the tasks' own write of the table took about
1.3 s less of the step alone (bench/results and issue 13's notes).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from controller_svc.analytics import partition_tasks
from controller_svc.analytics.events_files import EventsFiles

# The window's order within a partition.
SORT_COLUMNS = ("partition", "topic", "cluster", "ts", "leader_epoch", "file_id", "block", "mid")
POSITION_FIELDS = ("ts", "file_id", "block", "mid")
# What the leadership table leaves out of the timeline (job.py: the positions are the job's own).
TABLE_DROPS = ("from_pos", "until_pos", "block", "mid")
# What the offline intervals read of the timeline (timelines.offline_intervals' `leaders`).
POSITION_DDL = "struct<ts: bigint, file_id: int, block: bigint, mid: bigint>"
TIMELINE_DDL = (
    "cluster string, topic string, partition bigint, leader bigint, leader_epoch bigint, "
    f"from_pos {POSITION_DDL}, until_pos {POSITION_DDL}"
)
ROWS_DIR = "rows"
TIMELINE_DIR = "timeline"
SUCCESS_MARKER = partition_tasks.SUCCESS_MARKER


def leadership(changes: DataFrame, work_dir: str, table_dir: str) -> DataFrame:
    """Writes the leadership table of `changes` (timelines.leader_changes) into `table_dir` (a
    local directory, replaced) as Spark's window and the job's write would, and returns the
    timeline the offline intervals read (TIMELINE_DDL). `work_dir`: a local directory of the
    job's own, which must stay until the returned frame has been read (the caller removes it)."""
    spark = changes.sparkSession
    rows_dir, timeline_dir = os.path.join(work_dir, ROWS_DIR), _prepared(work_dir, table_dir)
    changes.write.parquet(rows_dir)
    partition_tasks.run(spark, _scan_task, rows_dir, timeline_dir, table_dir)
    return _written(spark, timeline_dir, table_dir)


def leadership_from_files(spark: SparkSession, files: EventsFiles, work_dir: str, table_dir: str) -> DataFrame:
    """leadership() of the changes in the events table's local files (`files`), which the
    tasks read themselves (changes_of_share) rather than what Spark selects and writes of them:
    no Spark query (at 1M events that write was a stage of 1 s in a new process)."""
    timeline_dir = _prepared(work_dir, table_dir)
    partition_tasks.run(spark, _files_task, files, timeline_dir, table_dir)
    return _written(spark, timeline_dir, table_dir)


def _prepared(work_dir: str, table_dir: str) -> str:
    """Empties the working and table directories and returns the timeline's directory."""
    timeline_dir = os.path.join(work_dir, TIMELINE_DIR)
    shutil.rmtree(work_dir, ignore_errors=True)
    shutil.rmtree(table_dir, ignore_errors=True)
    os.makedirs(timeline_dir)
    os.makedirs(table_dir)
    return timeline_dir


def _written(spark: SparkSession, timeline_dir: str, table_dir: str) -> DataFrame:
    # As Spark's writer marks a table written whole.
    with open(os.path.join(table_dir, SUCCESS_MARKER), "w", encoding="utf-8"):
        pass
    return spark.read.schema(TIMELINE_DDL).parquet(timeline_dir)


def _scan_task(args: tuple[Any, ...]) -> int:
    return scan_share(*args)


def _files_task(args: tuple[Any, ...]) -> int:
    files, timeline_dir, table_dir, share, shares = args
    return write_share(changes_of_share(files, share, shares), timeline_dir, table_dir, share)


def changes_of_share(files: EventsFiles, share: int, shares: int) -> Any:
    """The leader changes (timelines.leader_changes' columns, in its order) of the partitions
    whose number is `share` modulo `shares`: the controllers' elections, and their leader -1
    (partition.offline, its leader -1 when the record has none)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    longs = {name: pa.int64() for name in ("partition", "ts", "controller_epoch", "leader", "leader_epoch")}
    isr = pa.list_(pa.int64())
    elected = partition_tasks.in_share(
        files.read(
            "partition.leader_elected",
            {
                "topic": pa.string(),
                **longs,
                "isr": isr,
                "prev_isr": isr,
                "strategy": pa.string(),
                "unclean": pa.bool_(),
            },
        ),
        share,
        shares,
    )
    offline = partition_tasks.in_share(
        files.read("partition.offline", {"topic": pa.string(), **longs, "isr": isr}), share, shares
    )
    count = offline.num_rows
    offline = (
        offline.set_column(
            offline.schema.get_field_index("leader"),
            "leader",
            pc.fill_null(offline["leader"], pa.scalar(-1, pa.int64())),
        )
        .append_column("prev_isr", pa.nulls(count, isr))
        .append_column("strategy", pa.nulls(count, pa.string()))
        .append_column("unclean", pa.nulls(count, pa.bool_()))
    )
    columns = [
        *("cluster", "topic", "partition", "ts", "file_id", "block", "mid", "controller_epoch"),
        *("leader", "leader_epoch", "isr", "prev_isr", "strategy", "unclean"),
    ]

    def changes(table: Any, change: str) -> Any:
        chosen = table.select(columns)
        return chosen.append_column("change", pa.repeat(pa.scalar(change, pa.string()), chosen.num_rows))

    return pa.concat_tables([changes(elected, "elected"), changes(offline, "offline")])


def scan_share(rows_dir: str, timeline_dir: str, table_dir: str, share: int, shares: int) -> int:
    """One task: the partitions whose number is `share` modulo `shares` (write_share)."""
    return write_share(partition_tasks.read_share(rows_dir, share, shares), timeline_dir, table_dir, share)


def write_share(changes: Any, timeline_dir: str, table_dir: str, share: int) -> int:
    """A share's whole partitions' changes in the window's order, with their neighbours'
    columns; writes its part of the table (zstd, as Spark's writer in session.build) and of the
    timeline, each a file even when empty, and returns its rows."""
    table = with_neighbours(partition_tasks.sorted_by(changes, SORT_COLUMNS))
    partition_tasks.write_part(table.drop_columns(list(TABLE_DROPS)), table_dir, share, compression="zstd")
    timeline = table.select(["cluster", "topic", "partition", "leader", "leader_epoch", "from_pos", "until_pos"])
    partition_tasks.write_part(timeline, timeline_dir, share)
    return int(table.num_rows)


def with_neighbours(table: Any) -> Any:
    """Whole partitions' changes (leader_changes' columns, sorted as SORT_COLUMNS) with the window's
    columns: prev_leader (the leader of the change before, in the partition), until_ts and
    until_pos (the next change's time and position), from_pos (the change's own position)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = table.num_rows
    first = partition_tasks.partition_starts(table)
    last = np.ones(rows, dtype=bool)
    last[:-1] = first[1:]
    # Each row's neighbour in the table; where there is none in its partition, the result is
    # null whatever the index (the row itself, to stay in bounds).
    before = pa.array(np.where(first, np.arange(rows), np.arange(rows) - 1))
    after = pa.array(np.where(last, np.arange(rows), np.arange(rows) + 1))
    no_previous, no_next = pa.array(first), pa.array(last)
    fields = [table[name].combine_chunks() for name in POSITION_FIELDS]
    return (
        table.append_column(
            "prev_leader", pc.if_else(no_previous, pa.scalar(None, pa.int64()), table["leader"].take(before))
        )
        .append_column("until_ts", pc.if_else(no_next, pa.scalar(None, pa.int64()), table["ts"].take(after)))
        .append_column(
            "until_pos",
            pa.StructArray.from_arrays([f.take(after) for f in fields], names=list(POSITION_FIELDS), mask=no_next),
        )
        .append_column("from_pos", pa.StructArray.from_arrays(fields, names=list(POSITION_FIELDS)))
    )
