"""Benchmark: `controller-svc analyze --service` (the analysis in a kept Spark session) against
the command that starts its own Spark, on the same synthetic histories as bench.analytics.

    python -m bench.analytics_service --events 1000000 --events 10000000 --runs 2

Starts `controller-svc analyze-service` once (`service_start_s`: from the process' start to its
listening line; `service_ready_s`: to its ready line, after its own warm-up of
`--service-warmup-runs` analyses, `service_warmup_runs`), warms it as bench.analytics warms its
JVM (the 20k-event history, then each size --warmup-runs times, untimed: `warmup_samples_s`, the
first of them the first request after the start), then for each run and size, one after another:

- `service_s`: `controller-svc analyze LOGDIR --out OUTDIR --service ADDR`, a new process from
  start to exit: what an operator waits for with a service running; `service_job_s`: the
  analysis' own time in the service (summary.json's `elapsed_s`), the rest being the client's
  start and the request;
- `cold_s`: the same command without a service (Spark's start-up included), as bench.analytics'
  cold runs, in the same hour;
- the floor: Spark's JSON parse of the same files in this process' warm JVM (bench.analytics'
  floor: the faster of two split choices).

Prints JSON: medians with every sample, ratios to the floor, and the cost per event split into a
fixed part per run and a marginal part per million events, for the service and the cold
command (issue 13: "cost per event flat from 1M to 10M")."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench import analytics, common
from controller_svc.analytics import job, service, session

SERVICE_START_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class StartedService:
    process: subprocess.Popen[str]
    address: str
    listening_s: float
    ready_s: float


def start_service(master: str, warmup_runs: int) -> StartedService:
    """The service started, once it has printed its ready line (after its warm-up)."""
    started = time.monotonic()
    command = [sys.executable, "-m", "controller_svc.cli.main", "analyze-service", "--listen", "127.0.0.1:0"]
    process = subprocess.Popen(
        [*command, "--master", master, "--log-level", "WARNING", "--warmup-runs", str(warmup_runs)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    address, listening_s = "", 0.0
    for line in process.stdout:
        if line.startswith("analyze-service: listening on "):
            address, listening_s = line.split()[-1], time.monotonic() - started
        elif line.startswith("analyze-service: ready after ") and address:
            return StartedService(process, address, listening_s, time.monotonic() - started)
        if time.monotonic() - started > SERVICE_START_TIMEOUT_S:
            break
    process.kill()
    raise RuntimeError("the analysis service did not start")


def command_run(
    logs: pathlib.Path, out: pathlib.Path, master: str, service: str | None
) -> tuple[float, dict[str, Any]]:
    """`controller-svc analyze` as a new process, from start to exit, with or without the service."""
    command = [sys.executable, "-m", "controller_svc.cli.main", "analyze", str(logs), "--out", str(out)]
    command += ["--service", service] if service else ["--master", master]
    started = time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    took = time.monotonic() - started
    return took, json.loads((out / "summary.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    analytics.add_history_arguments(parser)
    parser.add_argument("--runs", type=int, default=2, help="timed runs of each measurement; medians reported")
    parser.add_argument("--warmup-runs", type=int, default=1, help="untimed service analyses of each size first")
    parser.add_argument(
        "--service-warmup-runs",
        type=int,
        default=service.DEFAULT_WARMUP_RUNS,
        help="the service's own warm-up (analyze-service --warmup-runs)",
    )
    parser.add_argument("--note", default="", help="a note kept in the report")
    parser.add_argument("--out", help="also write the report (JSON) here")
    args = parser.parse_args()
    if args.runs < 1 or args.warmup_runs < 0 or args.service_warmup_runs < 0:
        parser.error("--runs must be at least 1, --warmup-runs and --service-warmup-runs at least 0")
    sizes = sorted(args.events or [1_000_000, 10_000_000])
    base = pathlib.Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    histories = {size: analytics.history(base, size) for size in [20_000, *sizes]}
    # The command records the driver's class archive on its first run on a machine (as in
    # bench.analytics): the cold runs and the service measure the usual start, not that one.
    command_run(histories[20_000][0], base / "out-archive", args.master, None)
    java_setup = session.check_runtime()
    archive = session.locate_class_archive(java_setup)
    started = start_service(args.master, args.service_warmup_runs)
    process, address = started.process, started.address
    try:
        warmup: dict[int, list[float]] = {}
        for size in [20_000, *sizes]:
            for _ in range(args.warmup_runs if size != 20_000 else 1):
                took, _ = command_run(histories[size][0], base / f"out-service-{size}", args.master, address)
                warmup.setdefault(size, []).append(took)
        spark = session.build(args.master)
        job.analyze(spark, [str(histories[20_000][0])], str(base / "out-warm"))  # this JVM's own warm-up
        samples: dict[int, dict[str, list[Any]]] = {size: {} for size in sizes}
        for _ in range(args.runs):
            for size in sizes:
                logs = histories[size][0]
                runs = samples[size]
                runs.setdefault("service", []).append(
                    command_run(logs, base / f"out-service-{size}", args.master, address)
                )
                runs.setdefault("cold", []).append(command_run(logs, base / f"out-cold-{size}", args.master, None))
                runs.setdefault("floor", []).append(min(analytics.floor_seconds(spark, logs).values()))
                print(
                    json.dumps(
                        {"events": size, **{k: round(v[-1][0] if k != "floor" else v[-1], 1) for k, v in runs.items()}}
                    ),
                    flush=True,
                )
        spark.stop()
    finally:
        process.send_signal(signal.SIGTERM)
        service_exit = process.wait(timeout=300)
    results: list[dict[str, Any]] = []
    for size in sizes:
        runs, expected = samples[size], histories[size][1]
        service_s, service_summary = analytics._median_run(runs["service"])
        cold_s, cold_summary = analytics._median_run(runs["cold"])
        floor = analytics._lower_median(runs["floor"])
        results.append(
            {
                "events": service_summary["events"],
                "runs": args.runs,
                "service_s": round(service_s, 1),
                "service_job_s": service_summary["elapsed_s"],
                "cold_s": round(cold_s, 1),
                "floor_json_parse_s": round(floor, 1),
                "service_ratio_to_floor": round(service_s / floor, 2),
                "cold_ratio_to_floor": round(cold_s / floor, 2),
                "service_samples_s": [round(t, 1) for t, _ in runs["service"]],
                "service_job_samples_s": [s["elapsed_s"] for _, s in runs["service"]],
                "cold_samples_s": [round(t, 1) for t, _ in runs["cold"]],
                "floor_samples_s": [round(t, 1) for t in runs["floor"]],
                "warmup_samples_s": [round(t, 1) for t in warmup[size]],
                "service_timings_s": service_summary.get("timings_s"),
                "cold_timings_s": cold_summary.get("timings_s"),
                "answers_match": analytics.answers_match([s for _, s in runs["service"] + runs["cold"]], expected),
            }
        )
    report: dict[str, Any] = {
        "benchmark": "analytics_service",
        "note": args.note,
        "master": args.master,
        "class_archive": archive is not None and archive.ready(),
        "runtime": analytics.runtime(java_setup),
        "machine": common.machine(),
        "service_start_s": round(started.listening_s, 1),
        "service_ready_s": round(started.ready_s, 1),
        "service_warmup_runs": args.service_warmup_runs,
        "service_exit_code": service_exit,
        "results": results,
        **analytics.cost_per_event(results, modes=("service", "cold")),
    }
    print(json.dumps(report, indent=2))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
