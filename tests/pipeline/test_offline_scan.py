"""The offline intervals' scan (offline_scan.py) gives what Spark's windows give
(timelines._intervals_by_window): on random timelines built to hit every rule (generations,
null epochs, regains at or below a loss's epoch, losses in one millisecond, open intervals), and
in the whole job, which uses it by default (with record_search's tasks for the last signs of
life) and falls back to the windows when its tasks fail."""

from __future__ import annotations

import json
import logging
import pathlib
import random
from typing import Any

import pytest

from controller_svc.analytics import synthetic
from tests.pipeline import runs, scenarios

pytestmark = pytest.mark.pipeline

TIMELINE_DDL = (
    "cluster string, topic string, partition bigint, "
    "pos struct<ts: bigint, file_id: int, block: bigint, mid: bigint>, ts bigint, epoch bigint, cause string, "
    "change string, new_leader bigint, alive_ts bigint, regain_last int"
)
CAUSES = ("broker_bounced", "broker_deregistered", "leader_log_dir_failed", "leader_set_to_none")
RUN_FIELDS = ("timings_s", "step_spans_s", "elapsed_s", "tables", "report")


def _random_timelines(seed: int, partitions: int) -> list[tuple[Any, ...]]:
    """Rows as offline_intervals builds them, for `partitions` partitions (the same numbers, some
    negative, under two topics and two clusters, so that a share holds several keys per number). Times and
    epochs collide; each row has its own line (mid), so no two rows tie on the whole order."""
    rng = random.Random(seed)
    rows: list[tuple[Any, ...]] = []
    mid = 0
    for index in range(partitions):
        # Negative numbers too, down to the least bigint: each must fall to exactly one share.
        key = (rng.choice(["a", "b"]), rng.choice(["t1", "t2"]), (index % 9) - 4 if index % 13 else -(2**63))
        for _ in range(rng.randint(1, 14)):
            change = rng.choices(["lost", "regained", "deleted"], weights=[5, 6, 1])[0]
            ts = rng.randint(1, 30)
            mid += 1
            position = (ts, rng.randint(0, 2), rng.choice([0, 100]), mid)
            epoch = None if change == "deleted" or rng.random() < 0.08 else rng.randint(0, 6)
            if change == "lost":
                cause = rng.choice(CAUSES)
                alive = ts - rng.randint(0, 5) if cause.startswith("broker") and rng.random() < 0.7 else None
                rows.append((*key, position, ts, epoch, cause, change, None, alive, 0))
            elif change == "regained":
                rows.append((*key, position, ts, epoch, None, change, rng.randint(1, 4), None, 1))
            else:
                rows.append((*key, position, ts, None, None, change, None, None, 0))
    return rows


def _sorted_rows(frame: Any) -> list[dict[str, Any]]:
    rows = [row.asDict(recursive=True) for row in frame.collect()]
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True))


def test_the_scan_gives_what_the_windows_give(spark: Any, tmp_path: pathlib.Path) -> None:
    """Many random timelines at once, through both: the same rows, every column."""
    from controller_svc.analytics import offline_scan, timelines

    rows = [row for seed in range(30) for row in _random_timelines(seed, 40)]
    frame = spark.createDataFrame(rows, TIMELINE_DDL)
    by_window = _sorted_rows(timelines._intervals_by_window(frame))
    scanned = offline_scan.intervals(frame, str(tmp_path / "scan"))
    assert scanned.schema == timelines._intervals_by_window(frame).schema
    by_scan = _sorted_rows(scanned)
    assert by_scan == by_window
    # The rules were all met: closed and open intervals, ends by a deletion, null epochs.
    assert len(by_scan) > 500
    assert {row["end_cause"] for row in by_scan} == {"leader_applied", "topic_deleted", None}
    assert any(row["lost_leader_epoch"] is None for row in by_scan)
    assert any(row["start_ts"] < row["detected_ts"] for row in by_scan)
    # Each partition number's rows went to one share (local[2]: two), every share wrote a file.
    assert len(list((tmp_path / "scan" / offline_scan.INTERVALS_DIR).glob("part-*.parquet"))) == 2
    # With three shares (an odd count: the least bigint's remainder is not 0), the same rows.
    three = tmp_path / "three"
    three.mkdir()
    rows_dir = str(tmp_path / "scan" / offline_scan.ROWS_DIR)
    assert sum(offline_scan.scan_share(rows_dir, str(three), share, 3) for share in range(3)) == len(by_window)
    assert _sorted_rows(spark.read.schema(offline_scan.OUTPUT_DDL).parquet(str(three))) == by_window


def test_a_share_without_intervals_writes_an_empty_file(spark: Any, tmp_path: pathlib.Path) -> None:
    """Only regains (nothing lost): no interval, and Spark still reads the empty result."""
    from controller_svc.analytics import offline_scan

    rows = [("a", "t", 1, (5, 0, 0, 1), 5, 1, None, "regained", 2, None, 1)]
    found = offline_scan.intervals(spark.createDataFrame(rows, TIMELINE_DDL), str(tmp_path / "scan"))
    assert found.count() == 0


def _history(outcome: Any) -> dict[str, Any]:
    return {name: value for name, value in outcome.summary.items() if name not in RUN_FIELDS}


def test_the_job_scans_its_timelines(spark: Any, tmp_path: pathlib.Path) -> None:
    """A generated history analysed with the scan and with the windows: the same summary,
    offline intervals and failover incidents. The scan ran (and its intervals are the ones
    written: with its result emptied, the job finds none), so did record_search's tasks for the
    lost brokers' last signs of life, and their working directories are gone afterwards. (The
    job reads the offline intervals from the events table's files first, offline_files.py; the
    scan is what it falls back to, made to here.)"""
    from controller_svc.analytics import job, offline_scan, record_search

    logs = tmp_path / "logs"
    synthetic.generate(logs, 30_000, brokers=5, partitions=200, seed=5)
    real = offline_scan.intervals
    real_search = record_search.answers
    calls: list[str] = []
    leaders_dirs: list[str] = []
    searches: list[str] = []

    def recording(rows: Any, work_dir: str, broker_losses: Any = None) -> Any:
        calls.append(work_dir)
        # The tasks found the broker losses, from leadership_scan's own files.
        assert broker_losses is not None and broker_losses.leaders_dir is not None
        leaders_dirs.append(broker_losses.leaders_dir)
        return real(rows, work_dir, broker_losses)

    def recording_search(*args: Any) -> Any:
        searches.append(f"{args[4]} {pathlib.Path(args[5]).name}")
        return real_search(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(job, "_offline_files", lambda *args: False)
        patch.setattr(offline_scan, "intervals", recording)
        patch.setattr(record_search, "answers", recording_search)
        scanned = runs.analyze(spark, logs, tmp_path / "scan", {job.SCAN_TIMELINES_CONF: True})
        assert calls == [str((tmp_path / "scan" / job.SCANS_DIR / "offline_intervals").resolve())]
        assert leaders_dirs == [str((tmp_path / "scan" / job.SCANS_DIR / "leadership" / "timeline").resolve())]
        # The lost controllers' last signs of life are found in the driver (controller_tables.py).
        assert searches == ["alive_ts offline_last_alive"]
        by_window = runs.analyze(spark, logs, tmp_path / "window", {job.SCAN_TIMELINES_CONF: False})
        assert len(calls) == 1 and len(searches) == 1
    assert scanned.summary["availability"]["offline_intervals"] > 0
    assert _history(scanned) == _history(by_window)
    for table in ("offline_intervals", "failover_incidents"):
        assert _sorted_rows(spark.read.parquet(str(tmp_path / "scan" / table))) == _sorted_rows(
            spark.read.parquet(str(tmp_path / "window" / table))
        )
    # Signs of life were found (by the tasks for brokers, in the driver for controllers): faults
    # before their detection.
    assert scanned.summary["availability"]["offline_detection_ms"] > 0
    assert scanned.summary["availability"]["failover_detection_ms"] > 0
    assert not (tmp_path / "scan" / job.SCANS_DIR).exists()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(job, "_offline_files", lambda *args: False)
        patch.setattr(offline_scan, "intervals", lambda rows, work_dir, *more: real(rows, work_dir, *more).limit(0))
        emptied = runs.analyze(spark, logs, tmp_path / "emptied", {job.SCAN_TIMELINES_CONF: True})
    assert emptied.summary["availability"]["offline_intervals"] == 0


@pytest.mark.parametrize("scenario", ["edge_cases", "overlapping_losses", "clean_failover", "log_dir_failure"])
def test_the_tasks_find_the_broker_losses_and_deletions_and_fall_back_to_spark(
    spark: Any, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture, scenario: str
) -> None:
    """The tasks add the leaders' broker losses and the deletions themselves (here from the
    leaderships Spark wrote for them): the intervals Spark's joins and windows give, on the
    hand-made histories (a deletion ending an interval and a recreated topic, a bounce, a loss
    and a regain in one millisecond, two losses in one interval, a leader's failed log dir). A task that fails (here:
    raises) is logged, and Spark gives the same intervals."""
    from controller_svc.analytics import ingest, offline_scan, timelines
    from controller_svc.analytics.job import SINGLE_CLUSTER

    getattr(scenarios, scenario)(tmp_path / "logs")
    ingest.ingest(spark, [str(tmp_path / "logs")], str(tmp_path / "out"))
    events = ingest.events(spark, str(tmp_path / "out"), SINGLE_CLUSTER)
    leaders = timelines.leadership(events)

    def offline(scan_dir: pathlib.Path | None) -> list[dict[str, Any]]:
        held = timelines.HeldFrames()
        found = timelines.offline_intervals(events, leaders, held, scan_dir=None if scan_dir is None else str(scan_dir))
        rows = _sorted_rows(found)
        held.release()
        assert scan_dir is None or not scan_dir.exists()
        return rows

    by_spark = offline(None)
    assert by_spark  # every scenario has intervals
    if scenario == "edge_cases":
        assert {row["end_cause"] for row in by_spark} == {"leader_applied", "topic_deleted"}
        assert {row["cause"] for row in by_spark} >= {"broker_deregistered", "broker_bounced"}
    if scenario == "log_dir_failure":
        assert [(r["partition"], r["start_ts"], r["end_ts"], r["cause"], r["new_leader"]) for r in by_spark] == [
            (0, 2000, 2012, "leader_log_dir_failed", 2)
        ]
    caplog.set_level(logging.WARNING, logger="analytics")
    assert offline(tmp_path / "scan") == by_spark
    assert "scan failed" not in caplog.text
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(offline_scan, "_scan_with_losses_task", lambda args: 1 // 0)
        assert offline(tmp_path / "failed") == by_spark
    assert "the offline intervals' scan failed" in caplog.text


def test_the_scan_setting_must_be_true_or_false(spark: Any, tmp_path: pathlib.Path) -> None:
    from controller_svc.analytics import ingest, job

    logs = tmp_path / "logs"
    synthetic.generate(logs, 2_000, brokers=3, partitions=10, seed=1)
    spark.conf.set(job.SCAN_TIMELINES_CONF, "sometimes")
    try:
        with pytest.raises(ingest.InputError, match="must be true or false"):
            job.analyze(spark, [str(logs)], str(tmp_path / "out"))
    finally:
        spark.conf.unset(job.SCAN_TIMELINES_CONF)
