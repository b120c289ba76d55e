"""Benchmark: where the analytics' ingest step spends its time, against the JSON-parse floor.

    python -m bench.analytics_ingest --events 10000000 [--runs 2]

The ingest (`controller_svc.analytics.ingest.ingest`) scans each file's bytes (census.py), parses
the files of one JSON object per line with Spark's JSON reader and any other file line by line
(text reader and `from_json`), classifies every line (malformed or not) and writes the `events`
table, Parquet partitioned by status and kind. At 10M events it is about half of the whole
analysis, so this splits it, in one warm JVM on the same files (the synthetic histories of
bench.analytics):

- `floor_s`: Spark's JSON reader on the files with the same schema, every column hashed (the
  floor bench.analytics compares the whole analysis with);
- `census_s`: the scan of the files' bytes that picks the reader (Python, on the driver);
- `parse_classify_s`: the ingest's query with a sink that discards the rows (`noop`): the
  census, the parse, the classification, no write;
- `ingest_s`: the ingest as the job runs it; `ingest_s - parse_classify_s` is the table's write;
- `line_by_line_ingest_s`: the same ingest with every file read line by line, as every file
  was before the census (`from_json` parses each line through a java.io.Reader: slower).

Each measure is taken `--runs` times, interleaved; medians are reported, with every sample.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench import common
from bench.analytics import floor_seconds, history
from controller_svc.analytics import census, ingest, job, session


def _timed(action: Callable[[], object]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--dir", default=str(pathlib.Path(tempfile.gettempdir()) / "kc-bench-analytics"))
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--out", help="also write the report (JSON) here")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, not {args.runs}")
    base = pathlib.Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    logs, _ = history(base, args.events)
    spark = session.build(args.master)
    warm_logs, _ = history(base, 20_000)
    job.analyze(spark, [str(warm_logs)], str(base / "out-warm"))
    files = ingest.list_inputs(spark, [str(logs)])
    out = str(base / "out-ingest")
    # Each measure returns its seconds; the floor is taken as bench.analytics takes it, the
    # faster of its two split sizes.
    measures: dict[str, Callable[[], float]] = {
        "floor_s": lambda: min(floor_seconds(spark, logs).values()),
        "census_s": lambda: _timed(lambda: census.plan(files)),
        "parse_classify_s": lambda: _timed(
            lambda: ingest.read_records(spark, [str(logs)]).lines.write.format("noop").mode("overwrite").save()
        ),
        "ingest_s": lambda: _timed(lambda: ingest.ingest(spark, [str(logs)], out)),
        "line_by_line_ingest_s": lambda: _timed(
            lambda: ingest.write_events(ingest.parse(ingest.read_lines(spark, files)), out + "-lines")
        ),
    }
    samples: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(args.runs):
        for name, action in measures.items():
            samples[name].append(round(action(), 2))
            print(json.dumps({name: samples[name][-1]}), flush=True)
    spark.stop()
    median = {name: round(statistics.median(values), 2) for name, values in samples.items()}
    floor = median["floor_s"]
    report: dict[str, Any] = {
        "benchmark": "analytics_ingest",
        "events": args.events,
        "master": args.master,
        "machine": common.machine(),
        "runs": args.runs,
        "median_s": median,
        "samples_s": samples,
        "ratio_to_floor": {name: round(value / floor, 2) for name, value in median.items()},
        "write_s": round(median["ingest_s"] - median["parse_classify_s"], 2),
        "saved_by_the_json_reader_s": round(median["line_by_line_ingest_s"] - median["ingest_s"], 2),
    }
    print(json.dumps(report, indent=2))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
