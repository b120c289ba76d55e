"""The event-loop monitor says where a held loop was, not only for how long: its thread samples
the loop thread's stack once the loop has not ticked for the warning threshold."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from typing import Any

import pytest

from controller_svc.common import loop_monitor
from controller_svc.common.loop_monitor import EventLoopMonitor, held_in


class Records:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def record(self, kind: str, **fields: Any) -> None:
        self.rows.append({"kind": kind, **fields})

    def blocked(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["kind"] == "event_loop.blocked"]


def _compute_for(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sum(range(1000))


def _compute_until_sampled(monitor: EventLoopMonitor, at_least_s: float, give_up_s: float = 30.0) -> None:
    """Holds the loop (pure Python, as a long step does) for `at_least_s` and until the sampler
    has seen it."""
    started = time.monotonic()
    while time.monotonic() - started < give_up_s and (not monitor._held or time.monotonic() - started < at_least_s):
        sum(range(1000))


async def test_a_held_loop_is_reported_with_the_stack_it_was_held_in(caplog: pytest.LogCaptureFixture) -> None:
    records = Records()
    monitor = EventLoopMonitor(records, warn_after_s=0.2, current_step=lambda: "SomeEvent", tick_s=0.01)  # type: ignore[arg-type]
    running = asyncio.ensure_future(monitor.run())
    await asyncio.sleep(0.05)
    with caplog.at_level(logging.WARNING, logger=loop_monitor.__name__):
        _compute_until_sampled(monitor, at_least_s=0.3)
        await asyncio.sleep(0.05)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    (blocked,) = records.blocked()
    assert blocked["step"] == "SomeEvent" and blocked["blocked_ms"] >= 200
    # One stack per distinct place sampled: the hold's loop has two lines, and on a busy machine
    # the loop thread may also be sampled in the loop's own run, waiting for a core to tick.
    stacks = blocked["held_in"]
    computing = [where for where in stacks if "_compute_until_sampled" in " < ".join(where.split(" < ")[:2])]
    assert computing, stacks
    for where in computing:
        assert any("test_loop_monitor.py" in f and "test_a_held_loop" in f for f in where.split(" < ")[1:]), where
    for where in stacks:
        assert f"held in: {where}" in caplog.text


async def test_a_loop_that_ticks_is_not_sampled() -> None:
    records = Records()
    monitor = EventLoopMonitor(records, warn_after_s=0.2, tick_s=0.01)  # type: ignore[arg-type]
    running = asyncio.ensure_future(monitor.run())
    for _ in range(30):
        _compute_for(0.005)  # short holds, under the threshold
        await asyncio.sleep(0.01)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    assert records.blocked() == [] and monitor._held == []


def test_sampling_starts_at_half_the_threshold() -> None:
    """A hold is sampled from half the warning threshold on, so that one that ends just past the
    threshold has its stack (sampled only past it, the 1M run's 2.0 s hold against a 2 s
    threshold had none). The loop's last tick is kept 0.6 thresholds in the past."""
    monitor = EventLoopMonitor(Records(), warn_after_s=0.4)  # type: ignore[arg-type]
    monitor._loop_thread = threading.get_ident()
    stopped = threading.Event()
    sampler = threading.Thread(target=monitor._sample_while_held, args=(stopped,), daemon=True)
    sampler.start()
    give_up = time.monotonic() + 10
    while not monitor._held and time.monotonic() < give_up:
        monitor._last_tick = time.monotonic() - 0.24
        time.sleep(0.01)
    stopped.set()
    sampler.join()
    assert monitor._held and "test_sampling_starts_at_half_the_threshold" in monitor._held[0][1]


def test_a_hold_that_ends_under_the_threshold_drops_its_samples() -> None:
    """Kept, the samples of short holds would fill the MAX_HELD_SAMPLES the sampler keeps, and
    the next hold past the threshold would have no room for its own."""
    records = Records()
    monitor = EventLoopMonitor(records, warn_after_s=1.0)  # type: ignore[arg-type]
    for short in range(loop_monitor.MAX_HELD_SAMPLES + 1):
        monitor._held.append((monitor._ticks, f"x.py:{short} short"))
        monitor.observe(0.7)  # under the threshold: not reported, its sample dropped
        assert monitor._held == []
    monitor.observe(2.0)
    assert [r["held_in"] for r in records.blocked()] == [[]]


def test_a_sample_of_an_earlier_hold_is_not_given_to_a_later_one() -> None:
    """A stack sampled just as a hold ended (under the threshold, so never reported) is not
    reported with the next hold: each sample is tied to the tick the hold followed."""
    records = Records()
    monitor = EventLoopMonitor(records, warn_after_s=1.0)  # type: ignore[arg-type]
    monitor.observe(0.0)
    monitor._held.append((monitor._ticks, "old.py:1 earlier"))
    monitor.observe(2.0)  # the hold the sample was taken in: reported with it
    monitor._held.append((monitor._ticks - 1, "old.py:2 stale"))  # sampled before the last tick
    monitor.observe(3.0)
    assert [r["held_in"] for r in records.blocked()] == [["old.py:1 earlier"], []]


def test_held_in_names_the_innermost_frame_first_with_short_paths() -> None:
    def inner() -> str:
        return held_in(sys._getframe(), limit=2)

    def outer() -> str:
        return inner()

    first, second = outer().split(" < ")
    assert first.split(":")[0].endswith("test_loop_monitor.py"), first
    assert first.endswith(" inner") and second.endswith(" outer"), (first, second)
    assert held_in(None) == ""
    assert loop_monitor._short_path("/x/y/site-packages/grpc/aio/_server.py") == "site-packages/grpc/aio/_server.py"
    assert (
        loop_monitor._short_path("/work/main/controller_svc/controller/term.py") == "controller_svc/controller/term.py"
    )


def test_a_stack_deep_in_a_library_still_names_the_projects_step() -> None:
    """Past `limit` frames of a library, the first frame of the project's own code is kept."""
    library: dict[str, Any] = {"held_in": held_in, "sys": sys}
    source = "def deep(n):\n    return held_in(sys._getframe(), limit=3) if n == 0 else deep(n - 1)\n"
    exec(compile(source, "/venv/lib/python3.11/site-packages/somelib/deep.py", "exec"), library)
    project: dict[str, Any] = {"deep": library["deep"]}
    exec(compile("def step():\n    return deep(6)\n", "/srv/app/controller_svc/fake/step.py", "exec"), project)
    parts = project["step"]().split(" < ")
    assert parts[:3] == ["site-packages/somelib/deep.py:2 deep"] * 3
    assert parts[3:] == ["...", "controller_svc/fake/step.py:2 step"]
