"""Benchmark: where the analytics' ingest step spends its time, against the JSON-parse floor.

    python -m bench.analytics_ingest --events 10000000 [--runs 2]

The ingest (`controller_svc.analytics.ingest.ingest`) reads every line as text, parses it with
`from_json`, classifies it (malformed or not, and why) and writes the `events` table, Parquet
partitioned by status and kind. At 10M events it is about half of the whole analysis, so this
splits it, in one warm JVM on the same files (the synthetic histories of bench.analytics):

- `floor_s`: Spark's JSON reader on the files with the same schema, every column hashed (the
  floor bench.analytics compares the whole analysis with);
- `parse_classify_s`: the ingest's query with a sink that discards the rows (`noop`): text read,
  `from_json`, classification, no write;
- `ingest_s`: the ingest as the job runs it; `ingest_s - parse_classify_s` is the table's write;
- `json_reader_ingest_s`: the alternative of parsing with Spark's JSON reader instead of
  `from_json` (which parses each line through a java.io.Reader), with the same classification
  and write; plus `line_census_s`, the pass over the text that alternative would also need to
  keep exact line numbers (the JSON reader drops blank lines and turns a line holding an array
  into one row per element, so the job would have to find such lines first and fall back).

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
from controller_svc.analytics import ingest, job, schema, session


def _timed(action: Callable[[], object]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def _json_reader_ingest(spark: Any, files: list[str], out: str) -> None:
    from pyspark.sql import functions as F

    frame = (
        spark.read.schema(ingest.record_schema())
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", ingest.CORRUPT)
        .json(files)
    )
    typed = frame.select(
        F.col("_metadata.file_path").alias("file"),
        F.col("_metadata.file_block_start").alias("block"),
        F.monotonically_increasing_id().alias("mid"),
        # Only unparsable lines keep their text this way (a record that parsed but is
        # malformed would need the text fetched again), which favours this alternative.
        F.col(ingest.CORRUPT).alias("value"),
        *[F.col(name) for name, _ in schema.FIELDS],
    )
    ingest.classify(typed).write.mode("overwrite").partitionBy("status", "kind_group").parquet(f"{out}/events")


def _line_census(spark: Any, files: list[str]) -> None:
    """Per split: first id, line count and the lines the JSON reader would not map one to one."""
    from pyspark.sql import functions as F

    # A line that starts with "{" maps to one row unless its second byte is NUL (Jackson would
    # then read the bytes as UTF-16 or UTF-32); any other first byte is rare enough to send the
    # job to the fallback (blank, whitespace, "[", a byte-order mark, garbage). Invalid UTF-8,
    # which the JSON reader rejects and from_json's Reader replaces, too. A prefix test first:
    # three evaluations of the first character per line cost 4 s at 10M lines.
    value = F.col("value")
    irregular = ~value.startswith("{") | value.startswith("{\x00") | ~F.is_valid_utf8(value)
    lines = spark.read.text(files).select(
        F.col("_metadata.file_path").alias("file"),
        F.col("_metadata.file_block_start").alias("block"),
        F.monotonically_increasing_id().alias("mid"),
        irregular.cast("int").alias("irregular"),
    )
    lines.groupBy("file", "block").agg(F.min("mid"), F.count("*"), F.sum("irregular")).collect()


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
    measures: dict[str, Callable[[], object]] = {
        "floor_s": lambda: floor_seconds(spark, logs),
        "parse_classify_s": lambda: (
            ingest.parse(ingest.read_lines(spark, [str(logs)])).write.format("noop").mode("overwrite").save()
        ),
        "ingest_s": lambda: ingest.ingest(spark, [str(logs)], out),
        "json_reader_ingest_s": lambda: _json_reader_ingest(spark, files, out + "-json"),
        "line_census_s": lambda: _line_census(spark, files),
    }
    samples: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(args.runs):
        for name, action in measures.items():
            samples[name].append(round(_timed(action), 2))
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
        "json_reader_alternative_s": round(median["json_reader_ingest_s"] + median["line_census_s"], 2),
    }
    print(json.dumps(report, indent=2))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
