"""Benchmark: the JIT's share of an analysis in a kept Spark session, with and without the
analysis service's warm-up (`controller-svc analyze-service --warmup-runs`).

    python -m bench.analytics_jit --events 1000000 --runs 4 --out bench/results/FILE.json

For each warm-up count (`--warmups`, default 0 and the service's default), a new process with a
new JVM (session.build, as the service builds it) makes that many analyses of the service's
warm-up history (service.WARMUP_EVENTS, generated as the service generates it), then `--runs`
analyses of the benchmarks' history of `--events` events, one after another. For each analysis
it reads /proc before and after: the CPU of the JVM's compiler threads (HotSpot's `C1/C2
CompilerThread`s), of the rest of the JVM, of the Python workers and of the driver's Python.
On 2 cores a compiler thread runs while the Python tasks wait for a core: its seconds are the
fixed part of an analysis that the warm-up can move before the first request.

Prints JSON: per warm-up count, the warm-up's analyses' times and each timed analysis' wall
time and CPU by part."""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench import analytics, common

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(stat_path: str) -> float:
    fields = pathlib.Path(stat_path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def cpu_by_part(driver_pid: int) -> dict[str, float]:
    """CPU seconds so far of this machine's processes by part: `jvm_compiler` (the JVM's JIT
    threads), `jvm_other`, `python_workers` (worker_daemon's processes), `driver_python`."""
    parts: dict[str, float] = collections.defaultdict(float)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            command = pathlib.Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if int(entry) == driver_pid:
                parts["driver_python"] += _cpu_s(f"/proc/{entry}/stat")
            elif command.split(" ", 1)[0].endswith("/java") and "pyspark" in command:
                # (Its command line names the workers' daemon module too: tested first.)
                for thread in os.listdir(f"/proc/{entry}/task"):
                    name = pathlib.Path(f"/proc/{entry}/task/{thread}/comm").read_text().strip()
                    part = "jvm_compiler" if re.match(r"C\d CompilerThre", name) else "jvm_other"
                    parts[part] += _cpu_s(f"/proc/{entry}/task/{thread}/stat")
            elif "worker_daemon" in command:
                parts["python_workers"] += _cpu_s(f"/proc/{entry}/stat")
        except (OSError, ValueError, IndexError):  # a process or thread that ended meanwhile
            continue
    return dict(parts)


def one_session(logs: pathlib.Path, warmups: int, runs: int, work: pathlib.Path) -> dict[str, Any]:
    """The measurement in this process: `warmups` analyses of the warm-up history, then `runs`
    of `logs`, in one new session."""
    from controller_svc.analytics import job, service, session, synthetic

    spark = session.build()
    try:
        warm_logs = work / "warmup-logs"
        synthetic.generate(warm_logs, service.WARMUP_EVENTS, brokers=30, partitions=10_000, seed=service.WARMUP_SEED)
        warmup_s = []
        for _ in range(warmups):
            started = time.monotonic()
            job.analyze(spark, [str(warm_logs)], str(work / "warmup-out"))
            warmup_s.append(round(time.monotonic() - started, 2))
        analyses = []
        for _ in range(runs):
            before = cpu_by_part(os.getpid())
            started = time.monotonic()
            job.analyze(spark, [str(logs)], str(work / "out"))
            wall = time.monotonic() - started
            after = cpu_by_part(os.getpid())
            cpu = {part: round(after.get(part, 0.0) - before.get(part, 0.0), 2) for part in sorted(after)}
            analyses.append({"wall_s": round(wall, 2), "cpu_s": cpu, "cpu_total_s": round(sum(cpu.values()), 2)})
    finally:
        spark.stop()
    return {"warmups": warmups, "warmup_s": warmup_s, "analyses": analyses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    analytics.add_history_arguments(parser, events=1_000_000, master=False)
    parser.add_argument("--runs", type=int, default=4, help="timed analyses after the warm-up")
    parser.add_argument("--warmups", type=int, action="append", help="warm-up counts to compare (repeatable)")
    parser.add_argument("--note", default="")
    parser.add_argument("--out", help="also write the report (JSON) here")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child's warm-up count
    args = parser.parse_args()
    if args.runs < 1 or any(count < 0 for count in args.warmups or []):
        parser.error("--runs must be at least 1 and --warmups at least 0")
    logs, _ = analytics.history(pathlib.Path(args.dir), args.events)
    if args.one is not None:
        with tempfile.TemporaryDirectory(prefix="kc-bench-jit-") as work:
            print(json.dumps(one_session(logs, args.one, args.runs, pathlib.Path(work))), flush=True)
        return
    from controller_svc.analytics import service

    sessions = []
    for count in args.warmups or [0, service.DEFAULT_WARMUP_RUNS]:
        command = [sys.executable, "-m", "bench.analytics_jit", "--one", str(count), "--runs", str(args.runs)]
        command += ["--events", str(args.events), "--dir", args.dir]
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        sessions.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(sessions[-1]), flush=True)
    report = {
        "benchmark": "analytics_jit",
        "note": args.note,
        "events": args.events,
        "runs": args.runs,
        "machine": common.machine(),
        "sessions": sessions,
    }
    common.print_report(report, args.out)


if __name__ == "__main__":
    main()
