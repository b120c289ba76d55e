"""The node figures the ingest's tasks take (node_index.py) give the analysis exactly what
Spark's scans of the events table give, and the records of files Spark's readers read are
added from the table."""

from __future__ import annotations

import json
import pathlib
import random
from typing import Any

import pytest

from controller_svc.analytics import synthetic
from tests.pipeline import runs, scenarios

pytestmark = pytest.mark.pipeline

# The job's figures that describe the run, not the history.
RUN_FIELDS = ("timings_s", "step_spans_s", "elapsed_s", "tables", "report")


def test_a_chunks_node_figures_are_their_definition() -> None:
    """Random chunks (several nodes, colliding times, node.alive from some): totals per node and
    the distinct (node, ts) against a plain-Python count."""
    import pyarrow as pa

    from controller_svc.analytics import node_index

    kinds = ["node.alive", "partition.role_changed", "request.sent"]
    for seed in range(200):
        rng = random.Random(seed)
        rows = [
            {
                "node": rng.choice(["broker-1", "broker-2", "controller-1"][: rng.randint(1, 3)]),
                "ts": rng.randint(1, 12),
                "kind": rng.choice(kinds[rng.randint(0, 2) :]),
            }
            for _ in range(rng.randint(0, 40))
        ]
        table = pa.Table.from_pylist(
            rows, schema=pa.schema([("node", pa.string()), ("ts", pa.int64()), ("kind", pa.string())])
        )
        found = node_index.summarize_chunk(table, 7)
        expected = []
        for node in sorted({row["node"] for row in rows}):
            mine = [row for row in rows if row["node"] == node]
            expected.append(
                node_index.NodeTotal(
                    node,
                    len(mine),
                    min(row["ts"] for row in mine),
                    max(row["ts"] for row in mine),
                    any(row["kind"] == "node.alive" for row in mine),
                )
            )
        assert found.totals == tuple(expected), seed
        times = found.times.to_pylist()
        assert sorted((row["node"], row["ts"], row["file_id"]) for row in times) == sorted(
            {(row["node"], row["ts"], 7) for row in rows}
        ), seed


def _analyze(spark: Any, logs: pathlib.Path, out: pathlib.Path, in_tasks: bool = True) -> Any:
    from controller_svc.analytics import ingest

    return runs.analyze(spark, logs, out, {ingest.NODE_INDEX_IN_TASKS_CONF: in_tasks})


def _history(outcome: Any) -> dict[str, Any]:
    return {name: value for name, value in outcome.summary.items() if name not in RUN_FIELDS}


def _rows(spark: Any, out: pathlib.Path, table: str) -> list[dict[str, Any]]:
    rows = [row.asDict(recursive=True) for row in spark.read.parquet(str(out / table)).collect()]
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True))


def _times_files(out: pathlib.Path) -> list[pathlib.Path]:
    from controller_svc.analytics import arrow_ingest

    return sorted((out / "events" / arrow_ingest.NODE_TIMES_DIR).glob("*.parquet"))


def _shift_node_times(directory: pathlib.Path, by: int) -> None:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for path in sorted(directory.glob("*.parquet")):
        table = pq.read_table(path)
        pq.write_table(table.set_column(1, "ts", pc.add(table["ts"], by)), path)


def test_the_tasks_figures_give_what_sparks_scans_give(spark: Any, tmp_path: pathlib.Path) -> None:
    """A generated history with failovers and broker failures, analysed with the node figures
    from the tasks and from Spark's scans: the same summary, offline intervals and failover
    incidents. Then, to show the analysis reads the tasks' figures: every node time moved 1 ms
    earlier moves the last signs of life with it, and a task total changed changes the summary.
    (The job reads the lost brokers' records from the events table's files first,
    offline_files.py; the node times are for Spark's queries, which it falls back to, made to
    here.)"""
    from controller_svc.analytics import arrow_ingest, ingest, job

    logs = tmp_path / "logs"
    synthetic.generate(logs, 30_000, brokers=5, partitions=200, seed=11)
    in_tasks = _analyze(spark, logs, tmp_path / "tasks")
    by_spark = _analyze(spark, logs, tmp_path / "spark", in_tasks=False)
    assert _history(in_tasks) == _history(by_spark)
    availability = in_tasks.summary["availability"]
    assert availability["offline_intervals"] > 0 and availability["offline_detection_ms"] > 0
    assert availability["failovers"] > 0 and availability["failover_detection_ms"] > 0
    for table in ("offline_intervals", "failover_incidents"):
        assert _rows(spark, tmp_path / "tasks", table) == _rows(spark, tmp_path / "spark", table), table
    assert _times_files(tmp_path / "tasks") and not _times_files(tmp_path / "spark")

    real = ingest.ingest

    def tampered(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        _shift_node_times(pathlib.Path(found.nodes.times_dir), -1)
        first_file, first = found.nodes.totals[0]
        totals = ((first_file, type(first)(**{**first.__dict__, "events": first.events + 1})), *found.nodes.totals[1:])
        return type(found)(found.checks, type(found.nodes)(**{**found.nodes.__dict__, "totals": totals}))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ingest, "ingest", tampered)
        patch.setattr(job, "_offline_files", lambda *args: False)
        moved = _analyze(spark, logs, tmp_path / "moved")
    assert moved.summary["events"] == in_tasks.summary["events"] + 1
    by_detection = {
        (row["topic"], row["partition"], row["detected_ts"]): row
        for row in _rows(spark, tmp_path / "tasks", "offline_intervals")
    }
    shifted = 0
    for row in _rows(spark, tmp_path / "moved", "offline_intervals"):
        before = by_detection[(row["topic"], row["partition"], row["detected_ts"])]
        if before["start_ts"] < before["detected_ts"]:  # started at a lost broker's last sign of life
            assert row["start_ts"] == before["start_ts"] - 1
            shifted += 1
    assert shifted > 0
    # The node times are beside the events table, not in it: its readers never list them.
    listed = ingest.events_table(spark, str(tmp_path / "tasks")).inputFiles()
    assert listed and not any(arrow_ingest.NODE_TIMES_DIR in name for name in listed)


def test_the_records_of_a_file_spark_reads_count_as_well(spark: Any, tmp_path: pathlib.Path) -> None:
    """scenarios.overlapping_losses with broker-2's log turned down by the fast path (one
    malformed line): its records, broker-2's last sign of life at 2400 among them, come from
    Spark's readers, and the analysis still starts p-0's interval there."""
    logs = tmp_path / "logs"
    scenarios.overlapping_losses(logs)
    with (logs / "broker-2.state-change.jsonl").open("a") as log_file:
        log_file.write('{"ts":1001,"node":"broker-2","kind":"broker.shutdown","broker_id":2}\n')
    with runs.ingest_results() as seen:
        in_tasks = _analyze(spark, logs, tmp_path / "tasks")
    by_spark = _analyze(spark, logs, tmp_path / "spark", in_tasks=False)
    (nodes,) = (found.nodes for found in seen)
    # Where broker-2's figures came from: no task took them.
    assert nodes is not None and nodes.other_files
    assert "broker-2" not in {total.node for _file_id, total in nodes.totals}
    assert {"broker-1", "broker-3"} <= {total.node for _file_id, total in nodes.totals}
    assert "broker-2" in in_tasks.summary["clusters"]["default"]["nodes"]
    assert in_tasks.summary["malformed"] == 1
    assert _history(in_tasks) == _history(by_spark)
    intervals = {
        (row["partition"]): (row["start_ts"], row["end_ts"], row["detected_ts"])
        for row in _rows(spark, tmp_path / "tasks", "offline_intervals")
    }
    assert intervals == {0: (2400, 9005, 3000), 1: (2900, None, 3000), 2: (2900, 3004, 3000)}
    assert _rows(spark, tmp_path / "tasks", "offline_intervals") == _rows(
        spark, tmp_path / "spark", "offline_intervals"
    )


@pytest.mark.parametrize("mode", ["none", "dir"])
def test_the_tasks_totals_are_combined_in_python_as_spark_combines_them(
    spark: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """When the tasks wrote every file, the job's per-node totals are combined in the driver
    (ingest.node_total_rows), without a Spark job: the rows Spark's combination of the same
    totals gives (ingest.node_totals), in one cluster and per directory, with each file cut
    into many chunks (a node's totals in several pieces) and two directories holding the same
    node names."""
    from controller_svc.analytics import arrow_ingest, ingest
    from controller_svc.analytics.ingest import ClusterBy

    for directory, seed in (("east", 1), ("west", 2)):
        synthetic.generate(tmp_path / "logs" / directory, 3_000, brokers=3, partitions=20, seed=seed)
    monkeypatch.setattr(arrow_ingest, "CHUNK_BYTES", 16 << 10)
    out = str(tmp_path / "out")
    found = ingest.ingest(spark, [str(tmp_path / "logs")], out)
    nodes = found.nodes
    assert nodes is not None and not nodes.other_files
    assert len(nodes.totals) > 2 * len({total.node for _, total in nodes.totals})  # pieces
    cluster_by = ClusterBy(mode)
    file_rows = ingest.file_rows(spark, out)
    files = spark.createDataFrame(file_rows, ingest.FILES_DDL)
    events = ingest.events(spark, out, cluster_by, files)

    def key(row: Any) -> str:
        return json.dumps(dict(row.asDict() if hasattr(row, "asDict") else row), sort_keys=True)

    in_python = sorted(ingest.node_total_rows(spark, lambda: events, nodes, cluster_by, files, file_rows), key=key)
    by_spark = sorted(ingest.node_totals(spark, events, nodes, cluster_by, files).collect(), key=key)
    assert [key(row) for row in in_python] == [key(row) for row in by_spark]
    assert len({row["cluster"] for row in in_python}) == (2 if mode == "dir" else 1)
    # And Spark's own scan of the table agrees (no tasks' totals at all).
    scanned = sorted(ingest.node_totals(spark, events, None, cluster_by, files).collect(), key=key)
    assert [key(row) for row in in_python] == [key(row) for row in scanned]


def test_the_malformed_count_and_the_files_are_read_without_spark_where_local(
    spark: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ingest.malformed_count and ingest.file_rows read a local table's files with Arrow: what
    Spark's reader gives (without pyarrow, they use it), with malformed lines and without."""
    from controller_svc.analytics import arrow_ingest, ingest

    scenarios.malformed(tmp_path / "bad")
    synthetic.generate(tmp_path / "good", 2_000, brokers=3, partitions=10, seed=3)
    answers = {}
    for name in ("bad", "good"):
        out = str(tmp_path / f"out-{name}")
        ingest.ingest(spark, [str(tmp_path / name)], out)
        answers[name] = (ingest.malformed_count(spark, out), sorted(ingest.file_rows(spark, out)))
    with monkeypatch.context() as patch:
        patch.setattr(arrow_ingest, "available", lambda: False)
        for name in ("bad", "good"):
            out = str(tmp_path / f"out-{name}")
            assert (ingest.malformed_count(spark, out), sorted(ingest.file_rows(spark, out))) == answers[name]
    bad_lines = sum(1 for _line, reason in scenarios.MALFORMED if reason is not None)
    assert answers["bad"][0] == bad_lines > 0 and answers["good"][0] == 0
    assert [file_id for file_id, _ in answers["good"][1]] == list(range(len(answers["good"][1])))
    assert all(file.endswith(".state-change.jsonl") for _, file in answers["good"][1])
