"""The offline intervals computed from the events table's files (offline_files.py) are Spark's
(timelines.offline_intervals with its joins and windows), row for row and column for column: on
the hand-made histories, on random timelines built to hit every rule (losses by a broker's
death, bounce, failed log dir and the controller's leader -1; regains at, below and above the
losses' epochs, by the leader's own broker or another node; deletions and recreated topics;
registrations before and after a loss; brokers with and without node.alive, and names Spark
reads no id from) in two clusters, and in the whole job, which uses them by default and falls
back to Spark's queries when they fail."""

from __future__ import annotations

import json
import logging
import pathlib
from typing import Any

import pytest

from tests.pipeline import random_partitions, runs, scenarios

pytestmark = pytest.mark.pipeline

RUN_FIELDS = ("timings_s", "step_spans_s", "elapsed_s", "tables", "report")


def _sorted_rows(frame: Any) -> list[dict[str, Any]]:
    rows = [row.asDict(recursive=True) for row in frame.collect()]
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True))


def _both(spark: Any, logs: pathlib.Path, out: pathlib.Path, by_directory: bool) -> dict[str, Any]:
    """Spark's offline intervals and offline_files', sorted rows, for the history in `logs`."""
    from controller_svc.analytics import events_files, ingest, leadership_scan, offline_files, timelines
    from controller_svc.analytics.ingest import ClusterBy

    cluster_by = ClusterBy("dir" if by_directory else "none")
    ingest.ingest(spark, [str(logs)], str(out))
    events = ingest.events(spark, str(out), cluster_by)
    held = timelines.HeldFrames()
    leaders = leadership_scan.leadership(
        timelines.leader_changes(events), str(out / "leadership_work"), str(out / "leadership")
    )
    by_spark = timelines.offline_intervals(events, leaders, held)
    spark_rows = _sorted_rows(by_spark)
    liveness = [(row["cluster"], row["node"]) for row in timelines.writers_of_liveness(events).collect()]
    files = events_files.events_files(str(out), cluster_by, ingest.file_rows(spark, str(out)))
    leaders_dir = str(out / "leadership_work" / leadership_scan.TIMELINE_DIR)
    written = offline_files.write(spark, files, liveness, leaders_dir, str(out / "work"), str(out / "t"))
    held.release()
    read = spark.read.parquet(str(out / "t"))
    # The same columns, named and typed as Spark's, in the same order.
    assert [(f.name, f.dataType.simpleString()) for f in read.schema] == [
        (f.name, f.dataType.simpleString()) for f in by_spark.schema
    ]
    files_rows = _sorted_rows(read)
    assert written == len(files_rows)
    assert (out / "t" / offline_files.SUCCESS_MARKER).exists()
    return {"spark": spark_rows, "files": files_rows}


@pytest.mark.parametrize("scenario", ["edge_cases", "overlapping_losses", "clean_failover", "log_dir_failure"])
def test_the_files_give_sparks_intervals_for_the_hand_made_histories(
    spark: Any, tmp_path: pathlib.Path, scenario: str
) -> None:
    getattr(scenarios, scenario)(tmp_path / "logs")
    tables = _both(spark, tmp_path / "logs", tmp_path / "out", by_directory=False)
    assert tables["files"] == tables["spark"]
    if scenario == "overlapping_losses":
        # The hand-worked answer (scenarios.overlapping_losses).
        assert sorted(
            (row["partition"], row["start_ts"], row["end_ts"], row["detected_ts"]) for row in tables["files"]
        ) == [
            (0, 2400, 9005, 3000),
            (1, 2900, None, 3000),
            (2, 2900, 3004, 3000),
        ]


def test_the_files_give_sparks_intervals_for_random_timelines(spark: Any, tmp_path: pathlib.Path) -> None:
    """Three random histories of two clusters each; the third read by Spark's JSON reader (its
    events files hold every column, the fast path's only their kind's)."""
    from controller_svc.analytics import ingest

    intervals: list[dict[str, Any]] = []
    for seed in (1, 2, 3):
        random_partitions.history(tmp_path / f"logs-{seed}", seed)
        spark.conf.set(ingest.FAST_PATH_CONF, "false" if seed == 3 else "true")
        try:
            tables = _both(spark, tmp_path / f"logs-{seed}", tmp_path / f"out-{seed}", by_directory=True)
        finally:
            spark.conf.unset(ingest.FAST_PATH_CONF)
        assert tables["files"] == tables["spark"], seed
        intervals += tables["spark"]
    # Two clusters, named by their directories, and every rule was met somewhere.
    assert {row["cluster"].rsplit("/", 1)[-1] for row in intervals} == {"east", "west"}
    assert {row["cause"] for row in intervals} == {
        "broker_deregistered",
        "broker_bounced",
        "leader_log_dir_failed",
        "leader_set_to_none",
    }
    assert {row["end_cause"] for row in intervals} == {"leader_applied", "topic_deleted", None}
    # A last sign of life before the loss was seen, and losses without one.
    assert any(row["detection_ms"] is not None and row["detection_ms"] > 0 for row in intervals)
    assert any(row["detection_ms"] == 0 for row in intervals)


def test_the_job_writes_the_offline_intervals_from_the_files_and_falls_back_to_spark(
    spark: Any, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The job with its scans on writes the table from the files: no offline_scan rows written
    by Spark, no search for the lost brokers' last signs of life, the same table and summary as
    Spark's queries give (scans off). When that fails, it is logged and Spark writes them."""
    from controller_svc.analytics import job, offline_files, offline_scan, record_search

    random_partitions.history(tmp_path / "logs", 4)
    real_write = offline_files.write
    written: list[str] = []
    spark_paths: list[str] = []

    def recording(*args: Any) -> Any:
        # (spark, files, liveness, leaders_dir, work_dir, table_dir, node_times_dir)
        written.extend(pathlib.Path(path).name for path in args[5:])
        return real_write(*args)

    caplog.set_level(logging.WARNING, logger="analytics")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(offline_files, "write", recording)
        patch.setattr(offline_scan, "intervals", lambda *args: spark_paths.append("scan") or 1 // 0)
        patch.setattr(record_search, "answers", lambda *args: spark_paths.append(str(args[5])) or 1 // 0)
        from_files = runs.analyze(spark, tmp_path / "logs", tmp_path / "files", {job.SCAN_TIMELINES_CONF: True})
    # Every file was read by the fast path: the lost brokers' signs of life from its node times.
    assert written == ["offline_intervals", "_node_times"] and spark_paths == []
    assert "could not be computed from the files" not in caplog.text
    assert not (tmp_path / "files" / job.SCANS_DIR).exists()
    by_spark = runs.analyze(spark, tmp_path / "logs", tmp_path / "spark", {job.SCAN_TIMELINES_CONF: False})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(offline_files, "_task", lambda args: 1 // 0)
        fell_back = runs.analyze(spark, tmp_path / "logs", tmp_path / "fell_back", {job.SCAN_TIMELINES_CONF: True})
    assert "could not be computed from the files" in caplog.text

    def history(outcome: Any) -> dict[str, Any]:
        return {k: v for k, v in outcome.summary.items() if k not in RUN_FIELDS}

    assert history(from_files) == history(by_spark) == history(fell_back)
    assert from_files.summary["availability"]["offline_intervals"] > 0
    assert "offline_intervals" in from_files.summary["timings_s"]
    expected = _sorted_rows(spark.read.parquet(str(tmp_path / "spark" / "offline_intervals")))
    assert expected
    for run in ("files", "fell_back"):
        assert _sorted_rows(spark.read.parquet(str(tmp_path / run / "offline_intervals"))) == expected


def _role_changes(directory: pathlib.Path, name: str, rows: list[dict[str, Any]], with_reason: bool = True) -> None:
    """A Parquet file of role changes as the fast path writes its kind's records (without the
    `reason` column when `with_reason` is false, as a file whose records have none)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns: dict[str, Any] = {
        "topic": pa.string(),
        "partition": pa.int64(),
        "ts": pa.int64(),
        "leader_epoch": pa.int64(),
        "leader": pa.int64(),
        "node": pa.string(),
        "role": pa.string(),
        "file_id": pa.int32(),
        "block": pa.int64(),
        "mid": pa.int64(),
    }
    if with_reason:
        columns["reason"] = pa.string()
    directory.mkdir(parents=True, exist_ok=True)
    table = pa.table({key: pa.array([row.get(key) for row in rows], kind) for key, kind in columns.items()})
    pq.write_table(table, directory / name)


def test_the_own_rows_are_the_leaders_own_role_changes_of_the_share(tmp_path: pathlib.Path) -> None:
    """own_rows keeps, of every broker role change, those its broker recorded as its partition's
    leader (applied, or stopped by a failed log dir), of the partitions whose number falls to
    the share (a null number counts as 0): checked against the rule written out in Python on
    rows that hit each case, two files with their own dictionaries, one without `reason`."""
    from controller_svc.analytics import events_files, offline_files, offline_scan

    kinds = tmp_path / "events" / events_files.USABLE_DIR / "kind_group=partition.role_changed"
    least = -(2**63)
    cases = [
        # (node, role, reason, leader, partition)
        ("broker-1", "leader", None, 1, 0),  # own leadership
        ("broker-1", "leader", None, 2, 3),  # another broker's leadership, recorded by 1
        ("broker-2", "follower", None, 2, 6),  # a follower role, even of its own leader
        ("broker-2", "stopped", "log_dir_failure", 2, 9),  # own, lost by a failed log dir
        ("broker-2", "stopped", "deleted", 2, 12),  # stopped for another reason
        ("broker-3", "leader", None, None, 15),  # no leader
        ("broker-0", "leader", None, None, 30),  # no leader, by broker 0
        ("broker-3", "leader", None, 3, None),  # no partition number: share 0
        ("broker-3", "leader", None, 3, -3),  # negative numbers' share is their floor remainder
        ("broker-3", "leader", None, 3, -4),
        ("broker-3", "leader", None, 3, least),
        ("broker-x", "leader", None, 0, 18),  # a name Spark reads no id from
        ("broker-007", "leader", None, 7, 21),  # an id with leading zeros
        ("broker-4", None, None, 4, 24),  # no role
    ]

    def row(index: int, case: tuple[Any, ...]) -> dict[str, Any]:
        node, role, reason, leader, partition = case
        return {
            "topic": f"t{index % 3}",
            "partition": partition,
            "ts": 1000 + index,
            "leader_epoch": index,
            "leader": leader,
            "node": node,
            "role": role,
            "reason": reason,
            "file_id": index % 2,
            "block": 0,
            "mid": index,
        }

    rows = [row(index, case) for index, case in enumerate(cases)]
    _role_changes(kinds, "part-0.parquet", rows[:7])
    # The second file holds no log-dir failure: without a reason column, its records have none.
    _role_changes(kinds, "part-1.parquet", [dict(r, reason=None) for r in rows[7:]], with_reason=False)
    files = events_files.EventsFiles(str(tmp_path / "events"), None)

    def recorder(node: str) -> int | None:
        return events_files.node_id(node) if events_files.has_role(node, "broker") else None

    for shares in (1, 2, 3):
        for share in range(shares):
            expected = sorted(
                (r["mid"], r["role"] == "leader")
                for r in rows
                if r["leader"] is not None
                and recorder(r["node"]) == r["leader"]
                and (r["role"] == "leader" or (r["role"], r["reason"]) == ("stopped", "log_dir_failure"))
                and (r["partition"] or 0) % shares == share
            )
            found = offline_files.own_rows(files, share, shares).to_pylist()
            assert sorted((r["mid"], r["change_code"] == offline_scan.REGAINED) for r in found) == expected, (
                share,
                shares,
            )
            assert all(
                r["topic"] == f"t{r['mid'] % 3}" and r["cause"] in (None, "leader_log_dir_failed") for r in found
            )
    # Every case the rule keeps was met: leaderships of both signs' partitions, a log-dir loss.
    every = offline_files.own_rows(files, 0, 1).to_pylist()
    assert sorted(r["mid"] for r in every) == [0, 3, 7, 8, 9, 10, 12]
    assert [r["cause"] for r in every if r["mid"] == 3] == ["leader_log_dir_failed"]


@pytest.mark.parametrize(
    "clusters", [None, {0: "east", 1: "west", 2: None, 4: "east", 7: "north"}, {}], ids=["one", "by_dir", "none"]
)
def test_cluster_codes_name_the_clusters_read_gives(clusters: dict[int, str | None] | None) -> None:
    """EventsFiles.cluster_codes (the lost brokers' records read without a cluster column) names
    each row's cluster as the `cluster` column of EventsFiles.read does: for files of a known
    cluster, of none, unknown ids and rows without a file id."""
    import pyarrow as pa

    from controller_svc.analytics import events_files

    files = events_files.EventsFiles("/nonexistent", clusters)
    file_ids = pa.chunked_array([[0, 1, None, 2], [3, 4, 7, 8, -1], []], pa.int32())
    codes, names = files.cluster_codes(file_ids)
    expected = files._clusters_of(file_ids).to_pylist()
    assert [None if code < 0 else names[code] for code in codes.tolist()] == expected
    assert len(set(names)) == len(names)
    if clusters:
        assert expected == ["east", "west", None, None, None, "east", "north", None, None]


def test_dictionary_codes_are_one_numbering_over_the_chunks() -> None:
    """offline_files._dictionary_codes: chunks each with a dictionary of its own (one per file
    read), nulls as -1, one code per distinct value."""
    import pyarrow as pa

    from controller_svc.analytics import offline_files

    def chunk(values: list[str | None]) -> Any:
        return pa.array(values, pa.string()).dictionary_encode()

    column = pa.chunked_array(
        [chunk(["b-2", "b-1", "b-2"]), chunk([None, "b-3", "b-1"]), chunk([]), chunk(["b-3", None])]
    )
    codes, names = offline_files._dictionary_codes(column)
    assert [None if code < 0 else names[code] for code in codes.tolist()] == [
        "b-2",
        "b-1",
        "b-2",
        None,
        "b-3",
        "b-1",
        "b-3",
        None,
    ]
    assert sorted(names) == ["b-1", "b-2", "b-3"]


def test_the_lost_brokers_signs_of_life_from_the_node_times_are_the_records(spark: Any, tmp_path: pathlib.Path) -> None:
    """The lost brokers' losses and last signs of life (broker_losses) found from the fast path's
    node times (each chunk's distinct record times per node) are those found from every record
    of the events table, in two clusters; and with node times the events table's records are
    not read for them."""
    from controller_svc.analytics import events_files, ingest, offline_files, timelines
    from controller_svc.analytics.ingest import ClusterBy

    cluster_by = ClusterBy("dir")
    found_alive = 0
    read_kinds: list[str | None] = []
    real_read = events_files.EventsFiles.read

    def recording(self: Any, kind: str | None, *args: Any, **kwargs: Any) -> Any:
        read_kinds.append(kind)
        return real_read(self, kind, *args, **kwargs)

    for seed in (1, 2):
        logs, out = tmp_path / f"logs-{seed}", tmp_path / f"out-{seed}"
        random_partitions.history(logs, seed)
        records = ingest.ingest(spark, [str(logs)], str(out))
        assert records.nodes is not None and not records.nodes.other_files
        events = ingest.events(spark, str(out), cluster_by)
        liveness = [(row["cluster"], row["node"]) for row in timelines.writers_of_liveness(events).collect()]
        files = events_files.events_files(str(out), cluster_by, ingest.file_rows(spark, str(out)))
        from_records = offline_files.broker_losses(files, liveness)
        read_kinds.clear()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(events_files.EventsFiles, "read", recording)
            from_times = offline_files.broker_losses(files, liveness, records.nodes.times_dir)
        assert None not in read_kinds and "broker.change" in read_kinds
        assert from_times.equals(from_records), seed
        found_alive += from_times.num_rows - from_times["alive_ts"].null_count
    # Losses with a last sign of life were found, in both clusters' histories.
    assert found_alive > 0
