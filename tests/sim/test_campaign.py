"""The seeded campaigns (tests/sim/campaign.py) as part of the suite: hundreds of seeds of
mixed faults and admin operations on the simulated cluster, every one safe at every step and
converged at the end; and the same seed twice gives the same trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.sim.campaign import run_seed

SEEDS = 500


def test_every_seed_is_safe_at_every_step_and_converges() -> None:
    # A fixed hash seed makes every run, and the replay command a failure prints, exact.
    result = subprocess.run(
        [sys.executable, "-m", "tests.sim.campaign", "--seeds", str(SEEDS)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["seeds"] == SEEDS
    assert result.returncode == 0 and not summary["failed"], result.stderr[-6000:]


def test_the_same_seed_gives_the_same_trace() -> None:
    first, second = run_seed(11), run_seed(11)
    assert first.failure is None and len(first.trace) > 20
    assert first.trace == second.trace and first.virtual_s == second.virtual_s
    assert run_seed(12).trace != first.trace
