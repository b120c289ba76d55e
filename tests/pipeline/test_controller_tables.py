"""The controllers' tables computed in the driver (controller_tables.py) are Spark's
(timelines.controller_tenures and timelines.failover_incidents), row for row and column for
column: on the hand-made histories, on random elections built to hit every rule (zombies that
resign or write after their successor's election, an election recorded twice, vacancies seen
before the previous tenure began, completions with and without their live brokers, UpdateMetadata
sent after the completion, rejected or never applied, controllers with and without node.alive,
names Spark reads no id from) in two clusters, and in the whole job, which uses them by default
and falls back to Spark's queries when they fail."""

from __future__ import annotations

import json
import logging
import pathlib
import random
from typing import Any

import pytest

from controller_svc.analytics.synthetic import HistoryWriter
from tests.pipeline import runs, scenarios

pytestmark = pytest.mark.pipeline

CONTROLLERS = ("controller-1", "controller-2", "controller-3", "controller-04", "controller-x")
BROKERS = (1, 2, 3, 4)


def _sorted_rows(frame: Any) -> list[dict[str, Any]]:
    rows = [row.asDict(recursive=True) for row in frame.collect()]
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True))


def _random_cluster(out: HistoryWriter, rng: random.Random, elections: int) -> None:
    """One cluster's elections, each followed by what its controller and the brokers recorded."""
    ts, epoch = 1_000, 0
    previous_start = ts
    previous: tuple[str, dict[str, Any]] | None = None
    for _ in range(elections):
        node = rng.choice(CONTROLLERS)
        duplicate = epoch > 0 and rng.random() < 0.1
        epoch += 0 if duplicate else rng.choice((1, 1, 2))
        # Two elections in one millisecond, at different epochs (at the same epoch too, Spark's
        # order of the two would be arbitrary, and so would the failovers chained from them).
        ts += 0 if not duplicate and rng.random() < 0.05 else rng.randint(1, 400)
        vacancy = rng.choice((None, ts - rng.randint(0, 50), previous_start - rng.randint(1, 30)))
        if previous is not None and rng.random() < 0.15:
            # The previous controller resigns in the millisecond its successor is elected.
            out.record(ts, previous[0], "controller.resigned", **previous[1], reason="session_expired")
        fields: dict[str, Any] = {"controller_id": rng.randint(1, 4), "controller_epoch": epoch}
        previous = (node, dict(fields))
        if vacancy is not None:
            fields["vacancy_ts"] = vacancy
        out.record(ts, node, "controller.elected", **fields)
        previous_start = ts
        # Its records in office, some of them long after (a zombie's, if a successor comes first).
        for _ in range(rng.randint(0, 4)):
            out.record(ts + rng.randint(0, 700), node, "broker.change", controller_epoch=epoch)
        if rng.random() < 0.6:
            out.record(ts + rng.randint(-20, 600), node, "node.alive")
        if rng.random() < 0.5:
            out.record(
                ts + rng.randint(0, 700),
                node,
                "controller.resigned",
                controller_id=fields["controller_id"],
                controller_epoch=epoch,
                reason=rng.choice(("session_expired", "shutdown")),
            )
        completed = ts + rng.randint(1, 300)
        if rng.random() < 0.7:
            live = rng.choice((None, [], sorted(rng.sample(BROKERS, rng.randint(1, 3)))))
            extra = {} if live is None else {"live_brokers": live}
            out.record(completed, node, "controller.failover_completed", controller_epoch=epoch, load_ms=1.5, **extra)
        for broker in rng.sample(BROKERS, rng.randint(0, 4)):
            sent = ts + rng.randint(0, 350)
            api = rng.choice(("UpdateMetadata", "UpdateMetadata", "LeaderAndIsr"))
            out.record(sent, node, "request.sent", broker=broker, api=api, correlation_id=1, controller_epoch=epoch)
            if rng.random() < 0.8:
                out.record(
                    sent + rng.randint(0, 30),
                    f"broker-{broker}",
                    "request.received",
                    api=api,
                    controller_id=fields["controller_id"],
                    controller_epoch=epoch,
                    broker_epoch=7,
                    result=rng.choice(("applied", "applied", "rejected")),
                    error=0,
                )


def _random_history(directory: pathlib.Path, seed: int) -> None:
    rng = random.Random(seed)
    for cluster in ("east", "west"):
        out = HistoryWriter(directory / cluster)
        _random_cluster(out, rng, 30)
        out.close()


def _both(spark: Any, logs: pathlib.Path, out: pathlib.Path, by_directory: bool) -> dict[str, Any]:
    """Spark's tables and the driver's, sorted rows, for the history in `logs`."""
    from pyspark.sql import functions as F

    from controller_svc.analytics import controller_tables, events_files, ingest, timelines
    from controller_svc.analytics.ingest import ClusterBy

    ingest.ingest(spark, [str(logs)], str(out))
    events = ingest.events(spark, str(out), ClusterBy("dir" if by_directory else "none"))
    tenures = timelines.controller_tenures(events).drop("start_pos")
    held = timelines.HeldFrames()
    incidents = timelines.failover_incidents(events, tenures.withColumn("start_pos", F.struct("start_ts")), held)
    by_spark = {"tenures": _sorted_rows(tenures), "incidents": _sorted_rows(incidents)}
    held.release()
    liveness = [(row["cluster"], row["node"]) for row in timelines.writers_of_liveness(events).collect()]
    files = events_files.events_files(
        str(out), ClusterBy("dir" if by_directory else "none"), ingest.file_rows(spark, str(out))
    )
    written = controller_tables.write(files, liveness, str(out / "t"), str(out / "i"))
    tenures_read, incidents_read = spark.read.parquet(str(out / "t")), spark.read.parquet(str(out / "i"))
    # The same columns, named and typed as Spark's, in the same order.
    for read, frame in ((tenures_read, tenures), (incidents_read, incidents)):
        assert [(f.name, f.dataType.simpleString()) for f in read.schema] == [
            (f.name, f.dataType.simpleString()) for f in frame.schema
        ]
    by_driver = {"tenures": _sorted_rows(tenures_read), "incidents": _sorted_rows(incidents_read)}
    assert written == (len(by_driver["tenures"]), len(by_driver["incidents"]))
    return {"spark": by_spark, "driver": by_driver}


@pytest.mark.parametrize("scenario", ["clean_failover", "edge_cases", "violations", "overlapping_losses"])
def test_the_driver_gives_sparks_tables_for_the_hand_made_histories(
    spark: Any, tmp_path: pathlib.Path, scenario: str
) -> None:
    getattr(scenarios, scenario)(tmp_path / "logs")
    tables = _both(spark, tmp_path / "logs", tmp_path / "out", by_directory=False)
    assert tables["driver"] == tables["spark"]
    assert tables["spark"]["tenures"]
    if scenario == "clean_failover":
        (incident,) = tables["driver"]["incidents"]
        # The hand-worked answer (scenarios.clean_failover): elected at 7000, the last of three
        # brokers applied at 7020.
        assert (incident["elected_ts"], incident["converged_ts"], incident["brokers"]) == (7000, 7020, 3)


def test_the_driver_gives_sparks_tables_for_a_history_without_elections(spark: Any, tmp_path: pathlib.Path) -> None:
    """Brokers' records only (logs of the brokers alone): no tenures and no incidents, as Spark's."""
    with HistoryWriter(tmp_path / "logs") as out:
        out.record(1000, "broker-1", "broker.registered", broker_id=1, broker_epoch=1)
        out.record(1500, "broker-1", "node.alive")
    tables = _both(spark, tmp_path / "logs", tmp_path / "out", by_directory=False)
    assert tables["driver"] == tables["spark"] == {"tenures": [], "incidents": []}


def test_the_driver_gives_sparks_tables_for_random_elections(spark: Any, tmp_path: pathlib.Path) -> None:
    """Three random histories of two clusters each; the third read by Spark's JSON reader (its
    events files hold every column, the fast path's only their kind's)."""
    from controller_svc.analytics import ingest

    tenures: list[dict[str, Any]] = []
    incidents: list[dict[str, Any]] = []
    for seed in (1, 2, 3):
        _random_history(tmp_path / f"logs-{seed}", seed)
        spark.conf.set(ingest.FAST_PATH_CONF, "false" if seed == 3 else "true")
        try:
            tables = _both(spark, tmp_path / f"logs-{seed}", tmp_path / f"out-{seed}", by_directory=True)
        finally:
            spark.conf.unset(ingest.FAST_PATH_CONF)
        assert tables["driver"] == tables["spark"], seed
        tenures += tables["spark"]["tenures"]
        incidents += tables["spark"]["incidents"]
    # Two clusters, named by their directories, and every rule was met somewhere.
    assert {row["cluster"].rsplit("/", 1)[-1] for row in tenures} == {"east", "west"}
    assert {row["ended"] for row in tenures} == {"resigned", "superseded", "active"}
    assert {row["lost_evidence"] for row in incidents} == {"resigned", "vacancy_observed", "last_record"}
    assert any(row["last_active_ts"] is None for row in tenures)
    # A zombie's records after its successor's election are not its activity in office.
    assert any(row["ended"] == "superseded" and row["last_active_ts"] is not None for row in tenures)
    assert any(row["converged_ts"] is not None for row in incidents)
    assert any(row["converged_ts"] is None and row["brokers"] > 0 for row in incidents)
    assert any(row["brokers_not_applied"] for row in incidents)
    assert any(row["brokers"] == 0 for row in incidents)
    assert any(row["fault_ts"] is not None and row["fault_ts"] < row["lost_ts"] for row in incidents)
    assert any(row["load_ms"] is None for row in incidents) and any(row["load_ms"] for row in incidents)


def test_node_ids_are_read_as_sparks_cast_reads_them(spark: Any) -> None:
    """events_files.node_id and has_role against ingest.with_node_columns."""
    from controller_svc.analytics import events_files, ingest

    names = [
        "controller-12",
        "controller- 12",
        "controller-12 ",
        "controller-+12",
        "controller-1.0",
        "controller-1e3",
        "controller-\u0663",
        "controller-0x10",
        "controller-",
        "controller-99999999999999999999",
        "controller-9223372036854775807",
        "controller--5",
        "controller-a-7",
        "controller-\t7\n",
        "broker-007",
        "broker-x",
        "controller",
        "zookeeper-1",
    ]
    frame = ingest.with_node_columns(spark.createDataFrame([(name,) for name in names], "node string"))
    for row in frame.collect():
        assert events_files.node_id(row["node"]) == row["node_id"], row["node"]
        for role in ("controller", "broker"):
            assert events_files.has_role(row["node"], role) == (row["node_role"] == role), row["node"]


def test_the_job_writes_the_controllers_tables_in_the_driver_and_falls_back_to_spark(
    spark: Any, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The job with its scans on writes the two tables in the driver: no Spark search for the
    old controllers' last signs of life, the same tables and summary as Spark's queries give
    (scans off). When the driver's computation fails, that is logged and Spark writes them."""
    from controller_svc.analytics import controller_tables, job, record_search

    _random_history(tmp_path / "logs", 4)
    real_write, real_search = controller_tables.write, record_search.answers
    written: list[str] = []
    searches: list[str] = []

    def recording(files: Any, liveness: Any, tenures_dir: str, incidents_dir: str) -> Any:
        written.append(pathlib.Path(tenures_dir).name)
        return real_write(files, liveness, tenures_dir, incidents_dir)

    def recording_search(*args: Any) -> Any:
        searches.append(str(args[4]))
        return real_search(*args)

    caplog.set_level(logging.WARNING, logger="analytics")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(controller_tables, "write", recording)
        patch.setattr(record_search, "answers", recording_search)
        in_driver = runs.analyze(spark, tmp_path / "logs", tmp_path / "driver", {job.SCAN_TIMELINES_CONF: True})
        assert written == ["controller_tenures"]
        assert "last_alive_ts" not in searches
        by_spark = runs.analyze(spark, tmp_path / "logs", tmp_path / "spark", {job.SCAN_TIMELINES_CONF: False})
        assert written == ["controller_tenures"]
    assert "could not be computed in the driver" not in caplog.text
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(controller_tables, "_applied", lambda files: 1 // 0)
        fell_back = runs.analyze(spark, tmp_path / "logs", tmp_path / "fell_back", {job.SCAN_TIMELINES_CONF: True})
    assert "could not be computed in the driver" in caplog.text and "ZeroDivisionError" in caplog.text

    def history(outcome: Any) -> dict[str, Any]:
        return {
            k: v
            for k, v in outcome.summary.items()
            if k not in ("timings_s", "step_spans_s", "elapsed_s", "tables", "report")
        }

    assert history(in_driver) == history(by_spark) == history(fell_back)
    assert in_driver.summary["controllers"]["elections"] == 60
    assert "controller_tables" in in_driver.summary["timings_s"]
    assert "failover_incidents" in fell_back.summary["timings_s"]
    for table in ("controller_tenures", "failover_incidents"):
        expected = _sorted_rows(spark.read.parquet(str(tmp_path / "spark" / table)))
        assert expected
        assert _sorted_rows(spark.read.parquet(str(tmp_path / "driver" / table))) == expected
        assert _sorted_rows(spark.read.parquet(str(tmp_path / "fell_back" / table))) == expected
