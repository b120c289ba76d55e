"""A long chaos campaign (`controller-svc chaos`) on real processes, its summary kept with the
machine it ran on:

    .venv/bin/python -m bench.chaos --duration-s 1800 --seed 100 --out bench/results/chaos-30min.json

Pass/fail is the campaign's own (converged, nothing lost, no invariant violation); the figures
(faults injected by kind, convergence time after the faults, availability counted from the
fault) are what this run records."""

from __future__ import annotations

import argparse
import json
import tempfile

from bench.common import machine, save
from controller_svc.devtools.chaos import ChaosSettings, run_chaos


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-s", type=float, default=1800.0)
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--controllers", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=4)
    parser.add_argument("--topics", type=int, default=6)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--dir", default=None, help="cluster directory (default: a new temporary one)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="kcontroller-chaos-")
    summary = run_chaos(
        ChaosSettings(
            directory=directory,
            seed=args.seed,
            duration_s=args.duration_s,
            controllers=args.controllers,
            brokers=args.brokers,
            topics=args.topics,
            partitions=args.partitions,
        )
    )
    result = {"benchmark": "chaos", **machine(), **summary}
    if summary["passed"]:
        result.pop("schedule", None)
    print(json.dumps(result, indent=2))
    if args.out:
        save(args.out, [result])
    raise SystemExit(0 if summary["passed"] else 1)


if __name__ == "__main__":
    main()
