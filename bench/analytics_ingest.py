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
- `ingest_s`: the ingest as the job runs it: on a local master through the fast path
  (arrow_ingest.py: Arrow's parse, narrow per-kind files) for every file it takes;
- `spark_ingest_s`: the ingest with Spark's readers and writer for every file, as before the
  fast path; `spark_ingest_s - parse_classify_s` is Spark's write of the table;
- `line_by_line_ingest_s`: the same ingest with every file read line by line, as every file
  was before the census (`from_json` parses each line through a java.io.Reader: slower);
- `envelope_write_s`: the ingest's query writing, partitioned as the events table is, only the
  record's envelope (ts, node, kind) and the table's own columns (file_id, block, mid, value,
  status, kind_group), none of the kinds' own fields;
- `null_fields_write_s`: the same with the kinds' 27 fields as well, each null in every row
  (a condition the optimizer cannot fold: null unless `mid` < 0, which it never is).

So `envelope_write_s - parse_classify_s` is what a table of only those columns costs to write,
`null_fields_write_s - envelope_write_s` what the fields' nulls alone cost (every row carries
every field, null where its kind has none: most of them, in most rows), and `spark_ingest_s -
null_fields_write_s` what their values cost.

Each measure is taken `--runs` times, interleaved; medians are reported, with every sample.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from bench import common
from bench.analytics import add_history_arguments, floor_seconds, history
from controller_svc.analytics import census, ingest, job, schema, session


def _timed(action: Callable[[], object]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def _spark_lines(spark: Any, logs: pathlib.Path) -> Any:
    """The ingest's rows as Spark's readers parse and classify them (without the fast path)."""
    lines = ingest.read_records(spark, [str(logs)]).lines
    assert lines is not None, "without the fast path, Spark reads every file"
    return lines


def _write_fields(spark: Any, logs: pathlib.Path, out: str, kept_when: Column | None) -> None:
    """The ingest's rows written as the events table is, the kinds' fields left out (`kept_when`
    None) or each kept only where `kept_when` holds."""
    lines = _spark_lines(spark, logs)
    fields = [name for name, _ in schema.FIELDS if name not in schema.ENVELOPE]
    kept: list[str | Column] = [c for c in lines.columns if c not in fields]
    if kept_when is not None:
        kept += [F.when(kept_when, F.col(name)).alias(name) for name in fields]
    ingest.write_events(lines.select(*kept), out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_history_arguments(parser, events=10_000_000)
    parser.add_argument("--runs", type=int, default=2)
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
            lambda: _spark_lines(spark, logs).write.format("noop").mode("overwrite").save()
        ),
        # As the job runs it: through the fast path (arrow_ingest.py) where it applies.
        "ingest_s": lambda: _timed(lambda: ingest.ingest(spark, [str(logs)], out)),
        "spark_ingest_s": lambda: _timed(lambda: ingest.write_events(_spark_lines(spark, logs), out + "-spark")),
        "line_by_line_ingest_s": lambda: _timed(
            lambda: ingest.write_events(ingest.parse(ingest.read_lines(spark, files)), out + "-lines")
        ),
        "envelope_write_s": lambda: _timed(lambda: _write_fields(spark, logs, out + "-envelope", None)),
        "null_fields_write_s": lambda: _timed(lambda: _write_fields(spark, logs, out + "-nulls", F.col("mid") < 0)),
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
        # Spark's write of the table (the ingest without the fast path, less its parse).
        "write_s": round(median["spark_ingest_s"] - median["parse_classify_s"], 2),
        "saved_by_the_json_reader_s": round(median["line_by_line_ingest_s"] - median["spark_ingest_s"], 2),
        "saved_by_the_fast_path_s": round(median["spark_ingest_s"] - median["ingest_s"], 2),
        # The events table's write, split: the envelope and the table's columns, the nulls of the kinds'
        # fields, the values of those fields.
        "write_split_s": {
            "envelope_columns": round(median["envelope_write_s"] - median["parse_classify_s"], 2),
            "field_nulls": round(median["null_fields_write_s"] - median["envelope_write_s"], 2),
            "field_values": round(median["spark_ingest_s"] - median["null_fields_write_s"], 2),
        },
    }
    print(json.dumps(report, indent=2))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
