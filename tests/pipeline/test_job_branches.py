"""The analysis' concurrent branches: results by name, failures raised, each step's own time."""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytestmark = pytest.mark.pipeline


def test_branches_run_at_once_and_return_by_name() -> None:
    from controller_svc.analytics.job import StepClock, _run_concurrently

    # Each branch waits for the other: only concurrent branches can finish.
    both = threading.Barrier(2, timeout=30)
    result = _run_concurrently(StepClock(), {"a": lambda: (both.wait(), "A")[1], "b": lambda: (both.wait(), "B")[1]})
    assert result == {"a": "A", "b": "B"}


def test_a_failing_branch_is_raised_after_the_others_finish() -> None:
    from controller_svc.analytics.job import StepClock, _run_concurrently

    finished: list[str] = []
    started = threading.Event()

    def fails() -> None:
        started.wait(30)
        raise ValueError("branch broke")

    def slow() -> str:
        started.set()
        finished.append("slow")
        return "done"

    with pytest.raises(ValueError, match="branch broke"):
        _run_concurrently(StepClock(), {"fails": fails, "slow": slow})
    assert finished == ["slow"]


def test_each_thread_counts_its_own_steps() -> None:
    from controller_svc.analytics.job import StepClock

    now = [0.0]
    clock = StepClock(now=lambda: now[0])
    now[0] = 1.0
    clock.lap("ingest")
    gates = {name: (threading.Event(), threading.Event()) for name in ("a", "b")}

    def branch(name: str) -> None:
        began, lap = gates[name]
        clock.begin()
        began.set()
        lap.wait(30)
        clock.lap(name)

    threads = {name: threading.Thread(target=branch, args=(name,)) for name in gates}
    threads["a"].start()  # begins at 1
    gates["a"][0].wait(30)
    now[0] = 3.0
    threads["b"].start()  # begins at 3
    gates["b"][0].wait(30)
    now[0] = 4.0
    gates["a"][1].set()
    threads["a"].join(30)
    now[0] = 5.0
    gates["b"][1].set()
    threads["b"].join(30)
    now[0] = 6.0
    clock.lap("analyses")  # the main thread's step: from its own last lap
    steps: dict[str, Any] = clock.steps
    assert steps == {"ingest": 1.0, "a": 3.0, "b": 2.0, "analyses": 5.0}
