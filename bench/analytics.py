"""Benchmark: `controller-svc analyze` on synthetic cluster histories.

    python -m bench.analytics --events 1000000 --events 10000000

For each size: generate a history (30 brokers, 10k partitions, failovers, broker failures,
preferred elections; cached under --dir), then time

- `cold_s`: the command an operator runs, `controller-svc analyze LOGDIR --out OUTDIR`, as a new
  process from start to exit (Python, the JVM and Spark's start-up included), with the job's own
  seconds per step (`timings_s` of its summary.json: where the time goes);
- `warm_s`: the same analysis again in this process's JVM, already warm: after the JVM's
  warm-up on a small history, each size is analysed --warmup-runs times (1 by default) before
  the timed runs, since the JIT compiles much of what a large history makes hot only in the
  first runs of that size, which are seconds slower than the later ones at 10M events
  (`warmup_samples_s` keeps those runs' times);
- the floor, in the same run on the same files: Spark itself reading the JSON with the same
  schema and hashing every column (the parse, without any analysis), warm; the faster of
  Spark's default file splits and smaller ones that balance the last wave of tasks;
- a second floor, `floor_arrow_parse_s`: Arrow's JSON parse of the same files in Spark tasks,
  as the ingest's fast path (arrow_ingest.py) parses them, without its checks and writes;
- the cold floor, `cold_floor_json_parse_s`: Spark's parse (as the floor) as a command of its
  own, a new process from start to exit with the same session set-up (the driver's class
  archive included) as `cold_s`'s: what the cold command is compared with, like for like.

With --runs N every measurement is taken N times (the warm ones interleaved with the floor's)
and the medians are reported with every sample.

Prints JSON: both times per size, their ratios to the floor, and whether the cost per event is
flat (seconds per million events at the largest size over the smallest; cost_per_event). Targets (issue 13):
10M events under 90 s cold, under 3x the floor: `target_ratio_met` compares like with like,
warm with the warm floor and cold with the cold floor, both under 3x;
`cold_ratio_to_floor` (the cold command against the warm floor, stricter than either) is
reported beside them.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any
from urllib.parse import urlparse

from bench import common
from controller_svc.analytics import arrow_ingest, census, ingest, job, session, synthetic

TARGET_COLD_S_FOR_10M = 90.0
TARGET_RATIO_TO_FLOOR = 3.0
SPLIT_CONF = "spark.sql.files.maxPartitionBytes"


# Where the analytics benchmarks keep the histories they generate (one per size, made once).
HISTORY_DIR = str(pathlib.Path(tempfile.gettempdir()) / "kc-bench-analytics")


def add_history_arguments(parser: argparse.ArgumentParser, events: int | None = None, master: bool = True) -> None:
    """The arguments the analytics benchmarks share: `--events` (`events` the default size; None:
    repeatable, the benchmark's own sizes by default), `--dir` (HISTORY_DIR) and, `master`,
    Spark's `--master`."""
    if events is None:
        parser.add_argument("--events", type=int, action="append", help="history sizes (repeatable)")
    else:
        parser.add_argument("--events", type=int, default=events, help="the history's size")
    parser.add_argument("--dir", default=HISTORY_DIR, help="where the generated histories are kept")
    if master:
        parser.add_argument("--master", default="local[*]")


def history(base: pathlib.Path, events: int) -> tuple[pathlib.Path, dict[str, Any]]:
    directory = base / f"history-{events}"
    answers = directory / "expected.json"
    if not answers.exists():
        shutil.rmtree(directory, ignore_errors=True)
        expected = synthetic.generate(directory / "logs", events, brokers=30, partitions=10_000, seed=events)
        answers.write_text(json.dumps(expected.as_json()))
    return directory / "logs", json.loads(answers.read_text())


def floor_seconds(spark: Any, logs: pathlib.Path) -> dict[str, float]:
    """Spark's JSON parse of the files with its default file splits and with splits of about
    1/16th of the input per core (a short last wave of tasks: with the default splits, 10M
    events on 2 cores were read in 17 tasks, one core idle through the last); the floor is the
    faster, the best Spark itself does."""
    files = sorted(ingest.list_inputs(spark, [str(logs)]))
    total = sum(pathlib.Path(urlparse(f).path).stat().st_size for f in files)
    balanced = max(4 << 20, -(-total // (spark.sparkContext.defaultParallelism * 16)))
    return {
        "default_splits": _parse_seconds(spark, files, None),
        "balanced_splits": _parse_seconds(spark, files, balanced),
    }


def _parse_seconds(spark: Any, files: list[str], split: int | None) -> float:
    from pyspark.sql import functions as F

    if split is not None:
        spark.conf.set(SPLIT_CONF, str(split))
    try:
        started = time.monotonic()
        frame = spark.read.schema(ingest.record_schema()).json(files)
        # Every column is used (summed through a hash), so the JSON parser cannot skip any field.
        frame.agg(F.sum(F.hash(*frame.columns).cast("long"))).collect()
        return time.monotonic() - started
    finally:
        spark.conf.unset(SPLIT_CONF)


def arrow_parse_seconds(spark: Any, logs: pathlib.Path) -> float:
    """Arrow's JSON parse of the same files in Spark tasks, cut into chunks as the ingest's fast
    path cuts them (arrow_ingest), without its checks and writes: the parse the fast path
    itself pays, a second floor beside Spark's (the issue's)."""
    files = ingest.list_inputs(spark, [str(logs)])
    chunks = [
        chunk
        for file_id, file in enumerate(files)
        for chunk in arrow_ingest.chunks_of(file_id, census.local_path(file) or file)
    ]
    chunks.sort(key=lambda chunk: chunk.start - chunk.end)
    started = time.monotonic()
    rows = spark.sparkContext.parallelize(chunks, len(chunks)).map(arrow_ingest.parsed_rows).collect()
    took = time.monotonic() - started
    if min(rows) < 0:
        raise RuntimeError("Arrow's reader refused a chunk of the benchmark's history")
    return took


def cold_floor_run(logs: pathlib.Path, master: str, balanced: bool) -> float:
    """Spark's JSON parse of the history (_parse_seconds, one split choice) in a new process,
    from start to exit: the floor of a cold command."""
    started = time.monotonic()
    command = [sys.executable, "-m", "bench.analytics", "--parse-only", str(logs), "--master", master]
    subprocess.run([*command, *(["--balanced"] if balanced else [])], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def _parse_only(logs: pathlib.Path, master: str, balanced: bool) -> None:
    """The cold floor's process (cold_floor_run): the session as the command builds it (from the
    driver's class archive, which the benchmark's first cold run recorded), one parse."""
    archive = session.locate_class_archive(session.check_runtime())
    spark = session.build(master, archive=archive if archive is not None and archive.ready() else None)
    files = sorted(ingest.list_inputs(spark, [str(logs)]))
    split = None
    if balanced:
        total = sum(pathlib.Path(urlparse(f).path).stat().st_size for f in files)
        split = max(4 << 20, -(-total // (spark.sparkContext.defaultParallelism * 16)))
    _parse_seconds(spark, files, split)
    spark.stop()


def runtime(java_setup: str) -> dict[str, str]:
    """PySpark's version and the Java runtime's path and version line (from check_runtime)."""
    import pyspark

    java, _, banner = java_setup.partition("\n")
    version = banner.strip().splitlines()[0] if banner.strip() else ""
    return {"pyspark": pyspark.__version__, "java": java, "java_version": version}


def cold_run(logs: pathlib.Path, out: pathlib.Path, master: str) -> tuple[float, dict[str, Any]]:
    """The whole command in a new process: what an operator waits for."""
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "controller_svc.cli.main", "analyze", str(logs), "--out", str(out), "--master", master],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    took = time.monotonic() - started
    return took, json.loads((out / "summary.json").read_text())


def cost_per_event(results: list[dict[str, Any]], modes: tuple[str, ...] = ("cold", "warm")) -> dict[str, Any]:
    """Seconds per million events at the smallest and the largest size, cold and warm,
    `<mode>_per_event_spread` (the larger of the two over the smaller: 1.0 is flat, whichever
    way it leans), and `linear`: the cost per event at the largest size is at most 1.5x that at
    the smallest (it does not grow with the history). With two sizes or more, each time also split along the
    line through the smallest and the largest: a fixed part per run (Spark's start-up, planning,
    generated code, the JIT) and a marginal part per million events. A fixed part makes the cost
    per event fall with size even when the work per event is constant. `modes`: the times to
    split, each result's `<mode>_s`."""
    smallest, largest = results[0], results[-1]
    split: dict[str, Any] = {}
    for mode in modes:
        per_million = [r[f"{mode}_s"] / (r["events"] / 1e6) for r in (smallest, largest)]
        split[f"{mode}_seconds_per_million_smallest"] = round(per_million[0], 2)
        split[f"{mode}_seconds_per_million_largest"] = round(per_million[1], 2)
        split[f"{mode}_per_event_spread"] = round(max(per_million) / min(per_million), 2)
        if mode == "cold":
            split["linear"] = per_million[1] <= per_million[0] * 1.5
        if largest["events"] > smallest["events"]:
            marginal = (largest[f"{mode}_s"] - smallest[f"{mode}_s"]) / ((largest["events"] - smallest["events"]) / 1e6)
            split[f"{mode}_marginal_seconds_per_million"] = round(marginal, 2)
            split[f"{mode}_fixed_s"] = round(smallest[f"{mode}_s"] - marginal * smallest["events"] / 1e6, 1)
    return split


def answers_match(summaries: list[dict[str, Any]], expected: dict[str, Any]) -> bool:
    """Every run's summary has the history's known answers (synthetic.Expected)."""
    return not any(synthetic.differences(summary, expected) for summary in summaries)


def _median_run(runs: list[tuple[float, dict[str, Any]]]) -> tuple[float, dict[str, Any]]:
    """The run at the median time (the lower middle one of an even number), with its summary."""
    return sorted(runs, key=lambda run: run[0])[(len(runs) - 1) // 2]


def _lower_median(samples: list[float]) -> float:
    """The median as _median_run takes it: a measured sample, the lower middle one of an even number."""
    return sorted(samples)[(len(samples) - 1) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_history_arguments(parser)
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="runs of each measurement (cold, warm, floor; the warm ones interleaved with the floor's); "
        "medians are reported, with every sample: this machine's speed varies by 5-10%% between runs",
    )
    parser.add_argument(
        "--warmup-runs",
        type=int,
        default=1,
        help="untimed analyses of each size before its timed warm runs (reported as warmup_samples_s)",
    )
    parser.add_argument("--out", help="also write the report (JSON) here, e.g. bench/results/analytics-10m.json")
    parser.add_argument("--parse-only", metavar="LOGDIR", help=argparse.SUPPRESS)  # cold_floor_run's process
    parser.add_argument("--balanced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.parse_only:
        _parse_only(pathlib.Path(args.parse_only), args.master, args.balanced)
        return
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.warmup_runs < 0:
        parser.error("--warmup-runs must be at least 0")
    sizes = sorted(args.events or [1_000_000, 10_000_000])
    base = pathlib.Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    cold: dict[int, list[tuple[float, dict[str, Any]]]] = {}
    cold_floor: dict[int, list[float]] = {}
    # The command records the Spark driver's class archive on its first run on a machine and
    # starts from it after (class_archive.py): the cold runs measure the usual start, not that one.
    cold_run(history(base, 20_000)[0], base / "out-archive", args.master)
    java_setup = session.check_runtime()
    archive = session.locate_class_archive(java_setup)
    for size in sizes:
        logs, _ = history(base, size)
        # Before this process starts its own JVM: two would share the 2 cores.
        for _ in range(args.runs):
            cold.setdefault(size, []).append(cold_run(logs, base / f"out-cold-{size}", args.master))
            # The faster of the two split choices, as for the warm floor.
            cold_floor.setdefault(size, []).append(
                min(cold_floor_run(logs, args.master, balanced) for balanced in (False, True))
            )
            print(
                json.dumps(
                    {
                        "events": size,
                        "cold_s": round(cold[size][-1][0], 1),
                        "cold_floor_s": round(cold_floor[size][-1], 1),
                    }
                ),
                flush=True,
            )
    spark = session.build(args.master)
    # Warm the JVM (class loading, JIT) on a small history, as a long-running analysis would be.
    warm_logs, _ = history(base, 20_000)
    job.analyze(spark, [str(warm_logs)], str(base / "out-warm"))
    results: list[dict[str, Any]] = []
    for size in sizes:
        logs, expected = history(base, size)
        floor_runs: list[dict[str, float]] = []
        arrow_floor_runs: list[float] = []
        warm: list[tuple[float, dict[str, Any]]] = []
        warmup: list[float] = []
        for _ in range(args.warmup_runs):
            started = time.monotonic()
            job.analyze(spark, [str(logs)], str(base / f"out-{size}"))
            warmup.append(time.monotonic() - started)
        for _ in range(args.runs):
            floor_runs.append(floor_seconds(spark, logs))
            arrow_floor_runs.append(arrow_parse_seconds(spark, logs))
            started = time.monotonic()
            outcome = job.analyze(spark, [str(logs)], str(base / f"out-{size}"))
            warm.append((time.monotonic() - started, outcome.summary))
        floor = _lower_median([min(run.values()) for run in floor_runs])
        took, summary = _median_run(warm)
        cold_s, cold_summary = _median_run(cold[size])
        cold_floor_s = _lower_median(cold_floor[size])
        results.append(
            {
                "events": summary["events"],
                "runs": args.runs,
                "cold_s": round(cold_s, 1),
                "warm_s": round(took, 1),
                "events_per_s_cold": round(summary["events"] / cold_s),
                "floor_json_parse_s": round(floor, 1),
                "floor_by_split_s": {
                    name: round(_lower_median([run[name] for run in floor_runs]), 1) for name in floor_runs[0]
                },
                "cold_ratio_to_floor": round(cold_s / floor, 2),
                "warm_ratio_to_floor": round(took / floor, 2),
                "cold_floor_json_parse_s": round(cold_floor_s, 1),
                "cold_floor_samples_s": [round(t, 1) for t in cold_floor[size]],
                "cold_ratio_to_cold_floor": round(cold_s / cold_floor_s, 2),
                # Arrow's parse of the same files (arrow_parse_seconds): what the ingest now
                # parses with; the ratios above are against Spark's parse, as issue 13 states.
                "floor_arrow_parse_s": round(_lower_median(arrow_floor_runs), 1),
                "arrow_floor_samples_s": [round(t, 1) for t in arrow_floor_runs],
                "warm_ratio_to_arrow_floor": round(took / _lower_median(arrow_floor_runs), 2),
                "cold_samples_s": [round(t, 1) for t, _ in cold[size]],
                "warm_samples_s": [round(t, 1) for t, _ in warm],
                "warmup_runs": args.warmup_runs,
                "warmup_samples_s": [round(t, 1) for t in warmup],
                "floor_samples_s": [round(min(run.values()), 1) for run in floor_runs],
                # The step times of the median runs.
                "cold_timings_s": cold_summary.get("timings_s"),
                "warm_timings_s": summary.get("timings_s"),
                # Each step's start and end (s from the job's start): the analyses' steps run in
                # concurrent branches, so their times overlap.
                "cold_step_spans_s": cold_summary.get("step_spans_s"),
                "warm_step_spans_s": summary.get("step_spans_s"),
                "answers_match": answers_match([run[1] for run in warm + cold[size]], expected),
            }
        )
        print(json.dumps(results[-1]), flush=True)
    spark.stop()
    report: dict[str, Any] = {
        "benchmark": "analytics",
        "master": args.master,
        "class_archive": archive is not None and archive.ready(),
        # What ran the job: results from different Spark or Java versions compare only by ratio.
        "runtime": runtime(java_setup),
        "machine": common.machine(),
        "results": results,
        **cost_per_event(results),
    }
    largest = results[-1]
    if largest["events"] >= 10_000_000:
        scaled = largest["cold_s"] * 10_000_000 / largest["events"]
        report["target_10m_cold_under_s"] = TARGET_COLD_S_FOR_10M
        report["target_ratio_to_floor"] = TARGET_RATIO_TO_FLOOR
        report["target_cold_met"] = scaled <= TARGET_COLD_S_FOR_10M
        report["target_ratio_met"] = (
            largest["warm_ratio_to_floor"] <= TARGET_RATIO_TO_FLOOR
            and largest["cold_ratio_to_cold_floor"] <= TARGET_RATIO_TO_FLOOR
        )
        report["target_ratio_met_cold_vs_warm_floor"] = largest["cold_ratio_to_floor"] <= TARGET_RATIO_TO_FLOOR
    print(json.dumps(report, indent=2))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
