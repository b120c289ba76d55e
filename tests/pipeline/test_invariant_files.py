"""The invariants checked from the events table's files (invariant_files.py) find Spark's
violations (invariants.all_violations), row for row and field for field: on the hand-written
violations, on generated histories with every invariant injected, on a node whose role changes
the ingest's tasks did not see whole, and on random histories of two clusters with nodes of the
same names, read by the fast path, by Spark's JSON reader, and without the tasks' leader-epoch
checks; and in the whole job, which uses them by default (no Spark query for a history without
violations) and falls back to Spark's checks when they fail."""

from __future__ import annotations

import json
import logging
import pathlib
from typing import Any

import pytest

from controller_svc.analytics import schema, synthetic
from tests.pipeline import random_invariants, scenarios
from tests.pipeline.test_leader_epochs import _split_history

pytestmark = pytest.mark.pipeline


def _key(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True)


def _both(spark: Any, logs: pathlib.Path, out: pathlib.Path, by_directory: bool) -> dict[str, list[dict[str, Any]]]:
    """Spark's unresolved violations and invariant_files', sorted rows, for the history in `logs`."""
    from controller_svc.analytics import ingest, invariant_files, invariants
    from controller_svc.analytics.events_files import events_files
    from controller_svc.analytics.ingest import ClusterBy

    cluster_by = ClusterBy("dir" if by_directory else "none")
    checks = ingest.ingest(spark, [str(logs)], str(out)).checks
    file_rows = ingest.file_rows(spark, str(out))
    files_table = spark.createDataFrame(file_rows, ingest.FILES_DDL)
    events = ingest.events(spark, str(out), cluster_by, files_table)
    checked = (
        invariants.CheckedInTasks(checks, ingest.checked_candidates(spark, checks, cluster_by, files_table))
        if checks is not None
        else None
    )
    by_spark = invariants.all_violations(events, checked)
    found = invariant_files.all_violations(events_files(str(out), cluster_by, file_rows), checks)
    as_frame = spark.createDataFrame([violation.row() for violation in found], invariant_files.UNRESOLVED_DDL)
    # The rows job.py writes from the files have the columns, names and types of Spark's.
    assert [(f.name, f.dataType.simpleString()) for f in as_frame.schema] == [
        (f.name, f.dataType.simpleString()) for f in by_spark.schema
    ]
    return {
        "spark": sorted((row.asDict(recursive=True) for row in by_spark.collect()), key=_key),
        "files": sorted((row.asDict(recursive=True) for row in as_frame.collect()), key=_key),
    }


def _counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["invariant"]] = counts.get(row["invariant"], 0) + 1
    return counts


def test_the_files_find_the_hand_written_violations(spark: Any, tmp_path: pathlib.Path) -> None:
    scenarios.violations(tmp_path / "logs")
    found = _both(spark, tmp_path / "logs", tmp_path / "out", by_directory=False)
    assert found["files"] == found["spark"]
    assert _counts(found["files"]) == {
        schema.SINGLE_CONTROLLER_PER_EPOCH: 2,
        schema.STALE_CONTROLLER_EPOCH_APPLIED: 1,
        schema.LEADER_EPOCH_REGRESSION: 3,
        schema.UNCLEAN_ELECTION_WITHOUT_PERMISSION: 1,
    }
    details = {row["detail"] for row in found["files"]}
    assert "epoch 1 claimed by controllers 1, 2" in details
    assert "controller 1 elected with epoch 2 after controller 1 had been elected with epoch 3" in details
    assert (
        "broker-1 applied UpdateMetadata from controller 1 at epoch 2 after applying epoch 3 (controller 1)" in details
    )
    assert "broker-3 applied follower at leader epoch 2 after leader epoch 3" in details
    assert (
        "offline election flagged clean chose 3 (leader epoch 4, controller epoch 3), not in the previous ISR [1, 2]"
        in details
    )


def test_the_files_find_the_injected_violations(spark: Any, tmp_path: pathlib.Path) -> None:
    logs = tmp_path / "logs"
    expected = synthetic.generate(
        logs, 20_000, brokers=5, partitions=200, seed=5, inject={name: 2 for name in schema.INVARIANTS}
    )
    found = _both(spark, logs, tmp_path / "out", by_directory=False)
    assert found["files"] == found["spark"]
    assert _counts(found["files"]) == {name: count for name, count in expected.violations.items() if count}


@pytest.mark.parametrize("malformed_second", [False, True], ids=["two-chunks", "one-file-read-by-spark"])
def test_the_files_check_a_node_the_tasks_did_not_see_whole(
    spark: Any, tmp_path: pathlib.Path, malformed_second: bool
) -> None:
    _split_history(tmp_path / "logs", malformed_second)
    found = _both(spark, tmp_path / "logs", tmp_path / "out", by_directory=False)
    assert found["files"] == found["spark"]
    assert [row["detail"] for row in found["files"]] == [
        "broker-2 applied follower at leader epoch 5 after leader epoch 9"
    ]


@pytest.mark.parametrize(
    "reader", ["fast-path", "spark-json", "no-task-checks"], ids=["fast-path", "spark-json", "no-task-checks"]
)
def test_the_files_find_sparks_violations_in_random_histories(spark: Any, tmp_path: pathlib.Path, reader: str) -> None:
    """Three random histories of two clusters per reader; every invariant broken somewhere."""
    from controller_svc.analytics import ingest

    settings = {
        "spark-json": {ingest.FAST_PATH_CONF: "false"},
        "no-task-checks": {ingest.LEADER_EPOCHS_IN_TASKS_CONF: "false"},
    }.get(reader, {})
    seen: list[dict[str, Any]] = []
    for seed in (1, 2, 3):
        random_invariants.history(tmp_path / f"logs-{seed}", seed)
        for name, value in settings.items():
            spark.conf.set(name, value)
        try:
            found = _both(spark, tmp_path / f"logs-{seed}", tmp_path / f"out-{seed}", by_directory=True)
        finally:
            for name in settings:
                spark.conf.unset(name)
        assert found["files"] == found["spark"], seed
        seen += found["files"]
    assert set(_counts(seen)) == set(schema.INVARIANTS)
    assert {row["cluster"].rsplit("/", 1)[-1] for row in seen} == {"east", "west"}
    # A same-epoch re-application (no restart in between) was reported somewhere.
    assert any(
        row["invariant"] == schema.LEADER_EPOCH_REGRESSION
        and row["detail"].split(" at leader epoch ")[1].split(" after leader epoch ")[0]
        == row["detail"].rsplit(" ", 1)[1]
        for row in seen
    )


def test_earlier_max_is_the_highest_value_before_each_row_in_its_group() -> None:
    """The vectorized search that picks the brokers the stale-epoch check then walks: by its
    definition, on random sorted groups with repeated and negative values."""
    import random

    import numpy as np

    from controller_svc.analytics.invariant_files import earlier_max

    for seed in range(200):
        rng = random.Random(seed)
        group = np.array(sorted(rng.randrange(4) for _ in range(rng.randrange(1, 30))), dtype=np.int64)
        value = np.array([rng.randrange(-3, 4) for _ in group], dtype=np.int64)
        has_earlier, highest = earlier_max(group, value)
        for at in range(len(group)):
            earlier = [int(value[i]) for i in range(at) if group[i] == group[at]]
            assert bool(has_earlier[at]) == bool(earlier), (seed, at)
            if earlier:
                assert int(highest[at]) == max(earlier), (seed, at)


def _violations_table(spark: Any, out: pathlib.Path) -> tuple[list[str], list[tuple[str, str]]]:
    read = spark.read.parquet(str(out / "violations"))
    rows = sorted(_key(row.asDict(recursive=True)) for row in read.collect())
    return rows, [(f.name, f.dataType.simpleString()) for f in read.schema]


def test_the_job_checks_the_invariants_from_the_files_and_falls_back_to_spark(
    spark: Any, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The job with its scans on checks the invariants from the files (Spark's checks made to
    raise), with the violations table and summary Spark's checks give (the files' path patched
    out); a history without violations is written without a Spark query; a failure of the
    files' check is logged and Spark checks them."""
    from controller_svc.analytics import invariant_files, invariants, job

    violating, clean = tmp_path / "violating", tmp_path / "clean"
    scenarios.violations(violating)
    scenarios.clean_failover(clean)
    outcomes: dict[str, Any] = {}
    tables: dict[str, Any] = {}

    written: list[str] = []
    real_write = job._write

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Spark's checks ran")

    def recording(build: Any, out: str, name: str, clock: Any) -> Any:
        written.append(name)
        return real_write(build, out, name, clock)

    # An earlier run's unresolved violations, left in the OUTDIR the clean history goes to.
    stale = tmp_path / "clean-files" / "_violations_unresolved"
    stale.mkdir(parents=True)
    (stale / "part-00000.parquet").write_bytes(b"left by a run that stopped")
    for logs in (violating, clean):
        written.clear()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(invariants, "all_violations", refuse)
            patch.setattr(job, "_write", recording)
            outcomes[f"{logs.name}-files"] = job.analyze(spark, [str(logs)], str(tmp_path / f"{logs.name}-files"))
        # Spark writes the violations found (to resolve their evidence), and nothing for none.
        expected = {"_violations_unresolved", "violations"} if logs is violating else set()
        assert {"_violations_unresolved", "violations"} & set(written) == expected
        assert not (tmp_path / f"{logs.name}-files" / "_violations_unresolved").exists()
        tables[f"{logs.name}-files"] = _violations_table(spark, tmp_path / f"{logs.name}-files")
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(job, "_invariants_from_files", lambda *args: None)
            outcomes[f"{logs.name}-spark"] = job.analyze(spark, [str(logs)], str(tmp_path / f"{logs.name}-spark"))
        tables[f"{logs.name}-spark"] = _violations_table(spark, tmp_path / f"{logs.name}-spark")
        assert tables[f"{logs.name}-files"] == tables[f"{logs.name}-spark"]
        assert (
            outcomes[f"{logs.name}-files"].summary["violations"] == outcomes[f"{logs.name}-spark"].summary["violations"]
        )
    assert len(tables["violating-files"][0]) == 7 and not tables["clean-files"][0]
    # The evidence resolved to file, line and record for the violations the files found.
    assert all(json.loads(row)["records"][-1]["line"] >= 1 for row in tables["violating-files"][0])

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise OSError("disk gone")

    caplog.set_level(logging.WARNING, logger="analytics")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(invariant_files, "all_violations", fail)
        fallen = job.analyze(spark, [str(violating)], str(tmp_path / "fallback"))
    assert "the invariants could not be checked from the files; Spark checks them" in caplog.text
    assert _violations_table(spark, tmp_path / "fallback") == tables["violating-spark"]
    assert fallen.summary["violations"] == outcomes["violating-spark"].summary["violations"]
