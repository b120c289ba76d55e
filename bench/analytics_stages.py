"""Where `controller-svc analyze` spends its time, step by step, from Spark's own event log:

    python -m bench.analytics_stages --events 10000000 --runs 2 --out bench/results/FILE.json

Runs the analysis `--runs` times in this process's new JVM (the first run cold, the others
warm; the history as `bench.analytics` generates it) with Spark's event log on, then reads the
log: every stage's submission and completion, its tasks' run and CPU time, and its operators'
metrics (sort time, rows, shuffle records). Per run and step of the job (its "<step> done in"
log lines), prints JSON with:

- `wall_s`, `stages`, `task_run_s` (the step's tasks' run time, all cores) and `idle_core_s`
  (cores x wall - task run: the time no task of the step ran on a core, for driver work such
  as planning and code generation, scheduling round trips, or a last wave of fewer tasks than
  cores);
- that idle time split by what the cores did (from every task's launch and finish): `no_task_s`,
  the step's seconds in which no task ran at all (the driver alone: Python building the next
  query through Py4J, Spark analysing and planning it, scheduling), `one_task_s`, those in
  which one task ran, and `between_queries_s`, the seconds of the step outside any SQL query's
  execution (the driver's Python building plans, each DataFrame call analysed as it is made,
  and its own work such as the report's HTML).
  These do not grow with the events: the fixed cost per run that keeps the cost per event from
  being flat;
- the step's largest stages by task run time, with their operators (the scopes Spark names
  them by: Window, Exchange, Scan parquet, WriteFiles, ...), tasks, and operator metrics.

The job runs its steps one after another here (`spark.kcontroller.concurrentAnalyses=false`):
by default the analyses after the ingest run in concurrent branches, which fill much of the idle
time this reports (`bench.analytics` times the job as it runs by default).

The JFR profile (`bench.analytics_profile`) says which code the CPU ran; this says which stage
of which step, and how much of each step left the cores idle.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import logging
import pathlib
import shutil
import time
from collections.abc import Iterable
from typing import Any

from bench import analytics as bench_analytics
from bench import common
from bench.analytics_profile import _StepTimes

# Operator metrics worth reading per stage (summed over the stage's operators when repeated).
METRICS = (
    "sort time",
    "spill size",
    "peak memory",
    "time in aggregation build",
    "number of output rows",
    "shuffle records written",
    "records read",
)
TOP_STAGES = 3


@dataclasses.dataclass
class Stage:
    stage_id: int
    submitted_ms: int
    completed_ms: int
    tasks: int
    operators: list[str]
    metrics: dict[str, int]
    task_run_ms: int = 0
    task_cpu_ms: float = 0.0

    @property
    def wall_ms(self) -> int:
        return self.completed_ms - self.submitted_ms


@dataclasses.dataclass(frozen=True)
class Step:
    run: int
    name: str
    start_ms: float
    end_ms: float


def read_event_log(lines: Iterable[str]) -> dict[int, Stage]:
    """The completed stages of an (uncompressed) Spark event log, with their tasks' times.
    A stage attempt retried is counted once, with the times of all its tasks."""
    stages: dict[int, Stage] = {}
    run_ms: collections.Counter[int] = collections.Counter()
    cpu_ms: collections.Counter[int] = collections.Counter()
    for line in lines:
        event = json.loads(line)
        kind = event.get("Event")
        if kind == "SparkListenerTaskEnd":
            task_metrics = event.get("Task Metrics") or {}
            run_ms[event["Stage ID"]] += int(task_metrics.get("Executor Run Time", 0))
            cpu_ms[event["Stage ID"]] += int(task_metrics.get("Executor CPU Time", 0))
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            if "Completion Time" not in info or "Submission Time" not in info:
                continue  # a stage skipped (its shuffle output reused) never ran
            metrics: collections.Counter[str] = collections.Counter()
            for accumulable in info.get("Accumulables", []):
                name = accumulable.get("Name", "")
                if name in METRICS:
                    metrics[name] += int(accumulable.get("Value", 0))
            operators = sorted({_scope(rdd.get("Scope")) for rdd in info.get("RDD Info", [])} - {""})
            stages[info["Stage ID"]] = Stage(
                info["Stage ID"],
                int(info["Submission Time"]),
                int(info["Completion Time"]),
                int(info["Number of Tasks"]),
                operators,
                dict(metrics),
            )
    for stage_id, stage in stages.items():
        stage.task_run_ms = run_ms[stage_id]
        stage.task_cpu_ms = cpu_ms[stage_id] / 1e6  # the log gives CPU time in nanoseconds
    return stages


@dataclasses.dataclass(frozen=True)
class Activity:
    """When tasks ran and when SQL queries executed (epoch ms), from the event log."""

    tasks: list[tuple[int, int]]
    queries: list[tuple[int, int]]


def read_activity(lines: Iterable[str]) -> Activity:
    """Every task's launch and finish, and every SQL query execution's start and end."""
    tasks: list[tuple[int, int]] = []
    started: dict[int, int] = {}
    queries: list[tuple[int, int]] = []
    for line in lines:
        event = json.loads(line)
        kind = str(event.get("Event", ""))
        if kind == "SparkListenerTaskEnd":
            info = event.get("Task Info") or {}
            if "Launch Time" in info and "Finish Time" in info:
                tasks.append((int(info["Launch Time"]), int(info["Finish Time"])))
        elif kind.endswith(".SparkListenerSQLExecutionStart"):
            started[int(event["executionId"])] = int(event["time"])
        elif kind.endswith(".SparkListenerSQLExecutionEnd"):
            start = started.pop(int(event["executionId"]), None)
            if start is not None:
                queries.append((start, int(event["time"])))
    return Activity(tasks, queries)


def _ms_by_running_tasks(tasks: list[tuple[int, int]], start: float, end: float) -> collections.Counter[int]:
    """Milliseconds of [start, end) in which 0, 1, 2, ... tasks ran (2 stands for 2 or more)."""
    edges = sorted([(launch, 1) for launch, _ in tasks] + [(finish, -1) for _, finish in tasks])
    spent: collections.Counter[int] = collections.Counter()
    running, last = 0, start
    for at, change in edges:
        if at >= end:
            break
        if at > last:
            spent[min(running, 2)] += int(at - last)
            last = at
        running += change
    spent[min(running, 2)] += int(max(0.0, end - last))
    return spent


def _ms_outside(intervals: list[tuple[int, int]], start: float, end: float) -> float:
    """Milliseconds of [start, end) covered by none of the intervals."""
    covered, reach = 0.0, start
    for begin, finish in sorted(intervals):
        begin_at, finish_at = max(float(begin), reach), min(float(finish), end)
        if finish_at > begin_at:
            covered += finish_at - begin_at
            reach = finish_at
    return max(0.0, (end - start) - covered)


def _scope(scope: str | None) -> str:
    """An RDD's operator, as Spark names its scope ("WholeStageCodegen (3)" -> "WholeStageCodegen")."""
    if not scope:
        return ""
    name = str(json.loads(scope).get("name", ""))
    return name.split(" (")[0].strip()


def steps_of(runs: list[tuple[float, list[tuple[str, float]]]]) -> list[Step]:
    """Each run's steps: from the run's start (epoch seconds), each step ends at its "done in"
    log line and the next begins there."""
    steps = []
    for run, (start, ends) in enumerate(runs):
        previous = start * 1000
        for name, end in ends:
            steps.append(Step(run, name, previous, end * 1000))
            previous = end * 1000
    return steps


def summarize(
    stages: dict[int, Stage], steps: list[Step], cores: int, activity: Activity | None = None
) -> list[dict[str, Any]]:
    """Per step: its stages (those submitted while it ran) and how busy they kept the cores; with
    `activity`, also how long no task, or one, ran and how long no query executed."""
    result = []
    for step in steps:
        mine = [s for s in stages.values() if step.start_ms <= s.submitted_ms < step.end_ms]
        wall_s = (step.end_ms - step.start_ms) / 1000
        task_run_s = sum(s.task_run_ms for s in mine) / 1000
        largest = sorted(mine, key=lambda s: s.task_run_ms, reverse=True)[:TOP_STAGES]
        result.append(
            {
                "run": step.run,
                "step": step.name,
                "wall_s": round(wall_s, 2),
                "stages": len(mine),
                "task_run_s": round(task_run_s, 2),
                "task_cpu_s": round(sum(s.task_cpu_ms for s in mine) / 1000, 2),
                "idle_core_s": round(max(0.0, cores * wall_s - task_run_s), 2),
                **(_driver_time(activity, step) if activity is not None else {}),
                "largest_stages": [
                    {
                        "stage": s.stage_id,
                        "wall_s": round(s.wall_ms / 1000, 2),
                        "task_run_s": round(s.task_run_ms / 1000, 2),
                        "tasks": s.tasks,
                        "operators": s.operators,
                        "metrics": s.metrics,
                    }
                    for s in largest
                ],
            }
        )
    return result


def _driver_time(activity: Activity, step: Step) -> dict[str, float]:
    by_tasks = _ms_by_running_tasks(activity.tasks, step.start_ms, step.end_ms)
    return {
        "no_task_s": round(by_tasks[0] / 1000, 2),
        "one_task_s": round(by_tasks[1] / 1000, 2),
        "between_queries_s": round(_ms_outside(activity.queries, step.start_ms, step.end_ms) / 1000, 2),
    }


DRIVER_TIME_KEYS = ("no_task_s", "one_task_s", "between_queries_s")


def totals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per run: wall, task run and idle core seconds over its steps (and the driver's times,
    when the rows have them)."""
    by_run: dict[int, dict[str, float]] = {}
    for row in rows:
        keys = ["wall_s", "task_run_s", "idle_core_s", *[k for k in DRIVER_TIME_KEYS if k in row]]
        entry = by_run.setdefault(row["run"], {**dict.fromkeys(keys, 0.0), "stages": 0})
        for key in entry:
            entry[key] += row[key]
    return [{"run": run, **{k: round(v, 2) for k, v in entry.items()}} for run, entry in sorted(by_run.items())]


def measure(logs: pathlib.Path, out_dir: pathlib.Path, runs: int, event_dir: pathlib.Path) -> tuple[list[Step], int]:
    from controller_svc.analytics import job, session

    spark = session.build(
        conf={
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": event_dir.resolve().as_uri(),
            "spark.eventLog.compress": "false",
            # Steps one after another, each with the cores to itself, so that every stage
            # belongs to the one step that ran when it was submitted (the job's default runs
            # the analyses in concurrent branches, job.run_branches; bench.analytics times that).
            job.CONCURRENT_CONF: "false",
        }
    )
    cores = spark.sparkContext.defaultParallelism
    times = _StepTimes()
    analytics_log = logging.getLogger("analytics")
    analytics_log.addHandler(times)
    analytics_log.setLevel(logging.INFO)
    recorded: list[tuple[float, list[tuple[str, float]]]] = []
    try:
        for _ in range(runs):
            times.ends = []
            started = time.time()
            job.analyze(spark, [str(logs)], str(out_dir))
            recorded.append((started, times.ends))
    finally:
        analytics_log.removeHandler(times)
        spark.stop()
    return steps_of(recorded), cores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench_analytics.add_history_arguments(parser, events=1_000_000, master=False)
    parser.add_argument("--runs", type=int, default=2, help="analyses in one JVM: the first cold, the rest warm")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    base = pathlib.Path(args.dir)
    logs, _ = bench_analytics.history(base, args.events)
    event_dir = base / f"eventlog-{args.events}"
    shutil.rmtree(event_dir, ignore_errors=True)
    event_dir.mkdir(parents=True)
    steps, cores = measure(logs, base / f"out-stages-{args.events}", args.runs, event_dir)
    logs_written = sorted(p for p in event_dir.rglob("*") if p.is_file() and not p.name.startswith("."))
    stages: dict[int, Stage] = {}
    activity = Activity([], [])
    for path in logs_written:
        with path.open(encoding="utf-8") as f:
            stages.update(read_event_log(f))
        with path.open(encoding="utf-8") as f:
            found = read_activity(f)
        activity.tasks.extend(found.tasks)
        activity.queries.extend(found.queries)
    rows = summarize(stages, steps, cores, activity)
    report = {
        "benchmark": "analytics_stages",
        "events": args.events,
        "runs": args.runs,
        "master": "local[*]",
        "machine": common.machine(),
        "totals": totals(rows),
        "steps": rows,
    }
    common.print_report(report, args.out)


if __name__ == "__main__":
    main()
