"""`controller-svc analyze`: parse the logs once, write every table, then summarise.

Tables (Parquet under OUTDIR): events, files, bad_records, controller_tenures, failover_incidents,
leadership, offline_intervals, request_latency, violations. Only aggregates and bounded samples
(at most a few thousand rows) are collected to the driver, for summary.json and report.html.

After the ingest, the analyses run in concurrent branches (one thread each; Spark's scheduler
shares the cores between their queries): one query's driver-side planning, its single-task
stages and its last wave's stragglers leave a core idle that another branch's tasks use. Each
branch then runs the summary's and the report's queries on its own tables (concurrently too),
so that only the last branch's are left once the others have finished. `--conf
spark.kcontroller.concurrentAnalyses=false` runs them one after another (each step then has
the cores to itself, for profiling).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlparse

from py4j.protocol import Py4JJavaError
from pyspark import SparkContext, StorageLevel, inheritable_thread_target
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from controller_svc.analytics import (
    census,
    controller_tables,
    events_files,
    ingest,
    invariant_files,
    invariants,
    leader_epochs,
    leadership_scan,
    node_index,
    offline_files,
    partition_tasks,
    report,
    request_files,
    schema,
    table_figures,
    timelines,
)
from controller_svc.analytics.ingest import ClusterBy, InputError

log = logging.getLogger("analytics")

TABLES = (
    "events",
    "files",
    "bad_records",
    "controller_tenures",
    "failover_incidents",
    "leadership",
    "offline_intervals",
    "request_latency",
    "violations",
)
PLOT_BUCKETS = 400
SINGLE_CLUSTER = ClusterBy("none")
SAMPLE_VIOLATIONS = 50
SAMPLE_INTERVALS = 20
MAX_FAILOVERS_IN_REPORT = 500
MAX_LATENCY_ROWS = 5000
CONCURRENT_CONF = "spark.kcontroller.concurrentAnalyses"
# `--conf spark.kcontroller.scanTimelines=false` leaves the leadership and offline intervals'
# timelines to Spark's windows instead of the Python tasks of leadership_scan and offline_scan
# (and the last signs of life to Spark's search instead of record_search's tasks).
SCAN_TIMELINES_CONF = "spark.kcontroller.scanTimelines"
# Those tasks' working directories in OUTDIR (one per scan or search), each removed once the
# table it serves is written, and the directory once every branch has finished.
SCANS_DIR = "_scans"
SCHEDULER_POOL = "spark.scheduler.pool"


Built = TypeVar("Built")


class Once(Generic[Built]):
    """A value built on first use, once, whichever branch asks first: the Spark plans the
    analyses fall back to (the events frame, the signs of life), which the local files' paths
    never read. Building them anyway took ~0.4 s of the driver's Python and Py4J in every
    analysis (Spark lists the events table's files and analyses each plan as it is made)."""

    def __init__(self, build: Callable[[], Built]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._value: Built | None = None
        self._built = False

    def __call__(self) -> Built:
        with self._lock:
            if not self._built:
                self._value = self._build()
                self._built = True
            return self._value  # type: ignore[return-value]


@dataclass(frozen=True)
class Outcome:
    summary: dict[str, Any]
    exit_code: int
    summary_path: str
    report_path: str


class StepClock:
    """Seconds per step of the job, for summary.json's `timings_s` and the log: where the time
    of an analysis goes, without a profiler. Each step also names the Spark jobs it runs (their
    description, which Spark's event log keeps: bench.analytics_stages reads its stages by it).

    Steps of concurrent branches overlap: each counts its own wall time, while it shared the
    cores with the others; `spans` gives each step's start and end in seconds from the job's
    start, so the overlap can be read."""

    def __init__(self, spark: SparkSession, now: Callable[[], float] = time.monotonic) -> None:
        self.steps: dict[str, float] = {}
        self.spans: dict[str, list[float]] = {}
        self._spark = spark
        self._now = now
        self._origin = now()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Times the block as step `name`; Spark jobs it runs carry the name as description."""
        context = self._spark.sparkContext
        context.setJobDescription(name)
        start = self._now()
        try:
            yield
        finally:
            context.setJobDescription(None)  # type: ignore[arg-type]
        end = self._now()
        with self._lock:
            self.steps[name] = round(self.steps.get(name, 0.0) + end - start, 3)
            first = self.spans.get(name, [start - self._origin])[0]
            self.spans[name] = [round(first, 3), round(end - self._origin, 3)]
        log.info("%s done in %.1f s", name, end - start)


def _write(build: Callable[[], DataFrame], out: str, name: str, clock: StepClock) -> DataFrame:
    """Step `name`: builds the frame (a timeline's own small queries included) and writes it."""
    path = f"{out}/{name}"
    with clock.step(name):
        frame = build()
        frame.write.mode("overwrite").parquet(path)
    # Read back with the schema it was written with: inferring it from the files is a Spark job
    # of its own, which waits behind the other branches' stages for a free core.
    return frame.sparkSession.read.schema(frame.schema).parquet(path)


def _delete(spark: SparkSession, path: str) -> None:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    target = jvm.org.apache.hadoop.fs.Path(path)
    target.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(target, True)


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """A small file next to the tables: plain Python for local paths, Hadoop's FileSystem for the rest."""
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        local = parsed.path if parsed.scheme == "file" else path
        with open(local, "w", encoding="utf-8") as f:
            f.write(text)
        return
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    target = jvm.org.apache.hadoop.fs.Path(path)
    fs = target.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = fs.create(target, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


def _rows(frame: DataFrame, limit: int | None = None) -> list[dict[str, Any]]:
    rows = frame.limit(limit).collect() if limit is not None else frame.collect()
    return [row.asDict(recursive=True) for row in rows]


def _num(value: Any) -> Any:
    return None if value is None else (int(value) if float(value).is_integer() else round(float(value), 3))


def analyze(
    spark: SparkSession,
    inputs: Sequence[str],
    out: str,
    cluster_by: ClusterBy = SINGLE_CLUSTER,
    prefetch: census.Prefetch | None = None,
) -> Outcome:
    """Runs every job of contract 6. Raises InputError for bad input as a whole (exit 2).
    `prefetch`: the census of the input files, if started before Spark (census.Prefetch)."""
    started = time.monotonic()
    concurrent = ingest.boolean_setting(spark, CONCURRENT_CONF)
    clock = StepClock(spark)
    out = out.rstrip("/")
    scans_dir = _scans_dir(spark, out)
    with clock.step("ingest"):
        from_tasks = ingest.ingest(spark, inputs, out, prefetch)
    checks = from_tasks.checks
    with clock.step("clusters"):
        malformed_lines = ingest.malformed_count(spark, out)
        file_rows = ingest.file_rows(spark, out)
        files = spark.createDataFrame(file_rows, ingest.FILES_DDL)
        events = Once(lambda: ingest.events(spark, out, cluster_by, files))
        per_cluster_events = _per_cluster(
            ingest.node_total_rows(spark, events, from_tasks.nodes, cluster_by, files, file_rows)
        )
        lines = malformed_lines + sum(seen["events"] for seen in per_cluster_events.values())
        log.info("%d lines parsed in %.1f s", lines, time.monotonic() - started)
        if lines == 0:
            raise InputError(f"no state-change records in {', '.join(inputs)} (looked for {ingest.STATE_CHANGE_GLOB})")
    line_index = ingest.LineIndex(spark, out)

    def write_bad_records() -> DataFrame:
        return _write(
            lambda: ingest.bad_records(spark, out, line_index.table() if malformed_lines else None, cluster_by, files),
            out,
            "bad_records",
            clock,
        )

    if not per_cluster_events:
        write_bad_records()  # what the error below points to
        raise InputError(
            f"none of the {lines} lines in {', '.join(inputs)} is a usable state-change record (see {out}/bad_records)"
        )
    liveness = spark.createDataFrame(
        [(name, node) for name, seen in per_cluster_events.items() for node in seen["liveness"]],
        "cluster string, node string",
    )
    nodes = from_tasks.nodes
    signs_of_life = Once(
        lambda: ingest.signs_of_life(spark, events(), nodes, cluster_by, files) if nodes is not None else None
    )

    def figures(step: str, queries: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        # A branch's own summary and report queries, right after the tables they read are
        # written: only the last branch's then remain after the others have finished.
        with clock.step(step):
            return run_branches(spark, queries, concurrent)

    def partitions() -> dict[str, Any]:
        # The timelines' own caches, released once the tables built from them are written (each
        # table is read back from its Parquet files, not from their lineage).
        held = timelines.HeldFrames()
        try:
            leaders, leaders_dir = _leadership(
                spark, events, out, clock, held, scans_dir, lambda: _local_events_files(out, cluster_by, file_rows)
            )
            if (
                scans_dir is not None
                and leaders_dir is not None
                and _offline_files(
                    spark,
                    out,
                    cluster_by,
                    file_rows,
                    per_cluster_events,
                    leaders_dir,
                    scans_dir,
                    from_tasks.nodes,
                    clock,
                )
            ):
                # The table is local, and the driver's Python has Arrow and numpy (_scans_dir).
                with clock.step("offline_figures"):
                    return _offline_figures_read(census.local_path(f"{out}/offline_intervals"), per_cluster_events)
            offline = _write(
                lambda: timelines.offline_intervals(
                    events(),
                    leaders,
                    held,
                    liveness,
                    signs_of_life(),
                    scan_dir=_scan_dir(scans_dir, "offline_intervals"),
                    search_dir=_scan_dir(scans_dir, "offline_last_alive"),
                    leaders_dir=leaders_dir,
                ),
                out,
                "offline_intervals",
                clock,
            )
        finally:
            held.release()
        if scans_dir is not None:
            # The table is local, and the driver's Python has Arrow and numpy (_scans_dir).
            with clock.step("offline_figures"):
                return _offline_figures_read(census.local_path(f"{out}/offline_intervals"), per_cluster_events)
        return figures(
            "offline_figures",
            {
                "availability": lambda: _offline_availability(offline),
                "offline_series": lambda: _offline_series(spark, offline, per_cluster_events),
                "longest_offline": lambda: _rows(
                    offline.orderBy(F.desc_nulls_first("duration_ms"), "start_ts"), SAMPLE_INTERVALS
                ),
            },
        )

    def controllers() -> dict[str, Any]:
        if scans_dir is not None and _controller_tables(out, cluster_by, file_rows, per_cluster_events, clock):
            # The tables are local, and the driver's Python has Arrow and numpy (_scans_dir).
            with clock.step("controller_figures"):
                return _controller_figures_read(out)
        held = timelines.HeldFrames()
        try:
            tenures = _write(
                lambda: timelines.controller_tenures(events()).drop("start_pos"), out, "controller_tenures", clock
            )
            incidents = _write(
                lambda: timelines.failover_incidents(
                    events(),
                    tenures.withColumn("start_pos", F.struct("start_ts")),
                    held,
                    liveness,
                    signs_of_life(),
                    search_dir=_scan_dir(scans_dir, "failover_last_alive"),
                ),
                out,
                "failover_incidents",
                clock,
            )
        finally:
            held.release()
        if scans_dir is not None:
            # The tables are local, and the driver's Python has Arrow and numpy (_scans_dir).
            with clock.step("controller_figures"):
                return _controller_figures_read(out)
        return figures(
            "controller_figures",
            {
                "availability": lambda: _failover_availability(incidents),
                "elections": tenures.count,
                "failovers": lambda: _rows(
                    incidents.orderBy("cluster", "elected_ts").drop("brokers_not_applied"), MAX_FAILOVERS_IN_REPORT
                ),
                "tenures": lambda: _rows(tenures.orderBy("cluster", "start_ts"), MAX_FAILOVERS_IN_REPORT),
            },
        )

    def found_violations() -> dict[str, Any]:
        from_files = (
            _invariants_from_files(out, cluster_by, file_rows, checks, clock) if scans_dir is not None else None
        )
        if from_files is not None and not from_files:
            # The common case: nothing to resolve, so no Spark query at all.
            with clock.step("violations"):
                _write_no_violations(out)
            return {"counts": [], "samples": []}
        if from_files is not None:
            found = _write(
                lambda: spark.createDataFrame(
                    [violation.row() for violation in from_files], invariant_files.UNRESOLVED_DDL
                ),
                out,
                "_violations_unresolved",
                clock,
            )
        else:
            checked = (
                invariants.CheckedInTasks(checks, ingest.checked_candidates(spark, checks, cluster_by, files))
                if checks is not None
                else None
            )
            found = _write(lambda: invariants.all_violations(events(), checked), out, "_violations_unresolved", clock)
        resolved = _write(
            lambda: (
                resolve_evidence(found, events(), line_index.table(), files)
                if not found.isEmpty()
                else _no_violations(spark)
            ),
            out,
            "violations",
            clock,
        )
        _delete(spark, f"{out}/_violations_unresolved")
        return figures(
            "violation_figures",
            {
                "counts": lambda: resolved.groupBy("cluster", "invariant").count().collect(),
                "samples": lambda: _violation_samples(resolved),
            },
        )

    def requests() -> dict[str, Any]:
        from_files = _requests_from_files(out, cluster_by, file_rows, clock) if scans_dir is not None else None
        if from_files is not None:
            return from_files
        latency = _write(lambda: timelines.request_latency(events()), out, "request_latency", clock)
        return figures(
            "request_figures",
            {
                "latency": lambda: _rows(latency.orderBy("cluster", "broker", "api"), MAX_LATENCY_ROWS),
                "latency_histogram": lambda: _rows(timelines.latency_histogram(events())),
            },
        )

    def bad_lines() -> dict[str, Any]:
        if not malformed_lines and scans_dir is not None:
            # Nothing malformed, the common case: the empty table needs no Spark query (the
            # output is local, _scans_dir), nor do its figures.
            with clock.step("bad_records"):
                _write_no_bad_records(out)
            return {"malformed": [], "samples": []}
        # In a branch of its own, not before the branches start: nothing else reads it.
        bad = write_bad_records()
        return figures(
            "bad_record_figures",
            {
                "malformed": lambda: bad.groupBy("cluster").count().collect() if malformed_lines else [],
                "samples": lambda: _rows(bad.orderBy("file", "line"), SAMPLE_VIOLATIONS),
            },
        )

    # Branches that share no step; each branch's steps run in order (offline intervals use
    # leadership's cached timeline, failovers the tenures' table, the violations' evidence the
    # unresolved violations, each branch's figures its tables). The pools share the cores
    # fairly, so the order here is only that of the threads' start: the longest branch first.
    try:
        branches = run_branches(
            spark,
            {
                "partitions": partitions,
                "violations": found_violations,
                "controllers": controllers,
                "request_latency": requests,
                "bad_records": bad_lines,
            },
            concurrent,
        )
    finally:
        # What each branch's tasks left there went with its tables (HeldFrames); the directory
        # itself is shared by the branches.
        if scans_dir is not None:
            shutil.rmtree(scans_dir, ignore_errors=True)
    partition_figures = branches["partitions"]
    controller_figures = branches["controllers"]
    violation_figures = branches["violations"]
    request_figures = branches["request_latency"]
    bad_record_figures = branches["bad_records"]

    malformed_by_cluster = {row["cluster"]: int(row["count"]) for row in bad_record_figures["malformed"]}
    malformed = sum(malformed_by_cluster.values())
    counts: dict[str, dict[str, int]] = {}
    for row in violation_figures["counts"]:
        counts.setdefault(row["cluster"], {})[row["invariant"]] = int(row["count"])
    availability: dict[str, dict[str, Any]] = {}
    for part in (partition_figures["availability"], controller_figures["availability"]):
        for name, entry in part.items():
            availability.setdefault(name, _availability_defaults()).update(entry)
    clusters: dict[str, Any] = {}
    for name, seen in sorted(per_cluster_events.items()):
        clusters[name] = {
            "events": int(seen["events"]),
            "malformed": malformed_by_cluster.get(name, 0),
            "first_ts": int(seen["first_ts"]),
            "last_ts": int(seen["last_ts"]),
            "nodes": list(seen["nodes"]),
            "violations": {inv: counts.get(name, {}).get(inv, 0) for inv in schema.INVARIANTS},
            "availability": availability.get(name, _availability_defaults()),
        }
    total_violations = {inv: sum(c["violations"][inv] for c in clusters.values()) for inv in schema.INVARIANTS}
    summary: dict[str, Any] = {
        "events": sum(c["events"] for c in clusters.values()),
        "malformed": malformed,
        "lines": lines,
        "inputs": list(inputs),
        "violations": total_violations,
        "availability": _combine_availability([c["availability"] for c in clusters.values()]),
        "controllers": {
            "elections": controller_figures["elections"],
        },
        "clusters": clusters,
        "tables": {name: f"{out}/{name}" for name in TABLES},
        "report": f"{out}/report.html",
        "elapsed_s": None,
        # Seconds per step (ingest: parsing every line into the events table). The analyses'
        # steps run in concurrent branches: each counts its own wall time, so they overlap;
        # `step_spans_s` has each step's start and end, in seconds from the job's start.
        "timings_s": clock.steps,
        "step_spans_s": clock.spans,
    }
    with clock.step("report"):
        data = report.ReportData(
            summary=summary,
            offline_series=partition_figures["offline_series"],
            failovers=controller_figures["failovers"],
            tenures=controller_figures["tenures"],
            latency=request_figures["latency"],
            latency_histogram=request_figures["latency_histogram"],
            violations=violation_figures["samples"],
            longest_offline=partition_figures["longest_offline"],
            bad_records=bad_record_figures["samples"],
        )
    summary["elapsed_s"] = round(time.monotonic() - started, 3)
    summary_path = f"{out}/summary.json"
    report_path = f"{out}/report.html"
    write_text(spark, summary_path, json.dumps(summary, indent=2, sort_keys=False) + "\n")
    write_text(spark, report_path, report.render(data))
    exit_code = 1 if any(total_violations.values()) else 0
    return Outcome(summary, exit_code, summary_path, report_path)


def _leadership(
    spark: SparkSession,
    events: Callable[[], DataFrame],
    out: str,
    clock: StepClock,
    held: timelines.HeldFrames,
    scans_dir: str | None,
    files: Callable[[], events_files.EventsFiles] | None = None,
) -> tuple[DataFrame, str | None]:
    """Step leadership: writes the table and returns the timeline the offline intervals read,
    held (cached or its files kept) until `held` is released, and the local directory of its
    files, if it is read from files. By leadership_scan's tasks when `scans_dir` is given: from
    the events table's local `files`, else (or when they fail) from what Spark writes of the
    changes; else (or when they fail) by Spark's window."""
    if scans_dir is not None:
        table_dir = census.local_path(f"{out}/leadership")
        assert table_dir is not None  # _scans_dir: OUTDIR is local
        work_dir = os.path.join(scans_dir, "leadership")
        held.remove(work_dir)
        with clock.step("leadership"):
            try:
                assert files is not None  # _scans_dir: OUTDIR is local
                timeline = leadership_scan.leadership_from_files(spark, files(), work_dir, os.path.abspath(table_dir))
                return timeline, os.path.join(work_dir, leadership_scan.TIMELINE_DIR)
            except Exception as e:
                # As for the controllers' tables: never a reason to fail the job; the scan of
                # what Spark writes of the changes gives the same table.
                log.warning("the leadership could not be computed from the files; Spark's rows are scanned: %r", e)
            try:
                timeline = leadership_scan.leadership(
                    timelines.leader_changes(events()), work_dir, os.path.abspath(table_dir)
                )
                return timeline, os.path.join(work_dir, leadership_scan.TIMELINE_DIR)
            except Py4JJavaError as e:
                # As for the offline intervals' scan (timelines.offline_intervals): never a
                # reason to fail the job; the window below writes the table again, whole.
                log.warning("leadership's scan failed; Spark's window reads the changes: %s", str(e).splitlines()[0])
    leaders = held.persist(
        timelines.leadership_by_window(timelines.leader_changes(events())), StorageLevel.MEMORY_AND_DISK
    )
    _write(lambda: leaders.drop(*leadership_scan.TABLE_DROPS), out, "leadership", clock)
    return leaders, None


def _controller_tables(
    out: str,
    cluster_by: ClusterBy,
    file_rows: Sequence[tuple[int, str]],
    per_cluster: dict[str, dict[str, Any]],
    clock: StepClock,
) -> bool:
    """Step controller_tables: the controller_tenures and failover_incidents tables written by
    controller_tables.py from the events table's local files, in the driver. False when that
    failed (logged): Spark's queries write them then, the same rows."""
    local_out = census.local_path(out)
    assert local_out is not None  # _scans_dir: OUTDIR is local
    liveness = [(name, node) for name, seen in per_cluster.items() for node in seen["liveness"]]
    with clock.step("controller_tables"):
        try:
            controller_tables.write(
                _local_events_files(out, cluster_by, file_rows),
                liveness,
                os.path.join(local_out, "controller_tenures"),
                os.path.join(local_out, "failover_incidents"),
            )
            return True
        except Exception as e:
            # Never a reason to fail the job (as for the timelines' scans): whatever went wrong
            # here, Spark's queries compute the same tables from the same records.
            log.warning("the controllers' tables could not be computed in the driver; Spark computes them: %r", e)
            return False


def _local_events_files(
    out: str, cluster_by: ClusterBy, file_rows: Sequence[tuple[int, str]]
) -> events_files.EventsFiles:
    """The events table in the local directory `out` (_scans_dir: only then), as its readers
    in Python read it."""
    local_out = census.local_path(out)
    assert local_out is not None  # _scans_dir: OUTDIR is local
    return events_files.events_files(local_out, cluster_by, file_rows)


def _offline_files(
    spark: SparkSession,
    out: str,
    cluster_by: ClusterBy,
    file_rows: Sequence[tuple[int, str]],
    per_cluster: dict[str, dict[str, Any]],
    leaders_dir: str,
    scans_dir: str,
    nodes: node_index.TaskNodes | None,
    clock: StepClock,
) -> bool:
    """Step offline_intervals: the table written by offline_files.py's tasks from the events
    table's local files and leadership_scan's timeline (`leaders_dir`), with no Spark query,
    working in `scans_dir`; the lost brokers' signs of life from the fast path's node times
    (`nodes`) when they cover every file. False when that failed (logged): Spark's queries
    write it then, the same rows."""
    local_out = census.local_path(out)
    assert local_out is not None  # _scans_dir: OUTDIR is local
    liveness = [(name, node) for name, seen in per_cluster.items() for node in seen["liveness"]]
    work_dir = os.path.join(scans_dir, "offline_files")
    with clock.step("offline_intervals"):
        try:
            offline_files.write(
                spark,
                _local_events_files(out, cluster_by, file_rows),
                liveness,
                leaders_dir,
                work_dir,
                os.path.join(local_out, "offline_intervals"),
                nodes.times_dir if nodes is not None and not nodes.other_files else None,
            )
            return True
        except Exception as e:
            # Never a reason to fail the job (as for the controllers' tables): Spark's queries
            # compute the same table from the same records.
            log.warning("the offline intervals could not be computed from the files; Spark computes them: %r", e)
            return False
        finally:
            shutil.rmtree(work_dir, ignore_errors=True)


def _invariants_from_files(
    out: str,
    cluster_by: ClusterBy,
    file_rows: Sequence[tuple[int, str]],
    checks: leader_epochs.TaskChecks | None,
    clock: StepClock,
) -> list[invariant_files.Violation] | None:
    """Step _violations_unresolved: the invariants checked by invariant_files.py from the
    events table's local files, with no Spark query. None when that failed (logged): Spark's
    checks find the same violations then."""
    with clock.step("_violations_unresolved"):
        try:
            return invariant_files.all_violations(_local_events_files(out, cluster_by, file_rows), checks)
        except Exception as e:
            # Never a reason to fail the job (as for the offline intervals): Spark's checks
            # read the same records.
            log.warning("the invariants could not be checked from the files; Spark checks them: %r", e)
            return None


def _requests_from_files(
    out: str, cluster_by: ClusterBy, file_rows: Sequence[tuple[int, str]], clock: StepClock
) -> dict[str, Any] | None:
    """Steps request_latency and request_figures: the table and the figures computed by
    request_files.py from the events table's local files, with no Spark query (the percentiles
    exact). None when that failed (logged): Spark's queries compute them then."""
    local_out = census.local_path(out)
    assert local_out is not None  # _scans_dir: OUTDIR is local
    try:
        with clock.step("request_latency"):
            latency, histogram = request_files.write(
                _local_events_files(out, cluster_by, file_rows), os.path.join(local_out, "request_latency")
            )
    except Exception as e:
        # Never a reason to fail the job: Spark's queries read the same records.
        log.warning("the request latency could not be computed from the files; Spark computes it: %r", e)
        return None
    with clock.step("request_figures"):
        rows: list[dict[str, Any]] = latency.slice(0, MAX_LATENCY_ROWS).to_pylist()
        return {"latency": rows, "latency_histogram": histogram}


def _write_no_violations(out: str) -> None:
    """The violations table with no rows (_no_violations' columns), written without Spark; no
    unresolved violations left behind either (an earlier run's, into the same OUTDIR)."""
    local_out = census.local_path(out)
    assert local_out is not None  # _scans_dir: OUTDIR is local
    invariant_files.write_empty_table(os.path.join(local_out, "violations"))
    shutil.rmtree(os.path.join(local_out, "_violations_unresolved"), ignore_errors=True)


def _write_no_bad_records(out: str) -> None:
    """The bad_records table with no rows (ingest.bad_records' columns), written without Spark."""
    import pyarrow as pa

    local_out = census.local_path(out)
    assert local_out is not None  # _scans_dir: OUTDIR is local
    columns = pa.schema(
        [
            ("cluster", pa.string()),
            ("file", pa.string()),
            ("line", pa.int64()),
            ("reason", pa.string()),
            ("value", pa.string()),
        ]
    )
    partition_tasks.replace_table(columns.empty_table(), os.path.join(local_out, "bad_records"))


def _scan_dir(scans_dir: str | None, name: str) -> str | None:
    """The working directory of one scan or search in `scans_dir` (None: Spark does its work)."""
    return os.path.join(scans_dir, name) if scans_dir is not None else None


def _scans_dir(spark: SparkSession, out: str) -> str | None:
    """Where leadership_scan and offline_scan work, when the timelines are read by them: their
    tasks run the driver's Python on a local master, as the ingest's fast path's do, and read
    and write local files. None: Spark's windows read them (a cluster's executors may lack
    numpy; `--conf spark.kcontroller.scanTimelines=false`)."""
    if not ingest.boolean_setting(spark, SCAN_TIMELINES_CONF):
        return None
    local = (spark.sparkContext.master or "").startswith("local")
    directory = census.local_path(f"{out}/{SCANS_DIR}")
    if not local or directory is None or not partition_tasks.available():
        return None
    # The tasks' working directory need not be the driver's.
    return os.path.abspath(directory)


def run_branches(
    spark: SparkSession, branches: dict[str, Callable[[], Any]], concurrent: bool = True
) -> dict[str, Any]:
    """Runs each branch (in its own thread when `concurrent`, else one after another in order)
    and returns their results by name once every one has finished. A failed branch is logged
    and the first failure (in the branches' order) raised after the others finished: a Spark
    query cannot be abandoned half-way, and nothing fails silently.

    The threads carry the caller's Spark local properties and tags (pyspark's
    inheritable_thread_target, for its pinned-thread mode: a step's description, say), and
    Spark's scheduler shares the cores between their jobs."""
    if not concurrent:
        return {name: run() for name, run in branches.items()}
    with ThreadPoolExecutor(max_workers=len(branches), thread_name_prefix="analyze") as pool:
        futures: dict[str, Future[Any]] = {
            name: pool.submit(inheritable_thread_target(spark)(_logged(name, run))) for name, run in branches.items()
        }
    for future in futures.values():
        error = future.exception()
        if error is not None:
            raise error
    return {name: future.result() for name, future in futures.items()}


def _logged(name: str, run: Callable[[], Any]) -> Callable[[], Any]:
    def branch() -> Any:
        # Each branch's jobs in a scheduler pool of their own: with the session's FAIR mode
        # (session.build) the pools share the cores, so that a branch's small jobs (a schema,
        # a count) do not wait for another branch's large stage to finish, as Spark's FIFO
        # order has them do.
        SparkContext.getOrCreate().setLocalProperty(SCHEDULER_POOL, name)
        try:
            return run()
        except BaseException:
            log.exception("analysis branch %s failed", name)
            raise

    return branch


def _per_cluster(rows: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """Per cluster: its events, first and last ts, node names and the nodes that write
    node.alive (timelines.writers_of_liveness, without a scan of their records); raises when a
    record's file has no id (see ingest._located). From the per-node totals (ingest.node_total_rows:
    a few rows, combined here): numbers only, which Spark sums in a hash table, where a set of
    names per cluster took its slower object aggregate over every row (10M events: 1.7 -> 1.0
    s); the fast path's tasks take most of them already, and all of them without a Spark job
    when they wrote every file."""
    clusters: dict[str, dict[str, Any]] = {}
    unnamed = sum(int(row["unnamed"]) for row in rows)
    if unnamed:
        # The ingest names a file as Spark's scans do (ingest.file_table); a scan that named one
        # otherwise would leave its records without a file: refused, not analysed half-identified.
        raise RuntimeError(f"{unnamed} records of files the files table does not name (ingest.file_table)")
    for row in rows:
        entry = clusters.setdefault(
            row["cluster"],
            {"events": 0, "first_ts": row["first_ts"], "last_ts": row["last_ts"], "nodes": [], "liveness": []},
        )
        entry["events"] += int(row["events"])
        entry["first_ts"] = min(entry["first_ts"], row["first_ts"])
        entry["last_ts"] = max(entry["last_ts"], row["last_ts"])
        entry["nodes"].append(row["node"])
        if row["writes_liveness"]:
            entry["liveness"].append(row["node"])
    for entry in clusters.values():
        entry["nodes"].sort()
    return clusters


def _no_violations(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(
        [],
        "cluster string, invariant string, subject string, detail string, ts long, "
        "records array<struct<file: string, line: long, record: string>>",
    )


def resolve_evidence(
    violations: DataFrame, events: DataFrame, split_table: DataFrame, files_table: DataFrame
) -> DataFrame:
    """Replaces each violation's record references with file, line and the record as JSON.
    Only the referenced records are looked up (a join the adaptive planner broadcasts when small)."""
    keys = ["cluster", "invariant", "subject", "detail", "ts", "records"]
    exploded = violations.select(*keys, F.posexplode("records").alias("i", "ref")).select(
        *keys, "i", *[F.col(f"ref.{name}").alias(name) for name in ("file_id", "block", "mid")]
    )
    wanted = exploded.select("file_id", "block", "mid").distinct()
    fields = [F.col(name) for name, _ in schema.FIELDS]
    found = events.join(wanted, ["file_id", "block", "mid"]).select(
        "file_id", "block", "mid", F.to_json(F.struct(*fields)).alias("record")
    )
    lined = ingest.with_file_name(ingest.with_line(found, split_table), files_table)
    resolved = (
        exploded.join(lined, ["file_id", "block", "mid"], "left")
        .groupBy(*keys)
        .agg(
            F.sort_array(F.collect_list(F.struct("i", F.struct("file", "line", "record").alias("evidence")))).alias("e")
        )
    )
    return resolved.select(*keys[:-1], F.transform("e", lambda x: x["evidence"]).alias("records"))


def _availability_defaults() -> dict[str, Any]:
    return {
        "offline_intervals": 0,
        "partitions_affected": 0,
        "offline_partition_ms": 0,
        "longest_offline_ms": None,
        "p50_offline_ms": None,
        "p99_offline_ms": None,
        "still_offline": 0,
        # Of the partition-time offline, how much passed before the loss was seen (the dead
        # leader's broker's last sign of life -> its deregistration seen by the controller).
        "offline_detection_ms": 0,
        "longest_offline_detection_ms": None,
        "failovers": 0,
        # Failovers are counted from the fault: detection (the lost controller's last sign of
        # life -> /controller seen vacant or its resignation) + election + propagation.
        "longest_failover_ms": None,
        "p50_failover_ms": None,
        "longest_failover_detection_ms": None,
        "failover_detection_ms": 0,
        # Time without a controller: detection + election, summed over failovers.
        "controller_gap_ms": 0,
    }


def _offline_availability(offline: DataFrame) -> dict[str, dict[str, Any]]:
    """Per cluster, the availability figures of the offline intervals (_availability_defaults' keys)."""
    result: dict[str, dict[str, Any]] = {}
    # The distinct count is its own query: a distinct aggregate next to percentile_approx makes
    # Spark expand every row and aggregate the copies in one task (10x slower at 500k intervals).
    affected = {
        row["cluster"]: int(row["count"])
        for row in offline.select("cluster", "topic", "partition").distinct().groupBy("cluster").count().collect()
    }
    offline_rows = offline.groupBy("cluster").agg(
        F.count("*").alias("intervals"),
        F.sum("duration_ms").alias("total"),
        F.max("duration_ms").alias("longest"),
        F.percentile_approx("duration_ms", [0.5, 0.99]).alias("percentiles"),
        F.sum(F.when(F.col("end_ts").isNull(), 1).otherwise(0)).alias("open"),
        F.sum("detection_ms").alias("detection"),
        F.max("detection_ms").alias("longest_detection"),
    )
    for row in offline_rows.collect():
        p50, p99 = row["percentiles"] or (None, None)  # null when every interval is still open
        result[row["cluster"]] = dict(
            offline_intervals=int(row["intervals"]),
            partitions_affected=affected.get(row["cluster"], 0),
            offline_partition_ms=_num(row["total"]) or 0,
            longest_offline_ms=_num(row["longest"]),
            p50_offline_ms=_num(p50),
            p99_offline_ms=_num(p99),
            still_offline=int(row["open"]),
            offline_detection_ms=_num(row["detection"]) or 0,
            longest_offline_detection_ms=_num(row["longest_detection"]),
        )
    return result


def _failover_availability(incidents: DataFrame) -> dict[str, dict[str, Any]]:
    """Per cluster, the availability figures of the failover incidents (_availability_defaults' keys)."""
    result: dict[str, dict[str, Any]] = {}
    failover_rows = incidents.groupBy("cluster").agg(
        F.count("*").alias("failovers"),
        F.max("total_ms").alias("longest"),
        F.percentile_approx("total_ms", 0.5).alias("p50"),
        F.sum(F.greatest(F.col("detection_ms"), F.lit(0)) + F.greatest(F.col("election_ms"), F.lit(0))).alias("gap"),
        F.sum(F.greatest(F.col("detection_ms"), F.lit(0))).alias("detection"),
        F.max("detection_ms").alias("longest_detection"),
    )
    for row in failover_rows.collect():
        result[row["cluster"]] = dict(
            failovers=int(row["failovers"]),
            longest_failover_ms=_num(row["longest"]),
            p50_failover_ms=_num(row["p50"]),
            controller_gap_ms=_num(row["gap"]) or 0,
            failover_detection_ms=_num(row["detection"]) or 0,
            longest_failover_detection_ms=_num(row["longest_detection"]),
        )
    return result


def _combine_availability(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over clusters; percentiles are per cluster, so the total keeps the worst."""
    total = _availability_defaults()
    for entry in entries:
        for key in ("offline_intervals", "partitions_affected", "offline_partition_ms", "still_offline", "failovers"):
            total[key] += entry[key]
        for key in ("controller_gap_ms", "failover_detection_ms", "offline_detection_ms"):
            total[key] += entry[key]
        for key in (
            "longest_offline_ms",
            "p50_offline_ms",
            "p99_offline_ms",
            "longest_failover_ms",
            "p50_failover_ms",
            "longest_failover_detection_ms",
            "longest_offline_detection_ms",
        ):
            if entry[key] is not None:
                total[key] = entry[key] if total[key] is None else max(total[key], entry[key])
    return total


def _offline_figures_read(table_dir: str | None, per_cluster: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The offline figures (the `partitions` branch's result) from the offline intervals table's
    local files (table_figures.py): what the three queries give, the percentiles exact."""
    assert table_dir is not None  # _scans_dir: OUTDIR is local
    table = table_figures.read(table_dir)
    return {
        "availability": table_figures.offline_availability(table),
        "offline_series": table_figures.offline_series(table, _plot_bounds(per_cluster)),
        "longest_offline": table_figures.longest_offline(table, SAMPLE_INTERVALS),
    }


def _controller_figures_read(out: str) -> dict[str, Any]:
    """The controllers' figures (the `controllers` branch's result) from the tenures' and
    failover incidents' local files (table_figures.py): what the four queries give, the median
    exact."""
    tenures_dir, incidents_dir = (
        census.local_path(f"{out}/controller_tenures"),
        census.local_path(f"{out}/failover_incidents"),
    )
    assert tenures_dir is not None and incidents_dir is not None  # _scans_dir: OUTDIR is local
    tenures, incidents = table_figures.read(tenures_dir), table_figures.read(incidents_dir)
    return {
        "availability": table_figures.failover_availability(incidents),
        "elections": tenures.num_rows,
        "failovers": table_figures.first_rows(
            incidents.drop_columns(["brokers_not_applied"]), ["cluster", "elected_ts"], MAX_FAILOVERS_IN_REPORT
        ),
        "tenures": table_figures.first_rows(tenures, ["cluster", "start_ts"], MAX_FAILOVERS_IN_REPORT),
    }


def _plot_bounds(per_cluster: dict[str, dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """Per cluster, the offline series' first time and bucket width (at most PLOT_BUCKETS buckets)."""
    return {
        name: (int(row["first_ts"]), max(1, (int(row["last_ts"]) - int(row["first_ts"])) // PLOT_BUCKETS + 1))
        for name, row in per_cluster.items()
    }


def _offline_series(
    spark: SparkSession, offline: DataFrame, per_cluster: dict[str, dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """Offline partitions over time, per cluster, in at most PLOT_BUCKETS buckets: the peak and
    the value at each bucket's end. Each bucket sums its changes and finds its highest running
    level in time order; the driver then chains the (few) buckets."""
    changes = offline.select("cluster", F.col("start_ts").alias("ts"), F.lit(1).alias("delta")).unionByName(
        offline.filter(F.col("end_ts").isNotNull()).select(
            "cluster", F.col("end_ts").alias("ts"), F.lit(-1).alias("delta")
        )
    )
    bounds = spark.createDataFrame(
        [(name, first_ts, width) for name, (first_ts, width) in _plot_bounds(per_cluster).items()],
        "cluster string, t0 long, width long",
    )
    per_bucket = (
        changes.join(F.broadcast(bounds), "cluster")
        .withColumn("bucket", F.floor((F.col("ts") - F.col("t0")) / F.col("width")))
        .groupBy("cluster", "bucket", "t0", "width", "ts")
        .agg(F.sum("delta").cast("long").alias("delta"))
        .groupBy("cluster", "bucket", "t0", "width")
        .agg(F.array_sort(F.collect_list(F.struct("ts", "delta"))).alias("steps"))
        .select(
            "cluster",
            "bucket",
            "t0",
            "width",
            F.aggregate(
                "steps",
                F.struct(F.lit(0).cast("long").alias("level"), F.lit(0).cast("long").alias("peak")),
                lambda acc, step: F.struct(
                    (acc["level"] + step["delta"]).alias("level"),
                    F.greatest(acc["peak"], acc["level"] + step["delta"]).alias("peak"),
                ),
            ).alias("run"),
        )
    )
    series: dict[str, list[dict[str, Any]]] = {}
    level: dict[str, int] = {}
    for row in per_bucket.orderBy("cluster", "bucket").collect():
        name = row["cluster"]
        start = level.get(name, 0)
        level[name] = start + int(row["run"]["level"])
        series.setdefault(name, []).append(
            {
                "ts": int(row["t0"]) + int(row["bucket"]) * int(row["width"]),
                "peak": start + max(0, int(row["run"]["peak"])),
                "last": level[name],
            }
        )
    return series


def _violation_samples(violations: DataFrame) -> list[dict[str, Any]]:
    ranked = violations.withColumn(
        "rank", F.row_number().over(Window.partitionBy("cluster", "invariant").orderBy("ts", "subject"))
    ).filter(F.col("rank") <= SAMPLE_VIOLATIONS)
    return _rows(ranked.drop("rank").orderBy("cluster", "invariant", "ts"))
