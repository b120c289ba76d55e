"""Reading state-change logs into one typed table of records, with each line's file and number.

One pass parses every line (with Spark's JSON reader where a scan of the file's bytes shows it
reads one row per line, census.py; line by line with `from_json` elsewhere); malformed lines
stay in the table (status `bad`), their reason worked out when they are read, and never stop
the job. The table is written to OUTDIR/events
partitioned by status and kind, and every analysis reads back only its kinds and columns, so
the JSON is parsed once.

A record is identified by (file_id, block, mid): its file's rank among the input files (by
name; OUTDIR/files names each), the byte offset of the file split it was read from and an id
that increases along the lines of that split. Line numbers are only computed for the few rows
an operator reads (malformed lines, violations' evidence), from a per-split table.
"""

from __future__ import annotations

import fnmatch
import functools
import logging
import math
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from py4j.protocol import Py4JJavaError
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from controller_svc.analytics import arrow_ingest, census, leader_epochs, node_index, partition_tasks, schema

log = logging.getLogger("analytics")

STATE_CHANGE_GLOB = "*.state-change.jsonl*"  # also .jsonl.gz: Spark decompresses by extension
MAX_BAD_VALUE_CHARS = 2000
# `--conf spark.kcontroller.arrowIngest=false` turns the ingest's fast path off (arrow_ingest.py).
FAST_PATH_CONF = "spark.kcontroller.arrowIngest"
# The leader-epoch check in the fast path's tasks (leader_epochs.py); false leaves it to Spark.
LEADER_EPOCHS_IN_TASKS_CONF = "spark.kcontroller.leaderEpochsInTasks"
# Node totals and node times from the fast path's tasks (node_index.py); false leaves them to
# scans of the events table.
NODE_INDEX_IN_TASKS_CONF = "spark.kcontroller.nodeIndexInTasks"

_SPARK_TYPES: dict[str, T.DataType] = {
    schema.LONG: T.LongType(),
    schema.DOUBLE: T.DoubleType(),
    schema.STRING: T.StringType(),
    schema.BOOLEAN: T.BooleanType(),
    schema.LONG_ARRAY: T.ArrayType(T.LongType()),
}


# A log file's directory (ClusterBy "dir"): the cluster its records belong to.
_DIRECTORY_PATTERN = r"^(.*)/[^/]+$"


class InputError(ValueError):
    """Bad input for the whole job (exit 2): a missing path, no records at all."""


@dataclass(frozen=True)
class ClusterBy:
    """How records are grouped into clusters: one history (`none`) or one per log directory (`dir`)."""

    mode: str

    def column(self, file: Column) -> Column:
        if self.mode == "dir":
            return F.regexp_extract(file, _DIRECTORY_PATTERN, 1)
        return F.lit("default")

    def of_file(self, file: str | None) -> str | None:
        """`column` in Python, for one file's name (None: no file, no cluster, as the left join
        in `attach` gives it)."""
        if self.mode != "dir":
            return "default"
        if file is None:
            return None
        # regexp_extract's answer where the pattern does not match: the empty string.
        found = re.match(_DIRECTORY_PATTERN, file, re.DOTALL)
        return found.group(1) if found is not None else ""

    def attach(self, frame: DataFrame, files: DataFrame | None) -> DataFrame:
        """Adds `cluster` to rows that carry a file_id; `files` is the files table (file_id,
        file), which only `dir` needs. One cluster needs no file name; per directory, each
        file's cluster is worked out once and joined by its id (a broadcast of one row per file)."""
        if self.mode != "dir":
            return frame.withColumn("cluster", F.lit("default"))
        assert files is not None, "clusters by directory need the files table"
        clusters = files.select("file_id", self.column(F.col("file")).alias("cluster"))
        return frame.join(F.broadcast(clusters), "file_id", "left")


def record_schema() -> T.StructType:
    """The typed fields of a record, and no corrupt-record column: with one, Spark's parser
    (FailureSafeParser) copies every parsed row field by field, by name, into a wider row, which
    made the JSON parse of 10M lines ~20% slower (bench.analytics' floor on the same files in one
    hour: 32.5 s with it, 27.5 s without, bench/results/analytics-10m-*no-corrupt-column.json).
    A line that fails to parse is a row of nulls without it, which `is_malformed` reports (no
    ts, node or kind); its text is read again from its file when the malformed lines are written."""
    return T.StructType([T.StructField(name, _SPARK_TYPES[kind]) for name, kind in schema.FIELDS])


def list_inputs(spark: SparkSession, inputs: Sequence[str]) -> list[str]:
    """The log files to read, through Hadoop's FileSystem so that s3a:// and hdfs:// work too: a
    directory contributes every `*.state-change.jsonl[.gz]` below it, a file itself. A file
    named twice (a directory and a file in it, overlapping directories) is read once.

    A local directory is walked in Python (local_files), as Hadoop's listing would name its
    files: Hadoop's listing costs a few Py4J calls per file, 0.2-0.3 s of every analysis of a
    few dozen files, with a warm JVM a tenth of a run at 20k events."""
    if not inputs:
        raise InputError("no input paths given")
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    files: set[str] = set()
    for path in inputs:
        hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
        fs = hadoop_path.getFileSystem(conf)
        if not fs.exists(hadoop_path):
            raise InputError(f"{path}: no such file or directory")
        status = fs.getFileStatus(hadoop_path)
        qualified = str(fs.makeQualified(hadoop_path).toString())
        if not status.isDirectory():
            files.add(qualified)
            continue
        local = local_files(qualified)
        files.update(local if local is not None else hadoop_files(fs, hadoop_path))
    return sorted(files)


def hadoop_files(fs: Any, directory: Any) -> list[str]:
    """Hadoop's recursive listing of `directory` (a Hadoop Path on `fs`): the state-change logs'
    qualified names."""
    found: list[str] = []
    listing = fs.listFiles(directory, True)
    while listing.hasNext():
        path = listing.next().getPath()
        if fnmatch.fnmatchcase(str(path.getName()), STATE_CHANGE_GLOB):
            found.append(str(fs.makeQualified(path).toString()))
    return found


def local_files(qualified: str) -> list[str] | None:
    """The state-change logs below a local directory (`qualified`: Hadoop's qualified name of
    it, `file:/a b/c`), named as hadoop_files names them: `file:` and the path, not
    URL-escaped; like Hadoop's listing (RawLocalFileSystem), symbolic links to directories are
    followed, to files listed, and broken ones left out. None when Hadoop must list it: not a
    local directory, a directory unreadable, a name not valid UTF-8 (Hadoop's name for it
    differs), or a directory reached twice through links (a cycle Hadoop would walk forever)."""
    root = census.local_path(qualified) if qualified.startswith("file:") else None
    if root is None:
        return None
    prefix = qualified.rstrip("/")
    found: list[str] = []
    visited: set[tuple[int, int]] = set()
    stack = [""]
    try:
        while stack:
            relative = stack.pop()
            directory = os.path.join(root, relative) if relative else root
            identity = os.stat(directory)
            if (identity.st_dev, identity.st_ino) in visited:
                return None
            visited.add((identity.st_dev, identity.st_ino))
            with os.scandir(directory) as entries:
                for entry in entries:
                    name = f"{relative}/{entry.name}" if relative else entry.name
                    name.encode("utf-8")  # a name Python decoded with surrogates raises here
                    if entry.is_dir():
                        stack.append(name)
                    elif entry.is_file() and fnmatch.fnmatchcase(entry.name, STATE_CHANGE_GLOB):
                        found.append(f"{prefix}/{name}")
    except (OSError, UnicodeEncodeError):
        return None
    return found


def file_table_rows(names: Sequence[str]) -> list[tuple[int, str]]:
    """The files table's rows: (file_id, file) for Spark's names of the input files
    (`inputFiles()` of their scans: URIs, escaped, as `input_file_name()` gives them per row),
    file_id the rank of the name, so that records order by (ts, file_id, ...) as they did by
    (ts, file, ...)."""
    return list(enumerate(sorted(set(names))))


def file_table(spark: SparkSession, names: Sequence[str]) -> DataFrame:
    """The files table (file_table_rows) as a local frame (one row per file)."""
    return spark.createDataFrame(file_table_rows(names), FILES_DDL)


def _located(frame: DataFrame, files: DataFrame, columns: Sequence[Column]) -> DataFrame:
    """The rows of a file scan with file_id, block (the byte offset of the file split the line
    was read from) and mid (increasing along the lines of a split) before `columns`.

    The file is carried by its id, not its name: a name is ~65 bytes of every row that every
    later sort and shuffle of positions would carry and compare (and the events table's write
    encode), an id 4. The id comes from a broadcast join of the file's name with the files
    table (`files`: file_id, file); a row whose file it does not name keeps a null id, which
    the job refuses (job._per_cluster), rather than being dropped. The name and split come from
    `input_file_name()` and `input_file_block_start()`, not the `_metadata` columns: with those
    the scan copies every row once more to append them (10M lines: 14.2 -> 13.0 s)."""
    located = frame.select(
        F.input_file_name().alias("_file"),
        F.expr("input_file_block_start()").alias("block"),
        # Consecutive within one split, in line order: with the split's first id and the lines of
        # the splits before it in the same file, this gives each line's number without a shuffle.
        F.monotonically_increasing_id().alias("mid"),
        *columns,
    )
    ids = F.broadcast(files.select(F.col("file").alias("_file"), "file_id"))
    return located.join(ids, "_file", "left").select("file_id", *[c for c in located.columns if c != "_file"])


def read_lines(spark: SparkSession, files: Sequence[str], file_ids: DataFrame | None = None) -> DataFrame:
    """Every line of the files. Columns: file_id, block, mid (see _located), value. `file_ids`:
    the files table to take ids from (by default the files' ranks among themselves)."""
    frame = spark.read.text(list(files))
    ids = file_ids if file_ids is not None else file_table(spark, frame.inputFiles())
    return _located(frame, ids, [F.col("value")])


@dataclass(frozen=True)
class FromTasks:
    """What the fast path's tasks found besides the records: the leader-epoch checks they made
    and the node figures they took (each None when they did not)."""

    checks: leader_epochs.TaskChecks | None = None
    nodes: node_index.TaskNodes | None = None


@dataclass(frozen=True)
class Records:
    """The parsed lines (`lines`: parse's columns; None when the fast path took every file),
    the files table their file_ids index, and what the fast path's tasks found besides."""

    lines: DataFrame | None
    files: DataFrame
    file_rows: list[tuple[int, str]]
    from_tasks: FromTasks = FromTasks()


def read_records(
    spark: SparkSession,
    inputs: Sequence[str],
    prefetch: census.Prefetch | None = None,
    fast_path_dir: str | None = None,
) -> Records:
    """Every line of the inputs' log files, parsed and classified (see `parse`): the files that
    map one row per line through Spark's JSON reader, the others line by line (census.plan).

    With `fast_path_dir` (a local directory, the events table's), the local `.jsonl` files are
    first given to arrow_ingest, whose tasks write their records there as narrow Parquet files
    or turn a file down; `lines` then holds only the records of the other files (the files
    table names them all)."""
    files = list_inputs(spark, inputs)
    if not files:
        raise InputError(f"no state-change records in {', '.join(inputs)} (looked for {STATE_CHANGE_GLOB})")
    fast: list[str] = []
    if fast_path_dir is not None and _fast_path_usable(spark):
        # The fast path's tasks make the census' checks themselves (in parallel); the census
        # only decides how Spark reads the rest.
        fast = [file for file in files if census.place_irregularity(file) is None]
    fast_names = spark.read.text(fast).inputFiles() if fast else []
    taken = set(fast)
    others = [file for file in files if file not in taken]
    readers = census.plan(others, prefetch=prefetch)
    frames = _frames(spark, readers)
    file_rows = file_table_rows(
        [*fast_names, *(name for frame in frames if frame is not None for name in frame.inputFiles())]
    )
    files_table = spark.createDataFrame(file_rows, FILES_DDL)
    turned_down: list[str] = []
    from_tasks = FromTasks()
    if fast:
        assert fast_path_dir is not None
        result = _fast_path(spark, fast, fast_names, file_rows, fast_path_dir)
        turned_down = result.turned_down
        other_files = bool(others or turned_down)
        from_tasks = FromTasks(
            checks=(
                leader_epochs.task_checks(
                    result.checked,
                    set(result.written_file_ids),
                    other_files=other_files,
                    candidates_dir=os.path.join(fast_path_dir, arrow_ingest.CHECKS_DIR),
                )
                if result.checked
                else None
            ),
            nodes=(
                node_index.TaskNodes(
                    totals=tuple(result.node_totals),
                    fast_file_ids=result.written_file_ids,
                    other_files=other_files,
                    times_dir=os.path.join(fast_path_dir, arrow_ingest.NODE_TIMES_DIR),
                )
                if result.indexed_nodes
                else None
            ),
        )
        if turned_down:
            readers = census.plan([*others, *turned_down], prefetch=prefetch)
            frames = _frames(spark, readers)
    log.info(
        "%d of %d log files read through Arrow, %d with Spark's JSON reader, %d line by line",
        len(fast) - len(turned_down),
        len(files),
        len(readers.json_reader),
        len(readers.text_reader),
    )
    json_frame, text_frame = frames
    parts = []
    if json_frame is not None:
        parts.append(_json_records(json_frame, files_table))
    if text_frame is not None:
        parts.append(parse(_located(text_frame, files_table, [F.col("value")])))
    return Records(
        functools.reduce(DataFrame.unionByName, parts) if parts else None, files_table, file_rows, from_tasks
    )


def _frames(spark: SparkSession, readers: census.ReaderPlan) -> tuple[DataFrame | None, DataFrame | None]:
    """The scans of census.plan's two lists: Spark's JSON reader, the text reader."""
    return (
        _json_reader(spark, readers.json_reader) if readers.json_reader else None,
        spark.read.text(list(readers.text_reader)) if readers.text_reader else None,
    )


def boolean_setting(spark: SparkSession, name: str, default: bool = True) -> bool:
    """One of the job's own Spark settings (`--conf NAME=true|false`); any other value is
    refused as bad input (exit 2)."""
    setting = (spark.conf.get(name, "true" if default else "false") or "").strip().lower()
    if setting not in ("true", "false"):
        raise InputError(f"{name} must be true or false, not {setting!r}")
    return setting == "true"


def _fast_path_usable(spark: SparkSession) -> bool:
    """The fast path's tasks run Python with pyarrow: on a local master, the driver's Python
    (session.build); a cluster's executors may have neither, so there Spark reads everything."""
    local = (spark.sparkContext.master or "").startswith("local")
    return boolean_setting(spark, FAST_PATH_CONF) and local and arrow_ingest.available()


@dataclass(frozen=True)
class FastPathResult:
    """What the fast path did: the files it turned down (their records not written), and for
    the files it wrote, each accepted chunk's file and the nodes whose leader epochs it checked
    (leader_epochs.py; none when the check is off), and each accepted chunk's node totals
    (node_index.py; `indexed_nodes`: whether the tasks took them)."""

    turned_down: list[str]
    written_file_ids: frozenset[int]
    checked: list[tuple[int, tuple[str, ...]]]
    node_totals: list[tuple[int, node_index.NodeTotal]]
    indexed_nodes: bool


def _fast_path(
    spark: SparkSession,
    fast: Sequence[str],
    names: Sequence[str],
    file_rows: Sequence[tuple[int, str]],
    events_dir: str,
) -> FastPathResult:
    """Runs arrow_ingest's tasks over `fast` (files as list_inputs names them; `names`: Spark's
    names of the same files; `file_rows`: the files table's rows, file_table_rows)."""

    def local(file: str) -> str:
        return os.path.abspath(census.local_path(file) or file)

    by_local = {local(unquote(name)): name for name in names}
    ids = {file: file_id for file_id, file in file_rows}
    # A file the files table does not name by Spark's name for it is left to Spark's reader,
    # whose records then carry no file_id, which the job refuses (job._per_cluster).
    unnamed = [file for file in fast if ids.get(by_local.get(local(file), "")) is None]
    by_id = {ids[by_local[local(file)]]: file for file in fast if file not in unnamed}
    file_ids = {file_id: local(file) for file_id, file in by_id.items()}
    chunks = [chunk for file_id, path in sorted(file_ids.items()) for chunk in arrow_ingest.chunks_of(file_id, path)]
    context = spark.sparkContext
    groups = arrow_ingest.task_groups(chunks, arrow_ingest.task_count(chunks, context.defaultParallelism))
    check_leader_epochs = boolean_setting(spark, LEADER_EPOCHS_IN_TASKS_CONF)
    index_nodes = boolean_setting(spark, NODE_INDEX_IN_TASKS_CONF)
    try:
        outcomes: list[arrow_ingest.Outcome] = (
            context.parallelize(groups, max(1, len(groups)))
            .flatMap(
                functools.partial(
                    arrow_ingest.ingest_chunks,
                    events_dir=events_dir,
                    check_leader_epochs=check_leader_epochs,
                    index_nodes=index_nodes,
                )
            )
            .collect()
        )
    except Py4JJavaError as e:
        # A task that failed (no pyarrow in the workers' Python, a full disk): Spark's reader
        # then reads every file, slower and exact. Never a reason to fail the job.
        log.warning("the ingest's fast path failed; Spark's readers read its files: %s", str(e).splitlines()[0])
        arrow_ingest.clear(events_dir)
        return FastPathResult(list(fast), frozenset(), [], [], False)
    # In the files' order, so that a file's first turned-down chunk gives the reason.
    outcomes.sort(key=lambda outcome: (outcome.file_id, outcome.start))
    turned_down: dict[int, str] = {}
    for outcome in outcomes:
        if outcome.rejected is not None and outcome.file_id not in turned_down:
            turned_down[outcome.file_id] = outcome.rejected
    for file_id, why in sorted(turned_down.items()):
        log.info("%s is read by Spark's readers (the fast path turned it down: %s)", file_ids[file_id], why)
        arrow_ingest.remove_written(events_dir, file_id)
    log.info(
        "the fast path wrote %d records of %d files from %d chunks in %d tasks",
        sum(outcome.rows for outcome in outcomes if outcome.file_id not in turned_down),
        len(file_ids) - len(turned_down),
        len(chunks),
        len(groups),
    )
    return FastPathResult(
        turned_down=[*unnamed, *(by_id[file_id] for file_id in sorted(turned_down))],
        written_file_ids=frozenset(file_id for file_id in file_ids if file_id not in turned_down),
        checked=[
            (outcome.file_id, outcome.checked_nodes)
            for outcome in outcomes
            if outcome.file_id not in turned_down and check_leader_epochs
        ],
        node_totals=[
            (outcome.file_id, total)
            for outcome in outcomes
            if outcome.file_id not in turned_down
            for total in outcome.node_totals
        ],
        indexed_nodes=index_nodes,
    )


def _json_reader(spark: SparkSession, files: Sequence[str]) -> DataFrame:
    return spark.read.schema(record_schema()).option("mode", "PERMISSIVE").json(list(files))


def json_reader_records(spark: SparkSession, files: Sequence[str], file_ids: DataFrame | None = None) -> DataFrame:
    """The lines of files census.plan gave the JSON reader, parsed and classified as `parse`
    does, except that a malformed line's text is not kept (the reader has no corrupt-record
    column, see record_schema): it is read again from its file when the malformed lines are
    written (`bad_records`), a pass over the files that have any. `file_ids` as read_lines'."""
    frame = _json_reader(spark, files)
    return _json_records(frame, file_ids if file_ids is not None else file_table(spark, frame.inputFiles()))


def _json_records(frame: DataFrame, file_ids: DataFrame) -> DataFrame:
    # One row per line in these files: mid is consecutive along a split's lines, as read_lines'.
    located = _located(
        frame, file_ids, [F.lit(None).cast("string").alias("value"), *[F.col(name) for name, _ in schema.FIELDS]]
    )
    return classify(located)


def splits_of(frame: DataFrame) -> DataFrame:
    """Per split of each file of a frame of lines (file_id, block, mid): its first `mid`, its line
    count and the lines of the splits before it in the file. Small (one row per 128 MB of log),
    collected."""
    spark = frame.sparkSession
    per_split = frame.groupBy("file_id", "block").agg(F.min("mid").alias("first_mid"), F.count("*").alias("lines"))
    in_file = Window.partitionBy("file_id").orderBy("block").rowsBetween(Window.unboundedPreceding, -1)
    result = per_split.select(
        "file_id",
        "block",
        "first_mid",
        "lines",
        F.coalesce(F.sum("lines").over(in_file), F.lit(0)).alias("lines_before"),
    )
    return spark.createDataFrame(result.collect(), result.schema)


def splits(spark: SparkSession, out: str) -> DataFrame:
    """The split table of the events table: every line of the input has a row there."""
    return splits_of(events_table(spark, out))


def malformed_count(spark: SparkSession, out: str) -> int:
    """Malformed lines in the events table: only their partition is read (the usable ones are
    counted with the job's per-node totals, which read every record anyway). In a local
    directory, from the Parquet files' own row counts, without a Spark job."""
    events_dir = census.local_path(f"{out}/events")
    if events_dir is not None and arrow_ingest.available():
        import pyarrow.dataset as ds

        bad_dir = os.path.join(events_dir, "status=bad")
        return ds.dataset(bad_dir, format="parquet").count_rows() if os.path.isdir(bad_dir) else 0
    table = events_table(spark, out)
    return table.filter(F.col("status") == "bad").count()


class LineIndex:
    """The split table, computed on first use: only malformed lines and violations' evidence need
    line numbers, and computing it reads the (file, block, mid) of every line. Computed once
    when two of the job's branches ask for it at the same time (the bad records', the
    violations')."""

    def __init__(self, spark: SparkSession, out: str) -> None:
        self._spark = spark
        self._out = out
        self._table: DataFrame | None = None
        self._lock = threading.Lock()

    def table(self) -> DataFrame:
        with self._lock:
            if self._table is None:
                self._table = splits(self._spark, self._out)
            return self._table


def with_line(frame: DataFrame, split_table: DataFrame) -> DataFrame:
    """Adds `line` (1-based within the file) to rows that carry file_id, block and mid."""
    joined = frame.join(F.broadcast(split_table.drop("lines")), ["file_id", "block"], "left")
    return joined.withColumn("line", F.col("mid") - F.col("first_mid") + F.col("lines_before") + 1).drop(
        "first_mid", "lines_before"
    )


# The validation expressions are written as SQL text and parsed by Spark in one call: built
# with the Column API they were ~1,500 Py4J calls each (is_malformed ~0.3-0.9 s, bad_reason
# ~0.5-0.9 s of the driver's Python per run, the cores idle meanwhile).


def _sql_string(text: str) -> str:
    """A SQL string literal (Spark's parser reads backslash escapes in them)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _sql_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _by_kind_sql(per_kind: dict[str, str], default: str) -> str:
    """The value for the record's kind; `default` for other kinds (and a null kind)."""
    branches = " ".join(f"WHEN `kind` = {_sql_string(kind)} THEN {value}" for kind, value in per_kind.items())
    return f"(CASE {branches} ELSE {default} END)"


def _any_sql(conditions: Sequence[str]) -> str:
    return "(" + " OR ".join(conditions) + ")"


def _incomplete_sql() -> str:
    """True when a record of a known kind lacks a required field (or has it mistyped: the
    parser leaves a mistyped field null). Cheap: evaluated for every line."""
    checks = {kind: _any_sql([f"{_sql_name(f)} IS NULL" for f in fields]) for kind, fields in schema.REQUIRED.items()}
    return _by_kind_sql(checks, "false")


def _missing_fields_sql() -> str:
    """Which required fields are missing, comma-separated: only evaluated for malformed lines."""
    missing = {
        kind: "concat_ws(', ', "
        + ", ".join(f"CASE WHEN {_sql_name(f)} IS NULL THEN {_sql_string(f)} END" for f in fields)
        + ")"
        for kind, fields in schema.REQUIRED.items()
    }
    return _by_kind_sql(missing, "''")


def _outside_sql(field: str, values: Sequence[str]) -> str:
    """The field holds a value outside `values` (a null is not outside)."""
    return f"({_sql_name(field)} IS NOT NULL AND NOT {_sql_name(field)} IN ({', '.join(map(_sql_string, values))}))"


def _has_bad_value_sql() -> str:
    """True when a field of a known kind holds a value outside contract 5's closed set."""
    per_kind = {
        kind: _any_sql([_outside_sql(field, values) for field, values in allowed.items()])
        for kind, allowed in schema.ALLOWED_VALUES.items()
    }
    return _by_kind_sql(per_kind, "false")


def _bad_value_sql() -> str:
    """The first field of a known kind whose value is outside contract 5's closed set, or null."""
    per_kind = {}
    for kind, allowed in schema.ALLOWED_VALUES.items():
        branches = " ".join(
            f"WHEN {_outside_sql(field, values)} THEN format_string("
            f"{_sql_string(f'{kind}: {field} %s is not one of ' + ', '.join(values))}, {_sql_name(field)})"
            for field, values in allowed.items()
        )
        per_kind[kind] = f"(CASE {branches} ELSE CAST(NULL AS STRING) END)"
    return _by_kind_sql(per_kind, "CAST(NULL AS STRING)")


def is_malformed_sql() -> str:
    """is_malformed's SQL text."""
    return _any_sql(
        [
            "`value` = ''",
            "`ts` IS NULL",
            "`node` IS NULL",
            "`kind` IS NULL",
            "`ts` <= 0",
            _incomplete_sql(),
            _has_bad_value_sql(),
        ]
    )


def bad_reason_sql() -> str:
    """bad_reason's SQL text."""
    return (
        "(CASE WHEN `value` = '' THEN 'empty line'"
        " WHEN `ts` IS NULL AND `node` IS NULL AND `kind` IS NULL THEN 'not a JSON object with ts, node and kind'"
        " WHEN `ts` IS NULL THEN 'ts missing or not an integer'"
        " WHEN `ts` <= 0 THEN 'ts is not a positive number of milliseconds'"
        " WHEN `node` IS NULL THEN 'node missing'"
        " WHEN `kind` IS NULL THEN 'kind missing'"
        f" WHEN {_incomplete_sql()} THEN concat(`kind`, ' without (or with a mistyped) ', {_missing_fields_sql()})"
        f" ELSE {_bad_value_sql()} END)"
    )


def is_malformed() -> Column:
    """Whether a parsed line is unusable: exactly when bad_reason() is not null. The ingest
    decides with this test alone, for every line; the reason's text (formatted messages a line
    never reaches unless it is malformed, yet they made the ingest's one generated method 2,387
    lines of Java instead of 1,387, and its cold run slower) is computed when they are read."""
    return F.expr(is_malformed_sql())


def bad_reason() -> Column:
    """Why a parsed line is malformed, or null when it is a usable record."""
    return F.expr(bad_reason_sql())


def parse(lines: DataFrame) -> DataFrame:
    """Typed columns of schema.FIELDS, plus file_id, block, mid, status and kind_group; the
    raw text is kept for malformed lines only. Columns derived from these (cluster, node_role,
    node_id) are computed when the table is read, which is cheaper than storing them."""
    # The line's text is at hand: no corrupt-record column (see record_schema).
    parsed = F.from_json(F.col("value"), record_schema(), {"mode": "PERMISSIVE"})
    return classify(
        lines.select(
            "file_id",
            "block",
            "mid",
            "value",
            *[parsed.getField(name).alias(name) for name, _ in schema.FIELDS],
        )
    )


def classify(typed: DataFrame) -> DataFrame:
    """Adds status and kind_group to parsed lines (file_id, block, mid, value and the typed fields),
    keeping the text of malformed lines only."""
    return (
        typed.withColumn("status", F.when(is_malformed(), F.lit("bad")).otherwise(F.lit("ok")))
        .withColumn("value", F.when(F.col("status") == "bad", F.substring("value", 1, MAX_BAD_VALUE_CHARS)))
        # The partition column: known kinds each have their own directory; other kinds (and
        # malformed lines, whose kind may be anything) share one, so no input can make many.
        .withColumn(
            "kind_group",
            F.when((F.col("status") == "ok") & F.col("kind").isin(*sorted(schema.KNOWN_KINDS)), F.col("kind"))
            .when(F.col("status") == "ok", F.lit(schema.OTHER_KINDS))
            .otherwise(F.lit("_malformed")),
        )
    )


def events_schema() -> T.StructType:
    fields = [T.StructField(name, _SPARK_TYPES[kind]) for name, kind in schema.FIELDS]
    extra = [
        T.StructField("file_id", T.IntegerType()),
        T.StructField("block", T.LongType()),
        T.StructField("mid", T.LongType()),
        T.StructField("value", T.StringType()),
        T.StructField("status", T.StringType()),
        T.StructField("kind_group", T.StringType()),
    ]
    return T.StructType(fields + extra)


def ingest(spark: SparkSession, inputs: Sequence[str], out: str, prefetch: census.Prefetch | None = None) -> FromTasks:
    """Parse every line once into OUTDIR/events, partitioned by status and kind so that each
    analysis reads only the kinds it needs, and name the files it indexes in OUTDIR/files.
    Returns what the fast path's tasks found besides: the leader-epoch checks (for
    invariants.py) and the node figures (node_totals, signs_of_life)."""
    events_dir = census.local_path(f"{out}/events")
    fast_path_dir = events_dir if events_dir is not None and _fast_path_usable(spark) else None
    if fast_path_dir is not None:
        # The fast path's tasks write into the table's directory first; Spark's writer then
        # appends the other files' records (as with `overwrite`, nothing old is left).
        shutil.rmtree(fast_path_dir, ignore_errors=True)
        os.makedirs(fast_path_dir)
    application = spark.sparkContext.applicationId
    workers_alive = time.monotonic() - _python_tasks_ended.get(application, -math.inf) < PYTHON_WORKERS_KEPT_S
    workers = _start_python_workers(spark) if fast_path_dir is not None and not workers_alive else None
    try:
        records = read_records(spark, inputs, prefetch, fast_path_dir=fast_path_dir)
    finally:
        if workers is not None:
            workers.join()
        if fast_path_dir is not None:
            _python_tasks_ended[application] = time.monotonic()
    _write_files_table(records, out)
    if records.lines is not None:
        write_events(records.lines, out, mode="overwrite" if fast_path_dir is None else "append")
    return records.from_tasks


FILES_DDL = "file_id int, file string"


# Spark keeps an idle Python worker for a minute (PythonWorkerFactory): an ingest that follows
# another's Python tasks within half that in the same application finds its workers started
# (a warm JVM: a notebook, a service, the benchmark's warm runs), and starting them ahead would
# only cost a job (about 0.2 s). When the last ingest's Python tasks ended, per application.
PYTHON_WORKERS_KEPT_S = 30.0
_python_tasks_ended: dict[str, float] = {}


def _start_python_workers(spark: SparkSession) -> threading.Thread:
    """Starts Spark's Python workers, one per core, with arrow_ingest's modules imported, in a
    job of its own run by a thread of its own: while the driver lists the files and plans their
    reading, rather than after, by the fast path's first tasks (a new process starts PySpark's
    worker daemon, which forks the workers, and each imports pyarrow and numpy: about 0.8 s on
    a 2-core machine). Spark reuses the workers for the fast path's tasks. A failure here is
    logged and left to those tasks, which start their workers anyway."""
    from pyspark import inheritable_thread_target

    context = spark.sparkContext
    cores = max(1, context.defaultParallelism)

    def start() -> None:
        try:
            context.parallelize(range(cores), cores).map(arrow_ingest.preload).collect()
        except Exception as e:  # logged; the fast path's tasks start their own workers
            log.warning("the Python workers could not be started ahead: %s", str(e).splitlines()[0] if str(e) else e)

    # The caller's local properties (the step's description, the scheduler pool) carry over.
    thread = threading.Thread(target=inheritable_thread_target(spark)(start), name="python-workers", daemon=True)
    thread.start()
    return thread


def _write_files_table(records: Records, out: str) -> None:
    """OUTDIR/files. In a local directory written with Arrow from the rows at hand: Spark's
    writer made a job of its own of these few rows, the first of a cold run to compile its
    classes (0.6 s of a cold run at 1M events, bench.analytics_stages)."""
    files_dir = census.local_path(f"{out}/files")
    if files_dir is None or not arrow_ingest.available():
        records.files.coalesce(1).write.mode("overwrite").parquet(f"{out}/files")
        return
    import pyarrow as pa

    file_ids, names = zip(*records.file_rows, strict=True) if records.file_rows else ((), ())
    table = pa.table({"file_id": pa.array(file_ids, pa.int32()), "file": pa.array(names, pa.string())})
    partition_tasks.replace_table(table, files_dir)


def files(spark: SparkSession, out: str) -> DataFrame:
    """The files table (file_id, file) as `ingest` wrote it, as a local frame (one row per file),
    so that the joins with it broadcast without a scan of its own. In a local directory, read
    with Arrow, without a Spark job."""
    return spark.createDataFrame(file_rows(spark, out), FILES_DDL)


def file_rows(spark: SparkSession, out: str) -> list[tuple[int, str]]:
    """The files table's rows, (file_id, file)."""
    files_dir = census.local_path(f"{out}/files")
    if files_dir is not None and arrow_ingest.available():
        import pyarrow.dataset as ds

        table = ds.dataset(files_dir, format="parquet").to_table(columns=["file_id", "file"])
        return list(zip(table["file_id"].to_pylist(), table["file"].to_pylist(), strict=True))
    return [(row["file_id"], row["file"]) for row in spark.read.schema(FILES_DDL).parquet(f"{out}/files").collect()]


def with_file_name(frame: DataFrame, files_table: DataFrame) -> DataFrame:
    """Adds `file` (the name) to rows that carry a file_id."""
    return frame.join(F.broadcast(files_table), "file_id", "left")


def write_events(records: DataFrame, out: str, mode: str = "overwrite") -> None:
    """The events table: parsed and classified lines, partitioned by status and kind."""
    records.write.mode(mode).partitionBy("status", "kind_group").parquet(f"{out}/events")


def events_table(spark: SparkSession, out: str) -> DataFrame:
    """Every row of the events table as `ingest` wrote it (status and kind_group included)."""
    return spark.read.schema(events_schema()).parquet(f"{out}/events")


def _node_role() -> Column:
    """controller or broker for contract 5's node names (controller-N, broker-N), else empty."""
    role = F.substring_index(F.col("node"), "-", 1)
    return F.when(role.isin("controller", "broker") & _node_id().isNotNull(), role).otherwise(F.lit(""))


def _node_id() -> Column:
    return F.substring_index(F.col("node"), "-", -1).try_cast("long")


def with_node_columns(frame: DataFrame) -> DataFrame:
    """Adds node_role and node_id, derived from the `node` column."""
    return frame.withColumn("node_role", _node_role()).withColumn("node_id", _node_id())


def events(spark: SparkSession, out: str, cluster_by: ClusterBy, files_table: DataFrame | None = None) -> DataFrame:
    """The usable records, as written by `ingest`, with cluster, node_role and node_id.
    `files_table`: the files table (`files`), when at hand already."""
    table = events_table(spark, out)
    usable = table.filter(F.col("status") == "ok").drop("status", "value")
    if cluster_by.mode == "dir" and files_table is None:
        files_table = files(spark, out)
    return with_node_columns(cluster_by.attach(usable, files_table))


def checked_candidates(
    spark: SparkSession, checks: leader_epochs.TaskChecks, cluster_by: ClusterBy, files_table: DataFrame
) -> DataFrame:
    """The leader-epoch check's candidates the fast path's tasks wrote (leader_epochs.py), with
    cluster, node_role and node_id as `events` gives them."""
    columns = schema.task_columns_ddl(leader_epochs.CANDIDATE_COLUMNS)
    written = os.path.isdir(checks.candidates_dir) and any(
        name.endswith(".parquet") for name in os.listdir(checks.candidates_dir)
    )
    frame = spark.read.schema(columns).parquet(checks.candidates_dir) if written else spark.createDataFrame([], columns)
    return with_node_columns(cluster_by.attach(frame, files_table))


def _not_from_tasks(events: DataFrame, nodes: node_index.TaskNodes) -> DataFrame | None:
    """The records of `events` from files the fast path's tasks did not write (None when they
    wrote every file). A fast file's Parquet files hold one file_id, so the scan skips them by
    their statistics."""
    if not nodes.other_files:
        return None
    return events.filter(F.col("file_id").isNull() | ~F.col("file_id").isin(sorted(nodes.fast_file_ids)))


def node_totals(
    spark: SparkSession,
    events: DataFrame,
    nodes: node_index.TaskNodes | None,
    cluster_by: ClusterBy,
    files_table: DataFrame,
) -> DataFrame:
    """Per (cluster, node): events, first_ts, last_ts, writes_liveness (1 or 0) and `unnamed`
    (records whose file the files table does not name, see _located). From the fast path's
    tasks for the files they wrote, from a scan of the events table for the others."""
    scanned = events if nodes is None else _not_from_tasks(events, nodes)
    parts = []
    if scanned is not None:
        parts.append(
            scanned.groupBy("cluster", "node").agg(
                F.count("*").alias("events"),
                F.min("ts").alias("first_ts"),
                F.max("ts").alias("last_ts"),
                F.max((F.col("kind_group") == "node.alive").cast("int")).alias("writes_liveness"),
                F.count(F.when(F.col("file_id").isNull(), 1)).alias("unnamed"),
            )
        )
    if nodes is not None:
        from_tasks = spark.createDataFrame(
            [
                (file_id, total.node, total.events, total.first_ts, total.last_ts, int(total.writes_liveness))
                for file_id, total in nodes.totals
            ],
            "file_id int, node string, events bigint, first_ts bigint, last_ts bigint, writes_liveness int",
        )
        parts.append(
            cluster_by.attach(from_tasks, files_table).select(
                "cluster",
                "node",
                "events",
                "first_ts",
                "last_ts",
                "writes_liveness",
                F.lit(0).cast("bigint").alias("unnamed"),
            )
        )
    combined = functools.reduce(DataFrame.unionByName, parts)
    if len(parts) == 1 and scanned is not None:
        return combined
    return combined.groupBy("cluster", "node").agg(
        F.sum("events").alias("events"),
        F.min("first_ts").alias("first_ts"),
        F.max("last_ts").alias("last_ts"),
        F.max("writes_liveness").alias("writes_liveness"),
        F.sum("unnamed").alias("unnamed"),
    )


def node_total_rows(
    spark: SparkSession,
    events: Callable[[], DataFrame],
    nodes: node_index.TaskNodes | None,
    cluster_by: ClusterBy,
    files_table: DataFrame,
    file_rows: Sequence[tuple[int, str]],
) -> list[Any]:
    """node_totals' rows (Spark's Rows or dicts with the same fields). When the fast path's
    tasks wrote every file, there is nothing to scan: their totals are combined here, in
    Python, without a Spark job nor the events' frame (`events` builds it when needed;
    `file_rows`: the files table's, for the clusters)."""
    if nodes is None or nodes.other_files:
        return node_totals(spark, events(), nodes, cluster_by, files_table).collect()
    names = dict(file_rows)
    per_node: dict[tuple[str | None, str], dict[str, Any]] = {}
    for file_id, total in nodes.totals:
        cluster = cluster_by.of_file(names.get(file_id))
        entry = per_node.get((cluster, total.node))
        if entry is None:
            per_node[(cluster, total.node)] = {
                "cluster": cluster,
                "node": total.node,
                "events": total.events,
                "first_ts": total.first_ts,
                "last_ts": total.last_ts,
                "writes_liveness": int(total.writes_liveness),
                "unnamed": 0,
            }
            continue
        entry["events"] += total.events
        entry["first_ts"] = min(entry["first_ts"], total.first_ts)
        entry["last_ts"] = max(entry["last_ts"], total.last_ts)
        entry["writes_liveness"] = max(entry["writes_liveness"], int(total.writes_liveness))
    return list(per_node.values())


def signs_of_life(
    spark: SparkSession, events: DataFrame, nodes: node_index.TaskNodes, cluster_by: ClusterBy, files_table: DataFrame
) -> DataFrame:
    """(cluster, node, ts) for the records of every node, distinct per file: the fast path's
    tasks' node times for the files they wrote (node_index.py), the events table's records for
    the others. What timelines.node_records searches for a node's last record."""
    written = os.path.isdir(nodes.times_dir) and any(name.endswith(".parquet") for name in os.listdir(nodes.times_dir))
    columns = schema.task_columns_ddl(node_index.TIMES_COLUMNS)
    times = spark.read.schema(columns).parquet(nodes.times_dir) if written else spark.createDataFrame([], columns)
    indexed = cluster_by.attach(times, files_table).select("cluster", "node", "ts")
    scanned = _not_from_tasks(events, nodes)
    return indexed if scanned is None else indexed.unionByName(scanned.select("cluster", "node", "ts"))


def bad_records(
    spark: SparkSession, out: str, split_table: DataFrame | None, cluster_by: ClusterBy, files_table: DataFrame
) -> DataFrame:
    """The malformed lines with file, line number, reason and text; `split_table` None when
    there are none (an empty table then, without computing line numbers)."""
    table = events_table(spark, out).filter(F.col("status") == "bad")
    table = with_file_name(cluster_by.attach(table, files_table), files_table)
    lined = (
        _with_text_read_again(spark, with_line(table, split_table), files_table)
        if split_table is not None
        else table.limit(0).withColumn("line", F.lit(None).cast("long"))
    )
    return lined.select(
        "cluster",
        "file",
        "line",
        bad_reason().alias("reason"),
        "value",
    )


def _with_text_read_again(spark: SparkSession, lined: DataFrame, files_table: DataFrame) -> DataFrame:
    """Fills in the text of malformed lines that the JSON reader read (it keeps no text) by
    reading their files again, line by line: a pass over those files only, and only when
    there are such lines."""
    files = [row["file"] for row in lined.filter(F.col("value").isNull()).select("file").distinct().collect()]
    if not files:
        return lined
    # `file` is Spark's URL-encoded file URI; Spark reads a path as list_inputs names it (decoded).
    lines = read_lines(spark, [unquote(file) for file in files], files_table)
    texts = with_line(lines, splits_of(lines)).select(
        "file_id", "line", F.substring("value", 1, MAX_BAD_VALUE_CHARS).alias("text")
    )
    return (
        lined.join(texts, ["file_id", "line"], "left")
        .withColumn("value", F.coalesce(F.col("value"), F.col("text")))
        .drop("text")
    )
