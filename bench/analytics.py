"""Benchmark: `controller-svc analyze` on synthetic cluster histories.

    python -m bench.analytics --events 1000000 --events 10000000

For each size: generate a history (30 brokers, 10k partitions, failovers, broker failures,
preferred elections; cached under --dir), then time the whole analysis on `local[*]` in a warm
JVM. The floor, measured in the same run on the same files: Spark itself reading the JSON
with the same schema and hashing every column (the parse, without any analysis). Prints JSON:
events/s per size, the ratio to the floor, and whether cost grows linearly (seconds per
million events at the largest size over the smallest). Target: 10M events under 180 s.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import tempfile
import time
from typing import Any

from controller_svc.analytics import ingest, job, session, synthetic

TARGET_S_FOR_10M = 180.0


def history(base: pathlib.Path, events: int) -> tuple[pathlib.Path, dict[str, Any]]:
    directory = base / f"history-{events}"
    answers = directory / "expected.json"
    if not answers.exists():
        shutil.rmtree(directory, ignore_errors=True)
        expected = synthetic.generate(directory / "logs", events, brokers=30, partitions=10_000, seed=events)
        answers.write_text(json.dumps(expected.as_json()))
    return directory / "logs", json.loads(answers.read_text())


def floor_seconds(spark: Any, logs: pathlib.Path) -> float:
    from pyspark.sql import functions as F

    started = time.monotonic()
    frame = (
        spark.read.schema(ingest.record_schema())
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", ingest.STATE_CHANGE_GLOB)
        .json(str(logs))
    )
    # Every column is used (summed through a hash), so the JSON parser cannot skip any field.
    frame.agg(F.sum(F.hash(*frame.columns).cast("long"))).collect()
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, action="append", help="history sizes (repeatable)")
    parser.add_argument("--dir", default=str(pathlib.Path(tempfile.gettempdir()) / "kc-bench-analytics"))
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args()
    sizes = sorted(args.events or [1_000_000, 10_000_000])
    base = pathlib.Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    spark = session.build(args.master)
    # Warm the JVM (class loading, JIT) on a small history, as a long-running analysis would be.
    warm_logs, _ = history(base, 20_000)
    job.analyze(spark, [str(warm_logs)], str(base / "out-warm"))
    results: list[dict[str, Any]] = []
    for size in sizes:
        logs, expected = history(base, size)
        floor = floor_seconds(spark, logs)
        started = time.monotonic()
        outcome = job.analyze(spark, [str(logs)], str(base / f"out-{size}"))
        took = time.monotonic() - started
        summary = outcome.summary
        results.append(
            {
                "events": summary["events"],
                "seconds": round(took, 1),
                "events_per_s": round(summary["events"] / took),
                "floor_json_parse_s": round(floor, 1),
                "ratio_to_floor": round(took / floor, 2),
                "answers_match": summary["violations"] == expected["violations"]
                and summary["availability"]["failovers"] == expected["failovers"]
                and summary["availability"]["offline_intervals"] == expected["offline_intervals"],
            }
        )
        print(json.dumps(results[-1]), flush=True)
    spark.stop()
    per_million = [r["seconds"] / (r["events"] / 1e6) for r in results]
    report: dict[str, Any] = {
        "benchmark": "analytics",
        "master": args.master,
        "results": results,
        "seconds_per_million_smallest": round(per_million[0], 2),
        "seconds_per_million_largest": round(per_million[-1], 2),
        "linear": per_million[-1] <= per_million[0] * 1.5,
    }
    largest = results[-1]
    if largest["events"] >= 10_000_000:
        report["target_10m_under_s"] = TARGET_S_FOR_10M
        report["target_met"] = largest["seconds"] * 10_000_000 / largest["events"] <= TARGET_S_FOR_10M
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
