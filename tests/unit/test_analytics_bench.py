"""The analytics benchmarks' pure parts: bench.analytics' cost per event (the fixed and marginal
parts of a run's time) and bench.analytics_codegen's classes per step."""

from __future__ import annotations

from typing import Any

import pytest

from bench import analytics


def _result(events: int, cold_s: float, warm_s: float) -> dict[str, Any]:
    return {"events": events, "cold_s": cold_s, "warm_s": warm_s}


def test_a_fixed_cost_per_run_is_split_from_the_cost_per_event() -> None:
    # 20 s fixed + 3 s per million cold, 8 s + 1.5 s per million warm.
    split = analytics.cost_per_event([_result(1_000_000, 23.0, 9.5), _result(10_000_000, 50.0, 23.0)])
    assert split["cold_seconds_per_million_smallest"] == 23.0
    assert split["cold_seconds_per_million_largest"] == 5.0
    assert split["warm_seconds_per_million_smallest"] == 9.5
    assert split["warm_seconds_per_million_largest"] == 2.3
    assert split["cold_marginal_seconds_per_million"] == pytest.approx(3.0)
    assert split["cold_fixed_s"] == pytest.approx(20.0)
    assert split["warm_marginal_seconds_per_million"] == pytest.approx(1.5)
    assert split["warm_fixed_s"] == pytest.approx(8.0)
    assert split["linear"] is True
    # Falling with size is no more flat than growing: 23 s per million against 5 s.
    assert split["cold_per_event_spread"] == 4.6
    assert split["warm_per_event_spread"] == pytest.approx(9.5 / 2.3, abs=0.01)


def test_a_cost_per_event_that_grows_is_not_linear() -> None:
    # 10x the events, 20x the time: superlinear, and a negative fixed part says so too.
    split = analytics.cost_per_event([_result(1_000_000, 5.0, 4.0), _result(10_000_000, 100.0, 80.0)])
    assert split["linear"] is False
    assert split["cold_fixed_s"] < 0
    assert split["cold_per_event_spread"] == 2.0


def test_one_size_has_no_split() -> None:
    split = analytics.cost_per_event([_result(1_000_000, 30.0, 12.0)])
    assert split["cold_seconds_per_million_smallest"] == split["cold_seconds_per_million_largest"] == 30.0
    assert "cold_fixed_s" not in split and "warm_marginal_seconds_per_million" not in split
    assert split["linear"] is True and split["cold_per_event_spread"] == 1.0


def test_each_step_gets_the_classes_compiled_since_the_previous_step() -> None:
    import logging

    from bench import analytics_codegen

    totals = iter([(100, 1000.0), (103, 1500.0), (103, 1500.0), (150, 4000.0)])
    counter = analytics_codegen.CodegenCounter(lambda: next(totals))

    def line(message: str) -> logging.LogRecord:
        return logging.LogRecord("analytics", logging.INFO, __file__, 1, message, None, None)

    counter.emit(line("ingest done in 3.2 s"))
    counter.emit(line("12000 lines parsed in 3.3 s"))  # not a step's end: not read
    counter.emit(line("clusters done in 0.1 s"))
    counter.emit(line("leadership done in 2.0 s"))
    assert counter.steps == [
        {"step": "ingest", "classes": 3, "janino_s": 0.5},
        {"step": "clusters", "classes": 0, "janino_s": 0.0},
        {"step": "leadership", "classes": 47, "janino_s": 2.5},
    ]


def test_the_split_covers_the_modes_asked_for() -> None:
    # bench.analytics_service splits the service's command and the cold one.
    results = [
        {"events": 1_000_000, "service_s": 6.0, "cold_s": 14.0},
        {"events": 10_000_000, "service_s": 33.0, "cold_s": 41.0},
    ]
    split = analytics.cost_per_event(results, modes=("service", "cold"))
    assert split["service_marginal_seconds_per_million"] == pytest.approx(3.0)
    assert split["service_fixed_s"] == pytest.approx(3.0)
    assert split["service_seconds_per_million_smallest"] == 6.0
    assert split["cold_fixed_s"] == pytest.approx(11.0)
    assert not any(key.startswith("warm_") for key in split)


def test_the_memory_benchmark_reads_a_steady_growth_as_its_slope() -> None:
    from bench import analytics_service_memory

    assert analytics_service_memory.slope_per_analysis([100.0, 102.0, 104.0, 106.0]) == pytest.approx(2.0)
    # A cache's first filling then a plateau: no growth in the plateau.
    assert analytics_service_memory.slope_per_analysis([500.0, 500.0, 500.0]) == 0.0
    assert analytics_service_memory.slope_per_analysis([7.0]) == 0.0
    assert analytics_service_memory.slope_per_analysis([3.0, 1.0]) == pytest.approx(-2.0)
