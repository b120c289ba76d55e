"""`controller-svc analyze LOGDIR... --out OUTDIR [--master URL | --service ADDR]` (contract 6),
and `controller-svc analyze-service` (service.py: the same analysis in a kept Spark session).

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
    analyze.add_argument("--master", default=None, help="Spark master URL (default local[*])")
    analyze.add_argument(
        "--service",
        metavar="ADDR",
        help=(
            "have the analysis service at ADDR (host:port or unix:PATH; `controller-svc analyze-service`) run "
            "the analysis in its kept Spark session, without this command's Spark start-up; paths are sent "
            "absolute and must be readable (OUTDIR writable) by the service's process"
        ),
    )
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

    from controller_svc.analytics import service

    serve = sub.add_parser(
        "analyze-service",
        help="keep a Spark session and run `analyze --service` requests in it, one at a time",
        description=(
            "Starts Spark once and serves kcontroller.v1.Analysis (gRPC, with health and reflection) until "
            "SIGTERM: each request is `analyze` in the kept session, without the JVM's and Spark's start-up. "
            "It reads and writes the paths requests name, as its own user: keep it on loopback, a Unix "
            "socket, or mutual TLS (KCONTROLLER_TLS_*)."
        ),
    )
    serve.add_argument(
        "--listen",
        default=service.DEFAULT_LISTEN,
        help=f"host:port or unix:PATH (default {service.DEFAULT_LISTEN}; port 0: a free one, printed)",
    )
    serve.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    serve.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting (repeatable)")
    serve.add_argument(
        "--max-queued",
        type=int,
        default=service.DEFAULT_MAX_QUEUED,
        help=f"requests that may wait behind the running analysis (default {service.DEFAULT_MAX_QUEUED})",
    )
    serve.add_argument(
        "--warmup-runs",
        type=int,
        default=service.DEFAULT_WARMUP_RUNS,
        help=(
            f"analyses of a generated {service.WARMUP_EVENTS}-event history before SERVING, so that the JIT has "
            f"compiled Spark's per-analysis code before the first request (default {service.DEFAULT_WARMUP_RUNS}; "
            "0: none). Requests sent meanwhile wait"
        ),
    )
    serve.add_argument("--metrics-listen", metavar="HOST:PORT", help="serve Prometheus metrics on /metrics")
    serve.add_argument("--log-level", default="INFO", help="default INFO")


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
    if args.service:
        return _analyze_in_service(args)
    from controller_svc.analytics import session

    args.master = args.master or "local[*]"
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
    print_outcome(outcome.summary, outcome.summary_path, outcome.report_path, args.json)
    return outcome.exit_code


def _analyze_in_service(args: argparse.Namespace) -> int:
    """`analyze ... --service ADDR`: the same output and exit codes as a local analysis."""
    import grpc

    from controller_svc.analytics import service
    from controller_svc.common.errors import ErrorCode

    if args.master is not None or args.conf:
        print("analyze: --master and --conf are the service's own settings, not a request's", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        response = service.request_analysis(args.service, args.logdirs, args.out, args.cluster_by)
    except ValueError as e:  # the TLS settings
        print(f"analyze: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except grpc.RpcError as e:
        print(f"analyze: the analysis service at {args.service}: {e.code().name}: {e.details()}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if response.error_code != ErrorCode.NONE:
        print(f"analyze: {response.error_message} ({ErrorCode.name_of(response.error_code)})", file=sys.stderr)
        return int(response.exit_code) or EXIT_BAD_INPUT
    summary = json.loads(response.summary_json)
    print_outcome(summary, response.summary_path, response.report_path, args.json)
    return int(response.exit_code)


def run_service(args: argparse.Namespace) -> int:
    """`controller-svc analyze-service`."""
    from controller_svc.analytics import service

    try:
        conf = parse_conf(args.conf)
        if args.max_queued < 0:
            raise ValueError(f"--max-queued {args.max_queued}: expected 0 or more")
        if args.warmup_runs < 0:
            raise ValueError(f"--warmup-runs {args.warmup_runs}: expected 0 or more")
    except ValueError as e:
        print(f"analyze-service: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return service.run_service(
        args.master, conf, args.listen, args.max_queued, args.metrics_listen, args.log_level, args.warmup_runs
    )


def print_outcome(summary: dict[str, Any], summary_path: str, report_path: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        print(readable(summary))
        print(f"summary: {summary_path}\nreport:  {report_path}")
