"""The analyses after the ingest run in concurrent branches (job.run_branches): the same tables
and figures as one after another, really at the same time, and a failed branch is neither lost
nor allowed to cut the others short."""

from __future__ import annotations

import itertools
import logging
import pathlib
import threading
from typing import Any

import pytest

from controller_svc.analytics import schema, synthetic

pytestmark = pytest.mark.pipeline

# Per-run figures that differ between two runs of the same analysis.
RUN_KEYS = ("elapsed_s", "timings_s", "step_spans_s", "tables", "report")


def _analyze(spark: Any, logs: pathlib.Path, out: pathlib.Path, concurrent: str | None = None) -> Any:
    from controller_svc.analytics import job

    if concurrent is not None:
        spark.conf.set(job.CONCURRENT_CONF, concurrent)
    try:
        return job.analyze(spark, [str(logs)], str(out))
    finally:
        spark.conf.unset(job.CONCURRENT_CONF)


def _sorted_rows(spark: Any, path: pathlib.Path) -> list[str]:
    return sorted(repr(sorted(row.asDict(recursive=True).items())) for row in spark.read.parquet(str(path)).collect())


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, Any]:
    base = tmp_path_factory.mktemp("branches")
    inject = {name: 2 for name in schema.INVARIANTS}
    expected = synthetic.generate(base / "logs", 20_000, brokers=5, partitions=200, seed=11, inject=inject)
    return base / "logs", expected


def test_concurrent_branches_run_at_once_and_write_what_one_after_another_writes(
    spark: Any, tmp_path: pathlib.Path, history: tuple[pathlib.Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from controller_svc.analytics import invariant_files, job, request_files

    logs, expected = history
    sequential = _analyze(spark, logs, tmp_path / "sequential", concurrent="false")

    # Two branches that can only finish if both are running at the same time: the latency
    # branch and the invariants' branch each wait at a barrier, while reading the events
    # table's files.
    meet = threading.Barrier(2, timeout=60)
    threads: dict[str, str] = {}
    pools: dict[str, str] = {}

    def waiting(name: str, build: Any) -> Any:
        def wrapped(*args: Any) -> Any:
            threads[name] = threading.current_thread().name
            # Each branch's jobs go to a scheduler pool of its own (FAIR between pools).
            pools[name] = spark.sparkContext.getLocalProperty(job.SCHEDULER_POOL)
            meet.wait()
            return build(*args)

        return wrapped

    monkeypatch.setattr(request_files, "latency", waiting("latency", request_files.latency))
    monkeypatch.setattr(invariant_files, "all_violations", waiting("violations", invariant_files.all_violations))
    concurrent = _analyze(spark, logs, tmp_path / "concurrent")
    assert threads["latency"] != threads["violations"]
    assert all(name.startswith("analyze") for name in threads.values())
    assert pools == {"latency": "request_latency", "violations": "violations"}
    assert spark.sparkContext.getConf().get("spark.scheduler.mode") == "FAIR"

    assert concurrent.summary["violations"] == expected.violations
    assert concurrent.summary["availability"]["offline_intervals"] == expected.offline_intervals
    assert {k: v for k, v in concurrent.summary.items() if k not in RUN_KEYS} == {
        k: v for k, v in sequential.summary.items() if k not in RUN_KEYS
    }
    for name in job.TABLES:
        assert _sorted_rows(spark, tmp_path / "concurrent" / name) == _sorted_rows(
            spark, tmp_path / "sequential" / name
        ), name
    assert not (tmp_path / "concurrent" / "_violations_unresolved").exists()
    # Every step is timed, with its span from the job's start.
    steps = concurrent.summary["timings_s"]
    spans = concurrent.summary["step_spans_s"]
    assert set(steps) == set(spans) >= {"ingest", "leadership", "offline_intervals", "violations", "report"}
    for name, (start, end) in spans.items():
        assert 0 <= start <= end <= concurrent.summary["elapsed_s"], name
    # One after another, each step starts after the one before it ended.
    ordered = sorted(sequential.summary["step_spans_s"].values())
    assert all(earlier[1] <= later[0] for earlier, later in itertools.pairwise(ordered))


def test_a_failed_branch_is_raised_after_the_others_finished(
    spark: Any,
    tmp_path: pathlib.Path,
    history: tuple[pathlib.Path, Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from controller_svc.analytics import job, timelines

    logs, _ = history
    started = threading.Event()
    # Spark's queries, not the files' (whose failures fall back to them).
    monkeypatch.setattr(job, "_requests_from_files", lambda *args: None)

    def broken(events: Any) -> Any:
        started.set()
        raise RuntimeError("request latency could not be computed")

    monkeypatch.setattr(timelines, "request_latency", broken)
    caplog.set_level(logging.ERROR, logger="analytics")
    with pytest.raises(RuntimeError, match="request latency could not be computed"):
        _analyze(spark, logs, tmp_path / "out")
    assert started.is_set()
    assert "analysis branch request_latency failed" in caplog.text
    # The other branches ran to their end before the failure was raised.
    for name in ("leadership", "offline_intervals", "failover_incidents", "violations"):
        assert (tmp_path / "out" / name / "_SUCCESS").exists(), name
    assert not (tmp_path / "out" / "summary.json").exists()


def test_run_branches_returns_results_by_name_and_raises_the_first_failure(spark: Any) -> None:
    from controller_svc.analytics import job

    assert job.run_branches(spark, {"a": lambda: 1, "b": lambda: 2}) == {"a": 1, "b": 2}
    assert job.run_branches(spark, {"a": lambda: 1, "b": lambda: 2}, concurrent=False) == {"a": 1, "b": 2}
    finished: list[str] = []

    def fails(message: str) -> Any:
        def run() -> None:
            raise ValueError(message)

        return run

    with pytest.raises(ValueError, match="first"):
        job.run_branches(spark, {"x": fails("first"), "y": lambda: finished.append("y"), "z": fails("second")})
    assert finished == ["y"]


def test_the_concurrency_setting_must_be_true_or_false(
    spark: Any, tmp_path: pathlib.Path, history: tuple[pathlib.Path, Any]
) -> None:
    from controller_svc.analytics import ingest

    logs, _ = history
    with pytest.raises(ingest.InputError, match="must be true or false"):
        _analyze(spark, logs, tmp_path / "out", concurrent="sometimes")


def test_the_events_plan_is_built_only_for_spark_s_queries_and_once(
    spark: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The events frame and the signs of life (job.Once) are Spark plans that only the Spark
    queries' paths read: an analysis of a clean history from the local files builds neither;
    with the timelines left to Spark, every branch reads the same one frame, built once."""
    from controller_svc.analytics import ingest, job

    logs = tmp_path / "logs"
    synthetic.generate(logs, 5_000, brokers=3, partitions=50, seed=3)
    built: dict[str, int] = {"events": 0, "signs_of_life": 0}

    def counted(name: str, build: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            built[name] += 1
            return build(*args, **kwargs)

        return wrapper

    for name in built:
        monkeypatch.setattr(ingest, name, counted(name, getattr(ingest, name)))
    from_files = _analyze(spark, logs, tmp_path / "from-files")
    assert from_files.exit_code == 0
    assert from_files.summary["violations"] == {name: 0 for name in schema.INVARIANTS}
    assert built == {"events": 0, "signs_of_life": 0}
    spark.conf.set(job.SCAN_TIMELINES_CONF, "false")
    try:
        by_spark = _analyze(spark, logs, tmp_path / "by-spark", concurrent="true")
    finally:
        spark.conf.unset(job.SCAN_TIMELINES_CONF)
    assert built == {"events": 1, "signs_of_life": 1}
    figures = {key: value for key, value in from_files.summary.items() if key not in RUN_KEYS}
    assert {key: value for key, value in by_spark.summary.items() if key not in RUN_KEYS} == figures
