"""The Spark jobs on small histories whose answers are known (DESIGN.md: tests/pipeline)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from controller_svc.analytics import class_archive, schema, synthetic
from tests.pipeline import scenarios

pytestmark = pytest.mark.pipeline


def run(spark: Any, inputs: list[pathlib.Path], out: pathlib.Path, cluster_by: str = "none") -> Any:
    from controller_svc.analytics import job
    from controller_svc.analytics.ingest import ClusterBy

    return job.analyze(spark, [str(p) for p in inputs], str(out), ClusterBy(cluster_by))


def table(spark: Any, out: pathlib.Path, name: str) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in spark.read.parquet(str(out / name)).collect()]


@pytest.fixture(scope="module")
def known(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both hand-written histories as two clusters of one run (--cluster-by dir)."""
    base = tmp_path_factory.mktemp("known")
    scenarios.clean_failover(base / "logs" / "clean")
    cited = scenarios.violations(base / "logs" / "broken")
    scenarios.edge_cases(base / "logs" / "edge")
    scenarios.overlapping_losses(base / "logs" / "losses")
    out = base / "out"
    outcome = run(spark, [base / "logs"], out, cluster_by="dir")
    return {"outcome": outcome, "out": out, "cited": cited, "base": base}


def cluster_name(known: dict[str, Any], name: str) -> str:
    return next(c for c in known["outcome"].summary["clusters"] if c.endswith("/" + name))


def rows_of(spark: Any, known: dict[str, Any], table_name: str, cluster: str) -> list[dict[str, Any]]:
    name = cluster_name(known, cluster)
    return [r for r in table(spark, known["out"], table_name) if r["cluster"] == name]


def test_clean_history_has_no_violations_and_the_broken_one_has_each(known: dict[str, Any]) -> None:
    clusters = known["outcome"].summary["clusters"]
    assert clusters[cluster_name(known, "clean")]["violations"] == {name: 0 for name in schema.INVARIANTS}
    assert clusters[cluster_name(known, "broken")]["violations"] == {
        "single_controller_per_epoch": 2,
        "stale_controller_epoch_applied": 1,
        "leader_epoch_regression": 3,
        "unclean_election_without_permission": 1,
    }
    assert known["outcome"].exit_code == 1
    assert known["outcome"].summary["violations"]["leader_epoch_regression"] == 3


def test_violations_cite_the_offending_records_by_file_and_line(spark: Any, known: dict[str, Any]) -> None:
    violations = rows_of(spark, known, "violations", "broken")
    for invariant, expected in known["cited"].items():
        cited = sorted(
            (pathlib.Path(v["records"][-1]["file"]).name, v["records"][-1]["line"])
            for v in violations
            if v["invariant"] == invariant
        )
        assert cited == sorted(expected), invariant
        for v in violations:
            for record in v["records"]:
                parsed = json.loads(record["record"])  # the record itself, as JSON
                assert parsed["node"] in pathlib.Path(record["file"]).name
    shared = next(v for v in violations if v["detail"].startswith("epoch 1 claimed"))
    assert shared["detail"] == "epoch 1 claimed by controllers 1, 2"
    assert [json.loads(r["record"])["controller_id"] for r in shared["records"]] == [1, 2]
    stale = next(v for v in violations if v["invariant"] == "stale_controller_epoch_applied")
    assert [json.loads(r["record"])["controller_epoch"] for r in stale["records"]] == [3, 2]


def test_offline_intervals_to_the_millisecond(spark: Any, known: dict[str, Any]) -> None:
    intervals = sorted(
        (
            r["topic"],
            r["partition"],
            r["start_ts"],
            r["detected_ts"],
            r["end_ts"],
            r["duration_ms"],
            r["detection_ms"],
            r["cause"],
            r["end_cause"],
        )
        for r in rows_of(spark, known, "offline_intervals", "clean")
    )
    # Each starts at the dead leader's broker's last sign of life, not when the loss was seen.
    assert intervals == [
        ("gone", 0, 11500, 12000, 15000, 3500, 500, "broker_deregistered", "topic_deleted"),
        ("t", 0, 11500, 12000, 12007, 507, 500, "broker_deregistered", "leader_applied"),
        ("t", 0, 19600, 20000, 20004, 404, 400, "broker_deregistered", "leader_applied"),
        ("t", 2, 19600, 20000, 25015, 5415, 400, "broker_deregistered", "leader_applied"),
    ]
    availability = known["outcome"].summary["clusters"][cluster_name(known, "clean")]["availability"]
    assert availability["offline_intervals"] == 4
    assert availability["partitions_affected"] == 3
    assert availability["offline_partition_ms"] == 3500 + 507 + 404 + 5415
    assert availability["offline_detection_ms"] == 500 + 500 + 400 + 400
    assert availability["longest_offline_ms"] == 5415
    assert availability["longest_offline_detection_ms"] == 500
    assert availability["still_offline"] == 0


def test_offline_intervals_with_several_losses_and_one_still_open(spark: Any, known: dict[str, Any]) -> None:
    intervals = sorted(
        (
            r["partition"],
            r["start_ts"],
            r["detected_ts"],
            r["end_ts"],
            r["duration_ms"],
            r["cause"],
            r["end_cause"],
            r["lost_leader_epoch"],
            r["new_leader"],
            r["new_leader_epoch"],
        )
        for r in rows_of(spark, known, "offline_intervals", "losses")
    )
    assert intervals == [
        # Lost with broker 1 at 3000, then with broker 2 (dead since 2400) at 9000: one interval
        # from the earliest fault, closed by the epoch above both losses (not broker 2's late 1).
        (0, 2400, 3000, 9005, 6605, "broker_deregistered", "leader_applied", 0, 3, 2),
        (1, 2900, 3000, None, None, "broker_deregistered", None, 0, None, None),
        (2, 2900, 3000, 3004, 104, "broker_deregistered", "leader_applied", 0, 3, 1),
    ]
    summary = known["outcome"].summary["clusters"][cluster_name(known, "losses")]
    assert (summary["availability"]["offline_intervals"], summary["availability"]["still_offline"]) == (3, 1)
    assert summary["violations"] == {name: 0 for name in schema.INVARIANTS}
    assert summary["nodes"] == ["broker-1", "broker-2", "broker-3", "controller-1"]
    assert (summary["first_ts"], summary["last_ts"]) == (1000, 9005)
    lines = sum(len(f.read_text().splitlines()) for f in (known["base"] / "logs" / "losses").iterdir())
    assert summary["events"] == lines == 25


def test_failover_phases_to_the_millisecond(spark: Any, known: dict[str, Any]) -> None:
    (incident,) = rows_of(spark, known, "failover_incidents", "clean")
    assert incident["previous_epoch"] == 1 and incident["controller_epoch"] == 2
    assert incident["previous_ended"] == "superseded"
    # From the fault (controller 1's last sign of life, 2000): detection, election, propagation.
    assert (incident["fault_ts"], incident["lost_ts"], incident["elected_ts"], incident["converged_ts"]) == (
        2000,
        6990,
        7000,
        7020,
    )
    assert (incident["detection_ms"], incident["election_ms"], incident["propagation_ms"]) == (4990, 10, 20)
    assert incident["total_ms"] == 5020
    availability = known["outcome"].summary["clusters"][cluster_name(known, "clean")]["availability"]
    assert availability["longest_failover_ms"] == 5020 and availability["longest_failover_detection_ms"] == 4990
    assert availability["controller_gap_ms"] == 4990 + 10
    assert incident["lost_evidence"] == "vacancy_observed"
    assert (incident["brokers"], incident["brokers_applied"]) == (3, 3)
    assert incident["previous_last_active_ts"] == 1032

    tenures = sorted(rows_of(spark, known, "controller_tenures", "clean"), key=lambda t: t["controller_epoch"])
    assert [(t["controller_id"], t["start_ts"], t["end_ts"], t["ended"]) for t in tenures] == [
        (1, 1010, 7000, "superseded"),
        (2, 7000, None, "active"),
    ]


def test_edge_cases(spark: Any, known: dict[str, Any]) -> None:
    """Topic recreation, a broker restart, same-millisecond ties, a zombie, an unfinished failover."""
    summary = known["outcome"].summary["clusters"][cluster_name(known, "edge")]
    assert summary["violations"] == {name: 0 for name in schema.INVARIANTS}
    intervals = sorted(
        (r["topic"], r["partition"], r["start_ts"], r["end_ts"], r["cause"], r["end_cause"])
        for r in rows_of(spark, known, "offline_intervals", "edge")
    )
    assert intervals == [
        ("q", 0, 4000, 4002, "broker_deregistered", "leader_applied"),
        ("q", 0, 5500, 5500, "broker_bounced", "leader_applied"),
        ("r", 0, 1000, 2000, "broker_deregistered", "topic_deleted"),
        ("r", 0, 4000, 5004, "broker_deregistered", "leader_applied"),
    ]
    tenures = sorted(rows_of(spark, known, "controller_tenures", "edge"), key=lambda t: t["controller_epoch"])
    assert [(t["controller_id"], t["end_ts"], t["ended"]) for t in tenures] == [
        (1, 6000, "superseded"),
        (2, 8000, "superseded"),
        (3, None, "active"),
    ]
    incidents = {r["controller_epoch"]: r for r in rows_of(spark, known, "failover_incidents", "edge")}
    assert (incidents[2]["lost_ts"], incidents[2]["converged_ts"], incidents[2]["total_ms"]) == (5990, 6004, 14)
    assert (incidents[2]["brokers"], incidents[2]["brokers_applied"]) == (2, 2)
    assert (incidents[3]["brokers"], incidents[3]["brokers_applied"]) == (2, 1)
    assert incidents[3]["converged_ts"] is None and incidents[3]["brokers_not_applied"] == [3]


def test_leadership_timeline_and_request_latency(spark: Any, known: dict[str, Any]) -> None:
    timeline = sorted(
        (r["ts"], r["leader"], r["leader_epoch"], r["until_ts"])
        for r in rows_of(spark, known, "leadership", "clean")
        if (r["topic"], r["partition"]) == ("t", 0)
    )
    assert timeline == [(1020, 1, 0, 12000), (12000, 2, 1, 20000), (20000, 3, 2, None)]

    latency = {(r["broker"], r["api"]): r for r in rows_of(spark, known, "request_latency", "clean")}
    um1 = latency[(1, "UpdateMetadata")]
    assert um1["requests"] == 3
    assert (um1["rtt_p50_ms"], um1["rtt_max_ms"]) == (2.0, 10.0)
    assert latency[(3, "UpdateMetadata")]["rtt_max_ms"] == 19.0


def test_summary_and_report_files(known: dict[str, Any]) -> None:
    out = known["out"]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["violations"]) == set(schema.INVARIANTS)
    assert summary["events"] == known["outcome"].summary["events"]
    assert {"offline_intervals", "partitions_affected", "longest_offline_ms", "failovers"} <= set(
        summary["availability"]
    )
    report = (out / "report.html").read_text()
    assert "<svg" in report and "leader_epoch_regression" in report
    assert "broker-2.state-change.jsonl:3" in report.replace("</div>", "")  # evidence with file:line
    for name in (
        "events",
        "bad_records",
        "controller_tenures",
        "failover_incidents",
        "leadership",
        "offline_intervals",
        "request_latency",
        "violations",
    ):
        assert (out / name).is_dir(), name


def test_malformed_lines_are_counted_with_file_and_line(spark: Any, tmp_path: pathlib.Path) -> None:
    scenarios.malformed(tmp_path / "logs")
    outcome = run(spark, [tmp_path / "logs"], tmp_path / "out")
    bad = sorted(table(spark, tmp_path / "out", "bad_records"), key=lambda r: r["line"])
    expected = [(i + 1, reason) for i, (_line, reason) in enumerate(scenarios.MALFORMED) if reason is not None]
    assert [r["line"] for r in bad] == [line for line, _ in expected]
    for row, (_line, reason) in zip(bad, expected, strict=True):
        assert reason in row["reason"], row
        assert row["file"].endswith("broker-1.state-change.jsonl")
    assert outcome.summary["malformed"] == len(expected)
    assert outcome.summary["events"] == 3  # the unknown kind counts as an event
    assert outcome.exit_code == 0


def test_the_ingest_status_and_the_reason_read_later_agree(spark: Any, tmp_path: pathlib.Path) -> None:
    from pyspark.sql import functions as F

    from controller_svc.analytics import ingest

    scenarios.malformed(tmp_path / "logs")
    parsed = ingest.parse(ingest.read_lines(spark, ingest.list_inputs(spark, [str(tmp_path / "logs")])))
    rows = parsed.select("status", ingest.bad_reason().alias("reason")).collect()
    assert len(rows) == len(scenarios.MALFORMED)
    assert sorted((r["status"], r["reason"] is not None) for r in rows) == sorted(
        ("ok" if reason is None else "bad", reason is not None) for _line, reason in scenarios.MALFORMED
    )
    assert all((r["status"] == "bad") == (r["reason"] is not None) for r in rows)
    assert parsed.filter(F.col("status") == "ok").filter(F.col("value").isNotNull()).count() == 0


def _expected_reason(row: dict[str, Any]) -> str | None:
    """Contract 5's reading of a parsed line, in plain Python: the oracle for ingest.bad_reason."""
    if row["value"] == "":
        return "empty line"
    ts, node, kind = row["ts"], row["node"], row["kind"]
    if ts is None and node is None and kind is None:
        return "not a JSON object with ts, node and kind"
    if ts is None:
        return "ts missing or not an integer"
    if ts <= 0:
        return "ts is not a positive number of milliseconds"
    if node is None:
        return "node missing"
    if kind is None:
        return "kind missing"
    missing = [f for f in schema.REQUIRED.get(kind, ()) if row[f] is None]
    if missing:
        return f"{kind} without (or with a mistyped) {', '.join(missing)}"
    for field, values in schema.ALLOWED_VALUES.get(kind, {}).items():
        if row[field] is not None and row[field] not in values:
            return f"{kind}: {field} {row[field]} is not one of {', '.join(values)}"
    return None


def _validation_rows() -> list[dict[str, Any]]:
    """Parsed lines that take every branch of the validation: each kind complete, without each
    required field, without all, with each closed-set field outside its set (two at once too)."""
    sample = {schema.LONG: 3, schema.DOUBLE: 1.5, schema.STRING: "x", schema.BOOLEAN: False, schema.LONG_ARRAY: [1]}
    kinds = dict(schema.FIELDS)
    empty = {name: None for name in kinds} | {"value": None}

    def complete(kind: str) -> dict[str, Any]:
        row = empty | {"ts": 1000, "node": "broker-1", "kind": kind}
        for field in schema.REQUIRED.get(kind, ()):
            row[field] = sample[kinds[field]]
        for field, values in schema.ALLOWED_VALUES.get(kind, {}).items():
            row[field] = values[-1]
        return row

    rows = [
        empty | {"value": ""},
        empty | {"value": "not json"},
        empty | {"node": "broker-1", "kind": "node.alive"},
        empty | {"ts": 0, "node": "broker-1", "kind": "node.alive"},
        empty | {"ts": -5, "node": "broker-1", "kind": "node.alive", "value": "{}"},
        empty | {"ts": 1000, "kind": "node.alive"},
        empty | {"ts": 1000, "node": "broker-1"},
        empty | {"ts": 1000, "node": "broker-1", "kind": "some.future_kind"},
    ]
    for kind, required in schema.REQUIRED.items():
        rows.append(complete(kind))
        rows.extend(complete(kind) | {field: None} for field in required)
        rows.append(complete(kind) | {field: None for field in required})
    for kind, allowed in schema.ALLOWED_VALUES.items():
        rows.extend(complete(kind) | {field: "it's \\ bogus"} for field in allowed)
        rows.append(complete(kind) | {field: "bogus" for field in allowed})
    return rows


def test_the_validation_gives_contract_5s_reason_for_every_branch(spark: Any) -> None:
    from pyspark.sql import functions as F

    from controller_svc.analytics import ingest

    rows = _validation_rows()
    frame_schema = ingest.record_schema().add("value", "string").add("i", "integer")
    frame = spark.createDataFrame([row | {"i": i} for i, row in enumerate(rows)], frame_schema)
    got = frame.select("i", ingest.is_malformed().alias("bad"), ingest.bad_reason().alias("reason")).orderBy("i")
    results = got.collect()
    assert len(results) == len(rows) > 60
    for row, result in zip(rows, results, strict=True):
        expected = _expected_reason(row)
        assert (result["reason"], bool(result["bad"])) == (expected, expected is not None), row
    assert frame.filter(F.col("kind") == "partition.role_changed").filter(ingest.is_malformed()).count() > 0


def test_generated_history_with_injected_violations(spark: Any, tmp_path: pathlib.Path) -> None:
    inject = {name: n for name, n in zip(schema.INVARIANTS, (2, 3, 4, 3), strict=True)}
    expected = synthetic.generate(tmp_path / "logs", 60_000, brokers=6, partitions=300, seed=7, inject=inject)
    cached_before = set(spark.sparkContext._jsc.getPersistentRDDs().keys())
    outcome = run(spark, [tmp_path / "logs"], tmp_path / "out")
    # Nothing the analysis cached for itself outlives it (a long-lived session runs many).
    assert set(spark.sparkContext._jsc.getPersistentRDDs().keys()) == cached_before
    assert outcome.summary["events"] == expected.events
    assert outcome.summary["violations"] == expected.violations == inject
    availability = outcome.summary["availability"]
    assert availability["failovers"] == expected.failovers
    assert availability["offline_intervals"] == expected.offline_intervals
    assert availability["still_offline"] == 0
    assert outcome.summary["controllers"]["elections"] == expected.elections


def _compilations(spark: Any) -> int:
    """Classes Spark has compiled from generated code in this JVM (its codegen metrics)."""
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


def test_a_second_analysis_in_one_session_compiles_almost_no_code(spark: Any, tmp_path: pathlib.Path) -> None:
    """The generated classes of one analysis stay in Spark's codegen cache for the next
    (session.CODEGEN_CACHE_ENTRIES): with Spark's default of 100 the same job compiled as many
    again as the first time, seconds of Janino on the driver per run."""
    inject = {name: 1 for name in schema.INVARIANTS}
    synthetic.generate(tmp_path / "logs", 20_000, brokers=6, partitions=200, seed=11, inject=inject)
    before = _compilations(spark)
    first = run(spark, [tmp_path / "logs"], tmp_path / "first")
    compiled_first = _compilations(spark) - before
    second = run(spark, [tmp_path / "logs"], tmp_path / "second")
    compiled_again = _compilations(spark) - before - compiled_first
    assert second.summary["violations"] == first.summary["violations"] == inject
    # A few dozen at most: adaptive execution re-plans a query as its stages finish, in an order
    # that varies from run to run, so a run may still meet a plan it has not seen (0-40 seen).
    # With Spark's default the second run compiled as many as a run with a cold cache (~560).
    assert compiled_again <= 100, (compiled_first, compiled_again)


def test_empty_and_missing_input_is_bad_input(spark: Any, tmp_path: pathlib.Path) -> None:
    from controller_svc.analytics.ingest import InputError

    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no state-change records"):
        run(spark, [tmp_path / "empty"], tmp_path / "out1")
    (tmp_path / "blank").mkdir()
    (tmp_path / "blank" / "broker-1.state-change.jsonl").write_bytes(b"")
    with pytest.raises(InputError, match="no state-change records"):
        run(spark, [tmp_path / "blank"], tmp_path / "out2")
    with pytest.raises(InputError, match="no such file"):
        run(spark, [tmp_path / "nowhere"], tmp_path / "out3")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "broker-1.state-change.jsonl").write_bytes(b"garbage\n{}\n")
    with pytest.raises(InputError, match="none of the 2 lines"):
        run(spark, [tmp_path / "junk"], tmp_path / "out4")
    assert len(table(spark, tmp_path / "out4", "bad_records")) == 2


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller_svc", "analyze", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


def test_cli_exit_codes_and_the_class_archive(tmp_path: pathlib.Path) -> None:
    """Exit codes 1 and 2 of runs that start Spark, the first recording the driver's class
    archive and the second starting from it (the suite runs with archives off otherwise)."""
    archives = tmp_path / "archives"
    scenarios.violations(tmp_path / "broken")
    result = cli(
        str(tmp_path / "broken"),
        "--out",
        str(tmp_path / "out"),
        "--master",
        "local[1]",
        env={class_archive.ENV: str(archives)},
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "leader_epoch_regression 3" in result.stdout
    assert (tmp_path / "out" / "report.html").is_file()
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["violations"]["single_controller_per_epoch"] == 2
    (archive,) = archives.glob(f"{class_archive.PREFIX}*{class_archive.SUFFIX}")
    assert f"saving Spark's classes to {archive}" in result.stderr
    assert [p.name for p in archives.iterdir() if p.name.endswith(".tmp")] == []
    assert json.loads((archives / f"{archive.name}.json").read_text())["size"] == archive.stat().st_size > 1 << 20

    # The JVM's own word that it mapped the archive: its CDS log, to a file.
    cds_log = tmp_path / "cds.log"
    result = cli(
        str(tmp_path / "nowhere"),
        "--out",
        str(tmp_path / "out2"),
        env={class_archive.ENV: str(archives), "JAVA_TOOL_OPTIONS": f"-Xlog:cds=info,cds+dynamic=info:file={cds_log}"},
    )
    assert result.returncode == 2
    assert "no such file or directory" in result.stderr
    jvm_says = cds_log.read_text()
    assert "Mapped dynamic region" in jvm_says and "Unable to use shared archive" not in jvm_says, jvm_says[-3000:]

    # A Java runtime that cannot record an archive (no base CDS archive loaded, as in a runtime
    # made by jlink; Java 17's JVM asked to record one then refuses to start): Spark starts
    # without one, and no recording is announced, on the first run as on the next.
    no_base = tmp_path / "no-base-archive"
    for _ in range(2):
        result = cli(
            str(tmp_path / "nowhere"),
            "--out",
            str(tmp_path / "out4"),
            env={class_archive.ENV: str(no_base), "JAVA_TOOL_OPTIONS": "-Xshare:off"},
        )
        assert result.returncode == 2 and "no such file or directory" in result.stderr, result.stderr[-3000:]
        assert "saving Spark's classes" not in result.stderr
        (record,) = no_base.glob(f"{class_archive.PREFIX}*{class_archive.SUFFIX}.json")
        assert json.loads(record.read_text()) == {class_archive.UNSUPPORTED: class_archive.UNSUPPORTED_REASON}
        assert [p.name for p in no_base.iterdir()] == [record.name]

    result = cli(str(tmp_path / "broken"), "--out", str(tmp_path / "out3"), "--conf", "not-a-pair")
    assert result.returncode == 2
    assert "expected KEY=VALUE" in result.stderr


def _worker_imports(_: int) -> tuple[bool, list[str]]:
    import sys
    import zipimport

    reads_once = getattr(zipimport.zipimporter.invalidate_caches, "_reads_once", False)
    archives = [entry for entry in sys.path if entry.endswith((".zip", ".jar"))]
    return reads_once, archives


def test_python_tasks_do_not_read_the_archives_on_their_path_again(spark: Any) -> None:
    """A local session's Python workers start from worker_daemon: PySpark's worker invalidates
    the import caches before each task, and Python 3.11's zip importer then re-read each
    archive on the workers' path (pyspark.zip, py4j's, Spark's core jar: about 180 ms a task)."""
    if sys.version_info >= (3, 12):
        pytest.skip("the standard library invalidates lazily since 3.12")
    seen = spark.sparkContext.parallelize(range(4), 4).map(_worker_imports).collect()
    assert [reads_once for reads_once, _ in seen] == [True] * 4
    assert all(any(entry.endswith("pyspark.zip") for entry in archives) for _, archives in seen)


def test_python_workers_start_with_the_tasks_modules_frozen(spark: Any) -> None:
    """worker_daemon imports the tasks' modules and freezes them before it forks a worker:
    PySpark's full collection after every task then walks only what the task made (it walked
    every object of PySpark, pyarrow and numpy, 15-25 ms a task)."""

    def collector(_: int) -> tuple[int, bool]:
        # Defined here, so that Spark sends it by value: by reference, the worker would
        # import this test module (and pytest) to find it.
        import gc
        import sys

        return gc.get_freeze_count(), "controller_svc.analytics.arrow_ingest" in sys.modules

    seen = spark.sparkContext.parallelize(range(4), 4).map(collector).collect()
    for frozen, preloaded in seen:
        # Frozen by the daemon before the fork (a worker never freezes): what a collection
        # still walks is what the worker made since (test_worker_daemon counts it).
        assert frozen > 10_000
        assert preloaded  # not imported by this task: the daemon did


def test_python_tasks_run_on_sockets_put_in_quick_ack_mode(spark: Any) -> None:
    """The workers' daemon runs every task through worker_daemon.acknowledging_at_once (each
    Python task waited ~40 ms on a delayed ACK before)."""

    def runner(_: int) -> str:
        import pyspark.daemon

        return str(pyspark.daemon.worker.__qualname__)

    assert set(spark.sparkContext.parallelize(range(4), 4).map(runner).collect()) == {
        "acknowledging_at_once.<locals>.run"
    }


def test_stages_with_the_same_code_share_one_generated_class(spark: Any, tmp_path: pathlib.Path) -> None:
    """session.build leaves the stage's number out of a generated class's name, so stages whose
    code is the same compile once: a union of four copies of one scan compiles what one copy
    does (with the number in the name, each copy's stage was a class of its own)."""
    import functools

    from pyspark.sql import functions as F

    spark.range(100).withColumn("v", F.col("id") * 3).write.parquet(str(tmp_path / "t"))

    def compiled(copies: int, above: int) -> int:
        # `above` makes the code new to this JVM's codegen cache (literals are in the source).
        scan = spark.read.parquet(str(tmp_path / "t")).filter(F.col("v") > above).select((F.col("v") + 7).alias("w"))
        before = _compilations(spark)
        functools.reduce(lambda a, b: a.union(b), [scan] * copies).collect()
        return _compilations(spark) - before

    one = compiled(1, 1_618_033)
    assert one > 0
    assert compiled(4, 3_141_592) == one


def test_building_a_query_sends_no_python_call_site(spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """session.build turns PySpark's DataFrame query context off: with it, every call that
    builds a query walked the Python stack and sent the call site to the JVM (several Py4J round
    trips per call, about half of a run's, while the cores wait for the plan)."""
    import py4j.clientserver
    import pyspark.errors.utils
    from pyspark.sql import functions as F

    sent: list[str] = []
    send = py4j.clientserver.ClientServerConnection.send_command

    def recording(self: Any, command: str) -> Any:
        sent.append(command)
        return send(self, command)

    monkeypatch.setattr(py4j.clientserver.ClientServerConnection, "send_command", recording)
    # PySpark reads the setting once per process, from the session active then (without one it
    # takes off): forgotten here, so that it is read from this session's settings.
    monkeypatch.setattr(pyspark.errors.utils, "_enable_debugging_cache", None)
    frame = spark.range(3).select((F.col("id") + F.lit(1)).alias("next")).filter(F.col("next") > 1)
    assert frame.columns == ["next"]
    assert len(sent) > 5  # the plan was built through Py4J
    assert not [command for command in sent if "PySparkCurrentOrigin" in command]


def test_a_local_master_lists_many_input_files_without_a_spark_job(spark: Any, tmp_path: pathlib.Path) -> None:
    """session.build lists a local master's inputs in the driver: 40 files (over Spark's default
    threshold of 32, above which a listing job runs first) give their names without a job."""
    from controller_svc.analytics import session

    files = []
    for index in range(40):
        path = tmp_path / f"broker-{index}.state-change.jsonl"
        path.write_text('{"ts":1,"node":"broker-1","kind":"node.alive"}\n')
        files.append(str(path))
    tracker = spark.sparkContext.statusTracker()
    assert spark.conf.get("spark.sql.sources.parallelPartitionDiscovery.threshold") == str(session.LOCAL_LISTING_PATHS)
    before = set(tracker.getJobIdsForGroup())
    assert len(spark.read.text(files).inputFiles()) == 40
    assert set(tracker.getJobIdsForGroup()) == before
    # With Spark's default, the same listing is a job of its own.
    spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", "32")
    try:
        assert len(spark.read.text(files).inputFiles()) == 40
    finally:
        spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", str(session.LOCAL_LISTING_PATHS))
    assert set(tracker.getJobIdsForGroup()) - before
