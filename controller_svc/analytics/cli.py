"""`controller-svc analyze LOGDIR... --out OUTDIR [--master URL]` (contract 6).

Exit codes: 0 no violations, 1 at least one violation, 2 bad input or no result (missing
paths, no records, unreadable files, no Spark or Java 17+). Only a finished analysis exits 0 or 1."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from controller_svc.analytics import census

log = logging.getLogger("analytics")

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT = 0, 1, 2


def register(sub: Any) -> None:
    analyze = sub.add_parser(
        "analyze",
        help="check a cluster's state-change logs on Spark: invariants, availability, failovers",
        description=(
            "Reads the state-change logs (DESIGN.md contract 5) of every controller and broker, writes "
            "Parquet tables, OUTDIR/summary.json and OUTDIR/report.html. Exit 0: no invariant violation; "
            "1: violations; 2: bad input."
        ),
    )
    analyze.add_argument(
        "logdirs",
        nargs="+",
        metavar="LOGDIR",
        help="directories (every *.state-change.jsonl[.gz] below them) or files; any Spark-readable path",
    )
    analyze.add_argument("--out", required=True, metavar="OUTDIR", help="where the tables and the report go")
    analyze.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    analyze.add_argument(
        "--cluster-by",
        choices=("none", "dir"),
        default="none",
        help="none: all inputs are one cluster (default); dir: each directory holding log files is its own cluster",
    )
    analyze.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting (repeatable), e.g. spark.hadoop.fs.s3a.endpoint=...",
    )
    analyze.add_argument("--json", action="store_true", help="print summary.json instead of the readable summary")


def parse_conf(pairs: list[str]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf {pair!r}: expected KEY=VALUE")
        conf[key.strip()] = value
    return conf


def readable(summary: dict[str, Any]) -> str:
    a = summary["availability"]
    lines = [
        f"events {summary['events']}   malformed lines {summary['malformed']}   clusters {len(summary['clusters'])}",
        "violations: " + ", ".join(f"{k} {v}" for k, v in summary["violations"].items()),
        f"failovers {a['failovers']} (longest {a['longest_failover_ms']} ms from the fault, of which detection "
        f"{a['longest_failover_detection_ms']} ms; without a controller {a['controller_gap_ms']} ms in all)",
        f"offline intervals {a['offline_intervals']} on {a['partitions_affected']} partitions "
        f"(longest {a['longest_offline_ms']} ms, p99 {a['p99_offline_ms']} ms, still offline {a['still_offline']}; "
        f"{a['offline_detection_ms']} ms of partition-time before the loss was seen)",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from controller_svc.analytics import session

    try:
        conf = parse_conf(args.conf)
        java_setup = session.check_runtime()
    except (ValueError, session.SparkUnavailableError) as e:
        print(f"analyze: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from controller_svc.analytics import census, class_archive
    from controller_svc.analytics.ingest import STATE_CHANGE_GLOB

    # The local files' census runs while the JVM starts.
    prefetch = census.Prefetch(args.logdirs, STATE_CHANGE_GLOB)
    archive = session.locate_class_archive(java_setup)
    try:
        spark = session.build(args.master, conf, archive=archive)
    except Exception as e:  # a bad master URL or setting, a JVM that does not start
        print(f"analyze: could not start Spark ({args.master}): {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return _analyze(spark, args, prefetch)
    finally:
        # After the results are out: a JVM that records its class archive takes a while to exit.
        sys.stdout.flush()
        if archive is not None and archive.recording_wanted():
            print(
                f"analyze: saving Spark's classes to {archive.path} for faster starts (once; "
                f"{class_archive.ENV}=off to skip)",
                file=sys.stderr,
                flush=True,
            )
        session.stop(spark, archive)


def _analyze(spark: SparkSession, args: argparse.Namespace, prefetch: census.Prefetch) -> int:
    from controller_svc.analytics import job
    from controller_svc.analytics.ingest import ClusterBy, InputError

    try:
        outcome = job.analyze(spark, args.logdirs, args.out, ClusterBy(args.cluster_by), prefetch)
    except InputError as e:
        log.error("analyze: bad input: %s", e)
        print(f"analyze: bad input: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as e:  # unreadable input (a corrupt .gz), an unwritable OUTDIR: never exit 1
        log.exception("analyze: the analysis failed")
        print(
            f"analyze: the analysis failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(outcome.summary, indent=2))
    else:
        print(readable(outcome.summary))
        print(f"summary: {outcome.summary_path}\nreport:  {outcome.report_path}")
    return outcome.exit_code
