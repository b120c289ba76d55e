"""Benchmark: the analysis service's resident memory over many analyses (does a kept session
grow?).

    python -m bench.analytics_service_memory --events 1000000 --analyses 20 --out bench/results/FILE.json

Starts `controller-svc analyze-service` (with its default warm-up), then makes `--analyses`
requests with `controller-svc analyze --service` on the benchmarks' history of `--events`
events (bench.analytics.history), one after another. After the warm-up and after each analysis
it reads the resident memory (VmRSS) of the service's Python process, of its JVM, and of the
Python workers' daemon and workers together. Prints JSON: every sample, and per part the first
and the last and the growth per analysis over the second half of the requests (the slope of a
least-squares line: a session that keeps something per analysis grows there at a steady rate,
after the caches' first filling)."""

from __future__ import annotations

import argparse
import json
import pathlib
import signal
import time
from typing import Any

from bench import analytics, common
from bench.analytics_service import command_run, start_service


def _rss_mb(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            found.extend(int(child) for child in (task / "children").read_text().split())
        except OSError:  # a thread that ended meanwhile
            continue
    return found


def rss_by_part(service_pid: int) -> dict[str, float]:
    """Resident MB of the service's Python, its JVM (a child of it) and the Python workers (the
    JVM's Python children: the daemon and the workers it forked)."""
    parts = {"service_python": _rss_mb(service_pid), "jvm": 0.0, "python_workers": 0.0}
    for child in _children(service_pid):
        try:
            if pathlib.Path(f"/proc/{child}/exe").resolve().name != "java":
                continue
            parts["jvm"] += _rss_mb(child)
            stack = _children(child)
            while stack:
                worker = stack.pop()
                parts["python_workers"] += _rss_mb(worker)
                stack.extend(_children(worker))
        except OSError:  # a process that ended meanwhile
            continue
    return {part: round(mb, 1) for part, mb in parts.items()}


def slope_per_analysis(values: list[float]) -> float:
    """The least-squares slope of `values` against their index (MB per analysis)."""
    count = len(values)
    if count < 2:
        return 0.0
    mean_x = (count - 1) / 2
    mean_y = sum(values) / count
    covariance = sum((index - mean_x) * (value - mean_y) for index, value in enumerate(values))
    variance = sum((index - mean_x) ** 2 for index in range(count))
    return covariance / variance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    analytics.add_history_arguments(parser, events=1_000_000)
    parser.add_argument("--analyses", type=int, default=20)
    parser.add_argument("--note", default="")
    parser.add_argument("--out", help="also write the report (JSON) here")
    args = parser.parse_args()
    if args.analyses < 2:
        parser.error("--analyses must be at least 2")
    base = pathlib.Path(args.dir)
    logs, expected = analytics.history(base, args.events)
    started = start_service(args.master, warmup_runs=8)
    samples: list[dict[str, Any]] = [{"after": "warm-up", **rss_by_part(started.process.pid)}]
    summaries = []
    try:
        for index in range(args.analyses):
            took, summary = command_run(logs, base / "out-memory", args.master, started.address)
            summaries.append(summary)
            samples.append(
                {"after": f"analysis {index + 1}", "seconds": round(took, 1), **rss_by_part(started.process.pid)}
            )
            print(json.dumps(samples[-1]), flush=True)
    finally:
        started.process.send_signal(signal.SIGTERM)
        exit_code = started.process.wait(timeout=300)
    analysed = samples[1:]
    second_half = analysed[len(analysed) // 2 :]
    parts = ("service_python", "jvm", "python_workers")
    report = {
        "benchmark": "analytics_service_memory",
        "note": args.note,
        "events": summaries[0]["events"],
        "analyses": args.analyses,
        "machine": common.machine(),
        "measured_at_unix": round(time.time()),
        "service_exit_code": exit_code,
        "answers_match": analytics.answers_match(summaries, expected),
        "by_part": {
            part: {
                "after_warmup_mb": samples[0][part],
                "after_first_mb": analysed[0][part],
                "after_last_mb": analysed[-1][part],
                "max_mb": max(sample[part] for sample in analysed),
                "second_half_mb_per_analysis": round(slope_per_analysis([s[part] for s in second_half]), 2),
            }
            for part in parts
        },
        "samples": samples,
    }
    common.print_report(report, args.out)


if __name__ == "__main__":
    main()
