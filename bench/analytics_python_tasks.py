"""Benchmark: what a Python task costs Spark's local workers, with PySpark's own daemon and with
the job's (`controller_svc/analytics/worker_daemon.py`).

    python -m bench.analytics_python_tasks --tasks 33 --rounds 6

PySpark's worker invalidates Python's import caches before each task, and Python 3.11's zip
importer re-reads every archive on the worker's path there (CPython gh-103200): pyspark.zip,
py4j's and Spark's core jar. The job's daemon reads an archive again only when its file changed;
it also freezes the tasks' modules for the garbage collector before it forks a worker (PySpark's
worker runs a full collection after every task) and puts each task's socket in TCP quick-ACK
mode (the JVM's small writes otherwise wait for a delayed ACK). `archives_only_daemon` is the
job's daemon with the first change only (bench/archives_only_daemon.py), so that the other two
show apart from it.
This times jobs of `--tasks` tasks that do nothing (return their input: the cost of a task
itself) and of the same number that each sleep `--sleep-ms` (what a task that works for that
long costs beyond its work), in sessions of one JVM that start their workers from either daemon,
alternated `--rounds` times (the order alternating per round). Prints JSON: per daemon the
median seconds of each kind of job and every sample, the seconds per task beyond its work on
the 2 cores (`overhead_per_task_ms`: the sleeping job's time minus its sleeps' share of the
cores, over its tasks), and the floor: the sleeps alone on the cores (`sleep_floor_s`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

from bench import common

# PySpark's own; the job's with its first change only (the archives read once); the job's.
DAEMONS = {
    "pyspark_daemon": "pyspark.daemon",
    "archives_only_daemon": "bench.archives_only_daemon",
    "worker_daemon": "controller_svc.analytics.worker_daemon",
}


def _identity(value: int) -> int:
    return value


def _sleeper(sleep_s: float) -> Any:
    def sleep(value: int) -> int:
        time.sleep(sleep_s)
        return value

    return sleep


def _timed_job(spark: Any, tasks: int, function: Any) -> float:
    started = time.monotonic()
    result = spark.sparkContext.parallelize(range(tasks), tasks).map(function).collect()
    took = time.monotonic() - started
    if result != list(range(tasks)):
        raise RuntimeError("a job's tasks returned something else than their input")
    return took


def measure(tasks: int, rounds: int, sleep_ms: int, jobs_per_session: int) -> dict[str, Any]:
    from controller_svc.analytics import session

    idle: dict[str, list[float]] = {name: [] for name in DAEMONS}
    sleeping: dict[str, list[float]] = {name: [] for name in DAEMONS}
    daemon_seen: dict[str, str] = {}
    for r in range(rounds):
        for name in list(DAEMONS) if r % 2 == 0 else list(reversed(DAEMONS)):
            spark = session.build(conf={"spark.python.daemon.module": DAEMONS[name]})
            try:
                daemon_seen[name] = spark.sparkContext.getConf().get("spark.python.daemon.module") or ""
                _timed_job(spark, tasks, _identity)  # the workers started, the JIT warm
                for _ in range(jobs_per_session):
                    idle[name].append(round(_timed_job(spark, tasks, _identity), 3))
                    sleeping[name].append(round(_timed_job(spark, tasks, _sleeper(sleep_ms / 1000)), 3))
            finally:
                spark.stop()
    cores_used = os.cpu_count() or 1
    sleep_floor_s = tasks * sleep_ms / 1000 / min(cores_used, tasks)
    report: dict[str, Any] = {"sleep_floor_s": round(sleep_floor_s, 3)}
    for name in DAEMONS:
        sleeping_median = statistics.median(sleeping[name])
        report[name] = {
            "module": daemon_seen.get(name),
            "idle_job_median_s": round(statistics.median(idle[name]), 3),
            "idle_job_samples_s": idle[name],
            "sleeping_job_median_s": round(sleeping_median, 3),
            "sleeping_job_samples_s": sleeping[name],
            "overhead_per_task_ms": round((sleeping_median - sleep_floor_s) * 1000 * min(cores_used, tasks) / tasks, 1),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=33, help="tasks per job (33: the ingest's at 10M events)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--sleep-ms", type=int, default=100)
    parser.add_argument("--jobs-per-session", type=int, default=3)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    if min(args.tasks, args.rounds, args.jobs_per_session) < 1 or args.sleep_ms < 0:
        parser.error("--tasks, --rounds and --jobs-per-session must be at least 1, --sleep-ms at least 0")
    report = {
        "benchmark": "analytics_python_tasks",
        "tasks": args.tasks,
        "rounds": args.rounds,
        "sleep_ms": args.sleep_ms,
        "master": "local[*]",
        "machine": common.machine(),
        **measure(args.tasks, args.rounds, args.sleep_ms, args.jobs_per_session),
    }
    common.print_report(report, args.out)


if __name__ == "__main__":
    main()
