"""How many classes `controller-svc analyze` has Spark generate and compile, step by step:

    python -m bench.analytics_codegen --events 1000000 --out bench/results/FILE.json

Runs the analysis once in this process's new JVM (the history as `bench.analytics` generates
it; the steps one after another, as `bench.analytics_stages` runs them, so that each class
belongs to the step that compiled it) and reads Spark's codegen metrics at each step's end
(its "<step> done in" log line): the classes compiled (`classes`, every compile a miss of
Spark's codegen cache) and Janino's seconds for them (`janino_s`, from the metric's sampled
mean: an estimate). Each class is work a cold run pays again in every new process: Janino's
compile, then the JIT's compiles of the class and of Janino itself. Unlike a time, the count
does not depend on how busy the machine is, so a change that removes work from the fixed cost
of a run shows here even in a noisy hour. `--conf KEY=VALUE` (repeatable) adds Spark settings,
to compare one with the job's own.
"""

from __future__ import annotations

import argparse
import logging
import pathlib
from typing import Any

from bench import analytics as bench_analytics
from bench import common


class CodegenCounter(logging.Handler):
    """At each "<step> done in" log line of the job: the step's compiled classes and Janino
    seconds since the previous step's end, from `read()`'s (classes, milliseconds) totals."""

    def __init__(self, read: Any) -> None:
        super().__init__(logging.INFO)
        self._read = read
        self._last: tuple[int, float] = read()
        self.steps: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if " done in " not in message:
            return
        now = self._read()
        self.steps.append(
            {
                "step": message.split(" done in ")[0],
                "classes": now[0] - self._last[0],
                "janino_s": round((now[1] - self._last[1]) / 1000, 2),
            }
        )
        self._last = now


def codegen_totals(spark: Any) -> tuple[int, float]:
    """Classes compiled in this JVM so far and their compile milliseconds (count x sampled mean)."""
    histogram = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    count = int(histogram.getCount())
    return count, count * float(histogram.getSnapshot().getMean())


def measure(logs: pathlib.Path, out_dir: pathlib.Path, conf: dict[str, str]) -> dict[str, Any]:
    from controller_svc.analytics import census, ingest, job, session

    prefetch = census.Prefetch([str(logs)], ingest.STATE_CHANGE_GLOB)
    spark = session.build(conf={job.CONCURRENT_CONF: "false", **conf})
    started = codegen_totals(spark)
    counter = CodegenCounter(lambda: codegen_totals(spark))
    analytics_log = logging.getLogger("analytics")
    analytics_log.addHandler(counter)
    analytics_log.setLevel(logging.INFO)
    try:
        outcome = job.analyze(spark, [str(logs)], str(out_dir), prefetch=prefetch)
        ended = codegen_totals(spark)
    finally:
        analytics_log.removeHandler(counter)
        spark.stop()
    return {
        "classes": ended[0] - started[0],
        "janino_s": round((ended[1] - started[1]) / 1000, 2),
        "steps": counter.steps,
        "violations": outcome.summary["violations"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench_analytics.add_history_arguments(parser, events=1_000_000, master=False)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting to add")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    conf: dict[str, str] = {}
    for pair in args.conf:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            parser.error(f"--conf {pair!r}: expected KEY=VALUE")
        conf[key.strip()] = value
    base = pathlib.Path(args.dir)
    logs, expected = bench_analytics.history(base, args.events)
    measured = measure(logs, base / f"out-codegen-{args.events}", conf)
    report = {
        "benchmark": "analytics_codegen",
        "events": args.events,
        "master": "local[*]",
        "conf": conf,
        "machine": common.machine(),
        **{key: measured[key] for key in ("classes", "janino_s", "steps")},
        "answers_match": measured["violations"] == expected["violations"],
    }
    common.print_report(report, args.out)


if __name__ == "__main__":
    main()
