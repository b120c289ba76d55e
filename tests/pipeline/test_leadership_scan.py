"""The leadership timeline's scan (leadership_scan.py) gives what Spark's window gives
(timelines.leadership_by_window): on random changes built to collide (times, epochs, null
epochs and positions, negative partition numbers, one number under several topics and
clusters), and in the whole job, which uses it by default and falls back to the window when its
tasks fail."""

from __future__ import annotations

import json
import logging
import pathlib
import random
from typing import Any

import pytest

from controller_svc.analytics import synthetic
from tests.pipeline import random_partitions, runs, scenarios

pytestmark = pytest.mark.pipeline

CHANGES_DDL = (
    "cluster string, topic string, partition bigint, ts bigint, file_id int, block bigint, mid bigint, "
    "controller_epoch bigint, leader bigint, leader_epoch bigint, isr array<bigint>, prev_isr array<bigint>, "
    "strategy string, unclean boolean, change string"
)


def _random_changes(seed: int, partitions: int) -> list[tuple[Any, ...]]:
    """Changes as leader_changes gives them. Every row has its own line (mid), so no two rows
    tie on the whole order and the window's result is one."""
    rng = random.Random(seed)
    rows: list[tuple[Any, ...]] = []
    for index in range(partitions):
        key = (rng.choice(["a", "b"]), rng.choice(["t1", "t2"]), (index % 7) - 3 if index % 11 else -(2**63))
        for _ in range(rng.randint(1, 9)):
            offline = rng.random() < 0.3
            rows.append(
                (
                    *key,
                    rng.randint(1, 12),
                    None if rng.random() < 0.05 else rng.randint(0, 2),
                    rng.choice([0, 64]),
                    seed * 10_000 + len(rows),
                    rng.randint(1, 3),
                    -1 if offline else rng.randint(0, 4),
                    None if rng.random() < 0.1 else rng.randint(0, 5),
                    [rng.randint(0, 4) for _ in range(rng.randint(0, 3))],
                    None if offline else [rng.randint(0, 4)],
                    None if offline else rng.choice(["offline_partition", "preferred", None]),
                    None if offline else rng.random() < 0.2,
                    "offline" if offline else "elected",
                )
            )
    return rows


def _sorted_rows(frame: Any) -> list[dict[str, Any]]:
    rows = [row.asDict(recursive=True) for row in frame.collect()]
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True))


def test_the_scan_gives_what_the_window_gives(spark: Any, tmp_path: pathlib.Path) -> None:
    """Many random partitions' changes through both: the same table and the same timeline,
    every column, and the table's schema as Spark reads it back."""
    from controller_svc.analytics import leadership_scan, timelines

    frame = spark.createDataFrame([row for seed in range(20) for row in _random_changes(seed, 40)], CHANGES_DDL)
    by_window = timelines.leadership_by_window(frame)
    table_dir = tmp_path / "leadership"
    timeline = leadership_scan.leadership(frame, str(tmp_path / "work"), str(table_dir))
    table = spark.read.parquet(str(table_dir))
    window_table = by_window.drop(*leadership_scan.TABLE_DROPS)
    assert table.schema.simpleString() == window_table.schema.simpleString()
    expected = _sorted_rows(window_table)
    assert _sorted_rows(table) == expected
    columns = ["cluster", "topic", "partition", "leader", "leader_epoch", "from_pos", "until_pos"]
    assert timeline.schema.simpleString() == by_window.select(columns).schema.simpleString()
    assert _sorted_rows(timeline) == _sorted_rows(by_window.select(columns))
    # The rules were met: first and last changes of partitions, null epochs among the changes.
    assert any(row["prev_leader"] is None for row in expected) and any(row["until_ts"] is None for row in expected)
    assert sum(row["leader_epoch"] is None and row["prev_leader"] is not None for row in expected) > 10
    # local[2]: two shares, each wrote its file of the table, and the table is marked written.
    assert len(list(table_dir.glob("part-*.parquet"))) == 2 and (table_dir / "_SUCCESS").exists()
    # With three shares (an odd count: the least bigint's remainder is not 0), the same rows.
    three, three_timeline = tmp_path / "three", tmp_path / "three-timeline"
    three.mkdir()
    three_timeline.mkdir()
    rows_dir = str(tmp_path / "work" / leadership_scan.ROWS_DIR)
    assert sum(leadership_scan.scan_share(rows_dir, str(three_timeline), str(three), s, 3) for s in range(3)) == len(
        expected
    )
    assert _sorted_rows(spark.read.parquet(str(three))) == expected


def test_no_changes_make_an_empty_table(spark: Any, tmp_path: pathlib.Path) -> None:
    """A history without elections: an empty table that Spark reads with the window's schema."""
    from controller_svc.analytics import leadership_scan, timelines

    frame = spark.createDataFrame([], CHANGES_DDL)
    timeline = leadership_scan.leadership(frame, str(tmp_path / "work"), str(tmp_path / "leadership"))
    assert timeline.count() == 0
    table = spark.read.parquet(str(tmp_path / "leadership"))
    assert table.count() == 0
    expected = timelines.leadership_by_window(frame).drop(*leadership_scan.TABLE_DROPS)
    assert table.schema.simpleString() == expected.schema.simpleString()


def _from_files_and_window(spark: Any, logs: pathlib.Path, out: pathlib.Path, by_directory: bool) -> None:
    """The leadership table and timeline from the events table's files (leadership_from_files)
    are the window's (leadership_by_window of leader_changes), for the history in `logs`."""
    from controller_svc.analytics import events_files, ingest, leadership_scan, timelines
    from controller_svc.analytics.ingest import ClusterBy

    cluster_by = ClusterBy("dir" if by_directory else "none")
    ingest.ingest(spark, [str(logs)], str(out))
    events = ingest.events(spark, str(out), cluster_by)
    files = events_files.events_files(str(out), cluster_by, ingest.file_rows(spark, str(out)))
    timeline = leadership_scan.leadership_from_files(spark, files, str(out / "work"), str(out / "leadership"))
    by_window = timelines.leadership_by_window(timelines.leader_changes(events))
    table = spark.read.parquet(str(out / "leadership"))
    expected = by_window.drop(*leadership_scan.TABLE_DROPS)
    assert table.schema.simpleString() == expected.schema.simpleString()
    rows = _sorted_rows(table)
    assert rows and rows == _sorted_rows(expected)
    columns = ["cluster", "topic", "partition", "leader", "leader_epoch", "from_pos", "until_pos"]
    assert _sorted_rows(timeline) == _sorted_rows(by_window.select(*columns))
    assert (out / "leadership" / leadership_scan.SUCCESS_MARKER).exists()


@pytest.mark.parametrize("scenario", ["edge_cases", "overlapping_losses", "violations"])
def test_the_files_give_the_windows_leadership_for_the_hand_made_histories(
    spark: Any, tmp_path: pathlib.Path, scenario: str
) -> None:
    getattr(scenarios, scenario)(tmp_path / "logs")
    _from_files_and_window(spark, tmp_path / "logs", tmp_path / "out", by_directory=False)


def test_the_files_give_the_windows_leadership_for_random_histories(spark: Any, tmp_path: pathlib.Path) -> None:
    """Two random histories of two clusters each (elections of every strategy, clean and
    unclean, leader -1 with and without its leader field, deletions); the second read by
    Spark's JSON reader (its events files hold every column, the fast path's only their kind's)."""
    from controller_svc.analytics import ingest

    for seed in (1, 2):
        random_partitions.history(tmp_path / f"logs-{seed}", seed)
        spark.conf.set(ingest.FAST_PATH_CONF, "false" if seed == 2 else "true")
        try:
            _from_files_and_window(spark, tmp_path / f"logs-{seed}", tmp_path / f"out-{seed}", by_directory=True)
        finally:
            spark.conf.unset(ingest.FAST_PATH_CONF)


def _history(outcome: Any) -> dict[str, Any]:
    return {
        name: value
        for name, value in outcome.summary.items()
        if name not in ("timings_s", "step_spans_s", "elapsed_s", "tables", "report")
    }


def test_the_job_scans_its_leadership(spark: Any, tmp_path: pathlib.Path) -> None:
    """A generated history analysed with the scan and with the window: the same summary, the
    same leadership and offline intervals tables. The table is the scan's (its tasks' files,
    which read the events table's files themselves: Spark writes no rows for them), and the
    working directory is gone afterwards."""
    from controller_svc.analytics import job, leadership_scan

    logs = tmp_path / "logs"
    synthetic.generate(logs, 30_000, brokers=5, partitions=200, seed=7)
    real = leadership_scan.leadership_from_files
    calls: list[tuple[str, str]] = []

    def recording(spark_session: Any, files: Any, work_dir: str, table_dir: str) -> Any:
        calls.append((work_dir, table_dir))
        return real(spark_session, files, work_dir, table_dir)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(leadership_scan, "leadership_from_files", recording)
        patch.setattr(leadership_scan, "leadership", lambda *args: 1 // 0)
        scanned = runs.analyze(spark, logs, tmp_path / "scan", {job.SCAN_TIMELINES_CONF: True})
        assert calls == [
            (str((tmp_path / "scan" / job.SCANS_DIR / "leadership").resolve()), str(tmp_path / "scan" / "leadership"))
        ]
        by_window = runs.analyze(spark, logs, tmp_path / "window", {job.SCAN_TIMELINES_CONF: False})
        assert len(calls) == 1
    assert scanned.summary["availability"]["offline_intervals"] > 0
    assert _history(scanned) == _history(by_window)
    for table in ("leadership", "offline_intervals"):
        scanned_table = spark.read.parquet(str(tmp_path / "scan" / table))
        window_table = spark.read.parquet(str(tmp_path / "window" / table))
        assert scanned_table.schema == window_table.schema
        assert _sorted_rows(scanned_table) == _sorted_rows(window_table)
    assert sorted(p.name for p in (tmp_path / "scan" / "leadership").glob("part-*")) == [
        "part-00000.parquet",
        "part-00001.parquet",
    ]
    assert not (tmp_path / "scan" / job.SCANS_DIR).exists()


def test_failed_scan_tasks_leave_the_leadership_to_the_window(
    spark: Any, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A task that fails (here: raises) is logged. When the tasks reading the events table's
    files fail, the scan of what Spark writes of the changes gives the table; when those fail
    too, the window writes the same table over whatever the tasks wrote. The offline intervals
    are the same each time."""
    from controller_svc.analytics import job, leadership_scan

    logs = tmp_path / "logs"
    synthetic.generate(logs, 5_000, brokers=3, partitions=30, seed=3)
    caplog.set_level(logging.WARNING, logger="analytics")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(leadership_scan, "_files_task", lambda args: 1 // 0)
        scanned = runs.analyze(spark, logs, tmp_path / "scanned", {job.SCAN_TIMELINES_CONF: True})
    assert "the leadership could not be computed from the files" in caplog.text
    assert "leadership's scan failed" not in caplog.text
    assert len(list((tmp_path / "scanned" / "leadership").glob("part-0000?.parquet"))) == 2
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(leadership_scan, "_files_task", lambda args: 1 // 0)
        patch.setattr(leadership_scan, "_scan_task", lambda args: 1 // 0)
        failed = runs.analyze(spark, logs, tmp_path / "failed", {job.SCAN_TIMELINES_CONF: True})
    assert "leadership's scan failed" in caplog.text
    by_window = runs.analyze(spark, logs, tmp_path / "window", {job.SCAN_TIMELINES_CONF: False})
    assert _history(failed) == _history(by_window) == _history(scanned)
    for table in ("leadership", "offline_intervals"):
        expected = _sorted_rows(spark.read.parquet(str(tmp_path / "window" / table)))
        assert _sorted_rows(spark.read.parquet(str(tmp_path / "failed" / table))) == expected
        assert _sorted_rows(spark.read.parquet(str(tmp_path / "scanned" / table))) == expected
    assert not list((tmp_path / "failed" / "leadership").glob("part-0000?.parquet"))
    assert not (tmp_path / "failed" / job.SCANS_DIR).exists()
