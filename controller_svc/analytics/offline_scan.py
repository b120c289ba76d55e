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
The tasks also make two kinds of row themselves (`with_losses`): a leader lost with its broker
(each leadership's first loss of its broker, from the leadership timeline's files and the few
thousand losses) and a topic's deletion (for each of its partitions that lost a leader). Spark
joined every leadership with the losses for the first (827k leaderships at 10M events), and did
that join again for the second's partitions, before the rows were written.
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
from dataclasses import dataclass
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
LEADERS_DIR = "leaders"
LOSSES_DIR = "losses"
DELETIONS_DIR = "deletions"
# The rows' Parquet schema as Spark writes it (`intervals`): a share's own rows are cast to it.
ROWS_DDL = (
    "cluster string, topic string, partition bigint, ts bigint, regain_last int, pos_ts bigint, file_id int, "
    "block bigint, mid bigint, cause string, epoch bigint, change_code tinyint, new_leader bigint, alive_ts bigint"
)
POSITION_FIELDS = ("pos_ts", "file_id", "block", "mid")
# The position struct's own field names (timelines.position).
POSITION_DDL_FIELDS = ("ts", "file_id", "block", "mid")


@dataclass(frozen=True)
class BrokerLosses:
    """What the tasks need to add the timeline rows of brokers lost while leading, and of topic
    deletions, themselves (timelines.offline_intervals' `broker_lost` and `deleted`), rather
    than Spark joining every leadership with the losses and every deletion with the
    partitions that lost a leader.

    `leaders`: leadership_scan's TIMELINE_DDL rows; `leaders_dir`: the local Parquet directory
    they are read from, when they are (leadership_scan's timeline), else the tasks read what
    Spark writes of them; `losses`: (cluster, pos, ts, broker, cause, alive_ts), one row per
    broker a broker.change record names lost; `deletions`: (cluster, topic, pos, ts) of the
    topic.deleted records."""

    leaders: DataFrame
    leaders_dir: str | None
    losses: DataFrame
    deletions: DataFrame


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


def intervals(timeline_rows: DataFrame, work_dir: str, broker_losses: BrokerLosses | None = None) -> DataFrame:
    """The intervals of `timeline_rows` (offline_intervals' rows: keys, pos, ts, epoch, cause,
    change, new_leader, alive_ts, regain_last). `work_dir`: a local directory of the job's own,
    which must stay until the returned frame has been read (the caller removes it).
    `broker_losses`: the tasks add the rows of the leaders' broker losses and of the topics'
    deletions themselves (then `timeline_rows` holds neither)."""
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
    if broker_losses is None:
        partition_tasks.run(spark, _scan_task, rows_dir, intervals_dir)
    else:
        inputs = _write_loss_inputs(broker_losses, work_dir)
        partition_tasks.run(spark, _scan_with_losses_task, rows_dir, intervals_dir, *inputs)
    return spark.read.schema(OUTPUT_DDL).parquet(intervals_dir)


def _write_loss_inputs(broker_losses: BrokerLosses, work_dir: str) -> tuple[str, str, str]:
    """Writes what the tasks read besides the rows: the losses and deletions (few rows, every
    task reads them whole) and, unless they are in files already, the leaderships."""
    leaders_dir = broker_losses.leaders_dir
    if leaders_dir is None:
        leaders_dir = os.path.join(work_dir, LEADERS_DIR)
        broker_losses.leaders.select(
            "cluster", "topic", "partition", "leader", "leader_epoch", "from_pos", "until_pos"
        ).write.parquet(leaders_dir)
    position = [
        F.col(f"pos.{field}").alias(name) for field, name in zip(POSITION_DDL_FIELDS, POSITION_FIELDS, strict=True)
    ]
    losses_dir, deletions_dir = os.path.join(work_dir, LOSSES_DIR), os.path.join(work_dir, DELETIONS_DIR)
    broker_losses.losses.select("cluster", "broker", *position, "ts", "cause", "alive_ts").write.parquet(losses_dir)
    broker_losses.deletions.select("cluster", "topic", *position, "ts").write.parquet(deletions_dir)
    return leaders_dir, losses_dir, deletions_dir


def _scan_task(args: tuple[str, str, int, int]) -> int:
    return scan_share(*args)


def _scan_with_losses_task(args: tuple[str, str, str, str, str, int, int]) -> int:
    rows_dir, intervals_dir, leaders_dir, losses_dir, deletions_dir, share, shares = args
    return scan_share(rows_dir, intervals_dir, share, shares, (leaders_dir, losses_dir, deletions_dir))


def scan_share(
    rows_dir: str, intervals_dir: str, share: int, shares: int, loss_dirs: tuple[str, str, str] | None = None
) -> int:
    """One task: the partitions whose number is `share` modulo `shares` (so that each
    partition's rows are in one share), sorted and scanned; writes their intervals (an empty
    file when there are none, so that the directory always holds the schema) and returns how
    many. `loss_dirs`: the leaderships, losses and deletions the share's broker losses and
    deletions are found from (with_losses)."""
    table = partition_tasks.read_share(rows_dir, share, shares, schema=rows_schema())
    if loss_dirs is not None:
        table = with_losses(table, *read_loss_inputs(loss_dirs, share, shares))
    found = sorted_intervals(table)
    partition_tasks.write_part(found, intervals_dir, share)
    return int(found.num_rows)


def read_loss_inputs(loss_dirs: tuple[str, str, str], share: int, shares: int) -> tuple[Any, Any, Any]:
    """What with_losses reads besides a share's rows, from `loss_dirs` (the leaderships',
    losses' and deletions' directories): the share's leaderships, every loss and deletion."""
    leaders_dir, losses_dir, deletions_dir = loss_dirs
    return (
        partition_tasks.read_share(leaders_dir, share, shares),
        partition_tasks.read_all(losses_dir),
        partition_tasks.read_all(deletions_dir),
    )


def sorted_intervals(table: Any) -> Any:
    """The intervals of whole partitions' timeline rows (ROWS_DDL, in any order), as an Arrow
    table of OUTPUT_DDL (empty when there are none)."""
    import pyarrow as pa

    found = intervals_of(partition_tasks.sorted_by(table, SORT_COLUMNS))
    return pa.schema(_output_fields()).empty_table() if found is None else found


def rows_schema() -> Any:
    """ROWS_DDL as an Arrow schema."""
    import pyarrow as pa

    types = {"string": pa.string(), "bigint": pa.int64(), "int": pa.int32(), "tinyint": pa.int8()}
    return pa.schema([pa.field(name, types[kind]) for name, kind in (field.split() for field in ROWS_DDL.split(", "))])


def with_losses(rows: Any, leaders: Any, losses: Any, deletions: Any) -> Any:
    """A share's timeline rows (ROWS_DDL: partition.offline, log-dir failures and regains) with
    the rows of its leaderships' broker losses and of its topics' deletions added, as
    timelines.offline_intervals has Spark make them (`broker_lost`, `deleted`): Arrow tables
    in, an Arrow table of ROWS_DDL out, unsorted.

    `leaders`: the share's leaderships (cluster, topic, partition, leader, leader_epoch,
    from_pos, until_pos); `losses`: every broker loss (cluster, broker, the position's fields,
    ts, cause, alive_ts); `deletions`: every deletion (cluster, topic, the position's fields,
    ts). A leadership's broker loss is the first loss of its broker at or after the
    leadership's start, if before its end (timelines.first_loss_in_tenure); a deletion counts
    for each partition of its topic with a loss of any cause (it ends the interval open then)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = rows_schema()
    rows = rows.cast(schema)
    lost = _first_losses(leaders, losses)
    starts = pa.concat_tables([rows.filter(pc.equal(rows["change_code"], LOST)), lost]).select(
        ["cluster", "topic", "partition"]
    )
    deleted = _deletions_of(starts, deletions)
    return pa.concat_tables([rows, lost, deleted])


def _fields(table: Any, name: str) -> tuple[list[Any], Any]:
    """A position struct column's fields (numpy, nulls as the least int64, as Spark's order puts
    a null first) and the struct's validity."""
    import numpy as np

    column = table[name].combine_chunks()
    valid = ~np.asarray(column.is_null(), dtype=bool)
    values = [_least_if_null(column.field(i)) for i in range(column.type.num_fields)]
    return values, valid


def _least_if_null(column: Any) -> Any:
    """An integer column as int64 numpy values, a null as the least int64 (first, as in Spark's order)."""
    import numpy as np
    import pyarrow as pa

    return np.asarray(column.cast(pa.int64()).fill_null(np.iinfo(np.int64).min), dtype=np.int64)


def _first_losses(leaders: Any, losses: Any) -> Any:
    """The broker-loss rows (ROWS_DDL) of `leaders` (with_losses): one sort of the leaderships
    and the losses together by broker and position, each leadership followed by its broker's
    next loss."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = rows_schema()
    led = leaders.filter(pc.and_(pc.greater_equal(leaders["leader"], 0), pc.invert(pc.is_null(leaders["cluster"]))))
    # One loss per broker and position (a record naming a broker twice): the least (cause,
    # alive_ts), as Spark's min of the loss's struct.
    losses = losses.filter(pc.invert(pc.or_(pc.is_null(losses["cluster"]), pc.is_null(losses["broker"]))))
    losses = partition_tasks.sorted_by(losses, ("cluster", "broker", *POSITION_FIELDS, "cause", "alive_ts"))
    losses = losses.filter(pa.array(partition_tasks.run_starts(losses, ("cluster", "broker", *POSITION_FIELDS))))
    if led.num_rows == 0 or losses.num_rows == 0:
        return schema.empty_table()
    from_fields, _ = _fields(led, "from_pos")
    until_fields, until_valid = _fields(led, "until_pos")
    loss_fields = [_least_if_null(losses[name]) for name in POSITION_FIELDS]
    # Leaderships and losses in one order: by broker, position, and at the same position the
    # leadership first (a loss at its start counts).
    both = pa.table(
        {
            "cluster": pa.concat_arrays([led["cluster"].combine_chunks(), losses["cluster"].combine_chunks()]),
            "broker": pa.concat_arrays([led["leader"].combine_chunks(), losses["broker"].combine_chunks()]),
            **{name: np.concatenate([from_fields[i], loss_fields[i]]) for i, name in enumerate(POSITION_FIELDS)},
            "is_loss": np.concatenate([np.zeros(led.num_rows, np.int8), np.ones(losses.num_rows, np.int8)]),
            "row": np.concatenate([np.arange(led.num_rows), np.arange(losses.num_rows)]),
        }
    )
    both = partition_tasks.sorted_by(both, ("cluster", "broker", *POSITION_FIELDS, "is_loss"))
    is_loss = np.asarray(both["is_loss"], dtype=bool)
    row = np.asarray(both["row"], dtype=np.int64)
    count = both.num_rows
    group = np.cumsum(partition_tasks.run_starts(both, ("cluster", "broker"))) - 1
    # Each row's next loss at or after it, by a running minimum from the end.
    next_loss = np.minimum.accumulate(np.where(is_loss, np.arange(count), count)[::-1])[::-1]
    has_next = next_loss < count
    next_loss = np.where(has_next, next_loss, 0)
    found = ~is_loss & has_next & (group[next_loss] == group)
    leadership, loss = row[found], row[next_loss[found]]
    # Only a loss before the leadership's end (the next election) is the leadership's.
    before_end = ~until_valid[leadership] | _before(
        [values[loss] for values in loss_fields], [values[leadership] for values in until_fields]
    )
    leadership, loss = leadership[before_end], loss[before_end]
    taken_led, taken_loss = led.take(pa.array(leadership)), losses.take(pa.array(loss))
    nothing = pa.nulls(len(leadership), pa.int64())
    return pa.table(
        {
            "cluster": taken_led["cluster"],
            "topic": taken_led["topic"],
            "partition": taken_led["partition"],
            "ts": taken_loss["ts"],
            "regain_last": pa.array(np.zeros(len(leadership), np.int32)),
            **{name: taken_loss[name] for name in POSITION_FIELDS},
            "cause": taken_loss["cause"],
            "epoch": taken_led["leader_epoch"],
            "change_code": pa.array(np.full(len(leadership), LOST, np.int8)),
            "new_leader": nothing,
            "alive_ts": taken_loss["alive_ts"],
        }
    ).cast(schema)


def _before(left: list[Any], right: list[Any]) -> Any:
    """Per row, whether the position `left` (its fields as numpy arrays) comes before `right`."""
    import numpy as np

    before = np.zeros(len(left[0]), dtype=bool)
    equal = np.ones(len(left[0]), dtype=bool)
    for a, b in zip(left, right, strict=True):
        before |= equal & (a < b)
        equal &= a == b
    return before


def _deletions_of(starts: Any, deletions: Any) -> Any:
    """The deletion rows (ROWS_DDL) of the partitions in `starts` (cluster, topic, partition:
    those that lost a leader): each deletion of the partition's topic."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = rows_schema()
    keys = starts.group_by(["cluster", "topic", "partition"]).aggregate([])
    # Null names match nothing, as in Spark's join.
    deletions = deletions.filter(pc.invert(pc.or_(pc.is_null(deletions["cluster"]), pc.is_null(deletions["topic"]))))
    if keys.num_rows == 0 or deletions.num_rows == 0:
        return schema.empty_table()
    joined = keys.join(deletions, keys=["cluster", "topic"], join_type="inner")
    count = joined.num_rows
    nothing = pa.nulls(count, pa.int64())
    return pa.table(
        {
            "cluster": joined["cluster"],
            "topic": joined["topic"],
            "partition": joined["partition"],
            "ts": joined["ts"],
            "regain_last": pa.array(np.zeros(count, np.int32)),
            **{name: joined[name] for name in POSITION_FIELDS},
            "cause": pa.nulls(count, pa.string()),
            "epoch": nothing,
            "change_code": pa.array(np.full(count, DELETED, np.int8)),
            "new_leader": nothing,
            "alive_ts": nothing,
        }
    ).cast(schema)


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
