"""Benchmark: what PySpark's DataFrame query context costs `controller-svc analyze`.

    python -m bench.analytics_query_context --events 20000 --rounds 8

With the query context on (PySpark's default, `spark.python.sql.dataFrameDebugging.enabled`),
every PySpark call that builds a query walks the Python stack for its call site and sends it to
the JVM, a few Py4J round trips per call, while the cores wait for the plan. The job's session
turns it off (session.py). This runs the whole analysis in one warm JVM, `--rounds` times with
the context on and off interleaved (the order alternating per round), and prints JSON: per
variant the median seconds, every sample, the Py4J calls per run, and in how many rounds the
run without the context was the faster. A small history shows the cost best: it is per run,
not per event.

The setting is static (read when the JVM starts) and PySpark reads it once per process into
`pyspark.errors.utils._enable_debugging_cache`; one JVM measures both variants by setting that
flag, which is all the setting changes on the Python side.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench import analytics as bench_analytics
from bench import common


class Py4jCalls:
    """Counts the Py4J commands the driver's Python sends (every round trip to the JVM)."""

    def __init__(self) -> None:
        import py4j.clientserver

        self.count = 0
        self._connection = py4j.clientserver.ClientServerConnection
        self._send: Callable[..., Any] = self._connection.send_command

        def counted(connection: Any, command: str) -> Any:
            self.count += 1
            return self._send(connection, command)

        self._connection.send_command = counted

    def close(self) -> None:
        self._connection.send_command = self._send


def set_query_context(on: bool) -> None:
    import pyspark.errors.utils

    setattr(pyspark.errors.utils, "_enable_debugging_cache", on)  # noqa: B010 (a private flag: see the docstring)


def measure(logs: pathlib.Path, out_dir: pathlib.Path, rounds: int) -> dict[str, Any]:
    from controller_svc.analytics import job, session

    spark = session.build()
    calls = Py4jCalls()
    seconds: dict[str, list[float]] = {"context_on": [], "context_off": []}
    py4j_calls: dict[str, list[int]] = {"context_on": [], "context_off": []}
    answers: set[str] = set()

    def run(variant: str, record: bool) -> None:
        set_query_context(variant == "context_on")
        before = calls.count
        started = time.monotonic()
        outcome = job.analyze(spark, [str(logs)], str(out_dir))
        took = time.monotonic() - started
        answers.add(json.dumps(outcome.summary["violations"], sort_keys=True))
        if record:
            seconds[variant].append(round(took, 2))
            py4j_calls[variant].append(calls.count - before)

    try:
        for variant in seconds:  # a warm JVM and codegen cache for both
            run(variant, record=False)
        for r in range(rounds):
            order = list(seconds) if r % 2 == 0 else list(reversed(seconds))
            for variant in order:
                run(variant, record=True)
    finally:
        calls.close()
        spark.stop()
    faster_off = sum(off < on for on, off in zip(seconds["context_on"], seconds["context_off"], strict=True))
    saved = statistics.median(seconds["context_on"]) - statistics.median(seconds["context_off"])
    return {
        variant: {
            "median_s": round(statistics.median(samples), 2),
            "samples_s": samples,
            "py4j_calls_per_run": round(statistics.median(py4j_calls[variant])),
        }
        for variant, samples in seconds.items()
    } | {
        "rounds_faster_without_context": faster_off,
        "median_saved_s": round(saved, 2),
        "same_violations": len(answers) == 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench_analytics.add_history_arguments(parser, events=20_000, master=False)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    base = pathlib.Path(args.dir)
    logs, _ = bench_analytics.history(base, args.events)
    report = {
        "benchmark": "analytics_query_context",
        "events": args.events,
        "rounds": args.rounds,
        "master": "local[*]",
        "machine": common.machine(),
        **measure(logs, base / f"out-query-context-{args.events}", args.rounds),
    }
    common.print_report(report, args.out)


if __name__ == "__main__":
    main()
