"""The leader-epoch check made in the ingest's tasks (leader_epochs.py) finds exactly what
Spark's check finds, and leaves to Spark every node the tasks did not see whole."""

from __future__ import annotations

import json
import pathlib
import random
from typing import Any

import pytest

from controller_svc.analytics import schema, synthetic
from tests.pipeline import runs, scenarios

pytestmark = pytest.mark.pipeline

ROLE_FIELDS = ("node", "topic", "partition", "ts", "role", "leader_epoch", "mid")


def _reference(rows: list[dict[str, Any]], file_id: int, block: int) -> list[tuple[Any, ...]]:
    """invariants.leader_epoch_regression's rows before its restart test, by its definition:
    per (node, topic, partition) in (ts, mid) order, a leader/follower record at or below the
    highest epoch applied earlier in its generation (deletions count generations), compared
    with the latest record at that highest epoch."""
    from controller_svc.analytics import leader_epochs

    keyed: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        if row["role"] in leader_epochs.CHECKED_ROLES:
            keyed.setdefault((row["node"], row["topic"], row["partition"]), []).append(row)
    found = []
    for records in keyed.values():
        generation = 0
        highest: tuple[int, int, int, int] | None = None
        for row in sorted(records, key=lambda r: (r["ts"], r["mid"])):
            if row["role"] == "deleted":
                generation += 1
                continue
            if highest is not None and highest[0] == generation and row["leader_epoch"] <= highest[1]:
                found.append((*(row[name] for name in ROLE_FIELDS), file_id, block, generation, *highest))
            mine = (generation, row["leader_epoch"], row["ts"], row["mid"])
            highest = mine if highest is None or mine > highest else highest
    return sorted(found)


def _table(rows: list[dict[str, Any]]) -> Any:
    import pyarrow as pa

    types = {"node": pa.string(), "topic": pa.string(), "role": pa.string()}
    return pa.Table.from_pylist(rows, schema=pa.schema([(name, types.get(name, pa.int64())) for name in ROLE_FIELDS]))


def test_a_chunks_check_is_the_definition_on_random_histories() -> None:
    """Few keys, few epochs and timestamps that collide: ties in ts (broken by line), equal
    epochs, deletions, stopped roles (not compared) and several nodes in one chunk."""
    from controller_svc.analytics import leader_epochs

    for seed in range(300):
        rng = random.Random(seed)
        count = rng.randint(0, 150)
        rows = [
            {
                "node": rng.choice(["broker-1", "broker-2", "controller-1"]),
                "topic": rng.choice(["a", "b"]),
                "partition": rng.randint(0, 2),
                "ts": rng.randint(0, count // 2),
                "role": rng.choice(["leader", "follower", "leader", "follower", "deleted", "stopped"]),
                "leader_epoch": rng.randint(0, 6),
                "mid": mid,
            }
            for mid in range(count)
        ]
        rng.shuffle(rows)
        checked = leader_epochs.check_chunk(_table(rows), 3, 4096)
        assert sorted(tuple(row.values()) for row in checked.candidates.to_pylist()) == _reference(rows, 3, 4096), seed
        assert set(checked.nodes) == {row["node"] for row in rows if row["role"] in leader_epochs.CHECKED_ROLES}


def test_a_chunks_check_reports_against_the_latest_record_at_the_highest_epoch() -> None:
    from controller_svc.analytics import leader_epochs

    def role(ts: int, mid: int, epoch: int, role: str = "follower") -> dict[str, Any]:
        return {
            "node": "broker-1",
            "topic": "t",
            "partition": 0,
            "ts": ts,
            "role": role,
            "leader_epoch": epoch,
            "mid": mid,
        }

    # Epochs 7, 7 (same ms, later line), 5, then a deletion and 1: the 5 is compared with the
    # second 7; the second 7 with the first; after the deletion, nothing.
    rows = [role(10, 0, 7), role(10, 1, 7, "leader"), role(11, 2, 5), role(12, 3, -2, "deleted"), role(13, 4, 1)]
    found = leader_epochs.check_chunk(_table(rows), 0, 0).candidates.to_pylist()
    assert [(r["leader_epoch"], r["mid"], r["prev_leader_epoch"], r["prev_mid"]) for r in found] == [
        (7, 1, 7, 0),
        (5, 2, 7, 1),
    ]
    assert leader_epochs.check_chunk(_table([]), 0, 0).nodes == ()


def _violations(spark: Any, out: pathlib.Path) -> list[str]:
    return sorted(
        json.dumps(row.asDict(recursive=True), sort_keys=True)
        for row in spark.read.parquet(str(out / "violations")).collect()
    )


def _analyze(spark: Any, logs: pathlib.Path, out: pathlib.Path, in_tasks: bool = True) -> Any:
    from controller_svc.analytics import ingest

    return runs.analyze(spark, logs, out, {ingest.LEADER_EPOCHS_IN_TASKS_CONF: in_tasks})


def _candidate_files(out: pathlib.Path) -> list[pathlib.Path]:
    from controller_svc.analytics import arrow_ingest

    return sorted((out / "events" / arrow_ingest.CHECKS_DIR).glob("*.parquet"))


def test_the_tasks_find_what_spark_finds(spark: Any, tmp_path: pathlib.Path) -> None:
    """The hand-written violations (a restart allows one re-application, a deletion starts
    over) and a generated history with every invariant injected: the same violations table,
    row for row, with the check in the tasks and in Spark."""
    hand = tmp_path / "hand"
    scenarios.violations(hand)
    generated = tmp_path / "generated"
    expected = synthetic.generate(
        generated, 20_000, brokers=5, partitions=200, seed=5, inject={name: 2 for name in schema.INVARIANTS}
    )
    for logs, regressions in ((hand, 3), (generated, expected.violations[schema.LEADER_EPOCH_REGRESSION])):
        in_tasks = _analyze(spark, logs, tmp_path / f"{logs.name}-tasks")
        by_spark = _analyze(spark, logs, tmp_path / f"{logs.name}-spark", in_tasks=False)
        assert in_tasks.summary["violations"][schema.LEADER_EPOCH_REGRESSION] == regressions
        assert _violations(spark, tmp_path / f"{logs.name}-tasks") == _violations(
            spark, tmp_path / f"{logs.name}-spark"
        )
        assert in_tasks.summary["violations"] == by_spark.summary["violations"]
        # The tasks found them: their candidates were written, and none with the check in Spark.
        assert _candidate_files(tmp_path / f"{logs.name}-tasks")
        assert not _candidate_files(tmp_path / f"{logs.name}-spark")


def _split_history(directory: pathlib.Path, malformed_second: bool) -> None:
    """broker-2's role changes in two files: epoch 9, then (in the other file, later) epoch 5.
    Neither file alone holds a regression; together they do."""
    with synthetic.HistoryWriter(directory) as out:
        out.record(100, "controller-1", "controller.elected", controller_id=1, controller_epoch=1)
        out.record(
            200,
            "broker-2",
            "partition.role_changed",
            topic="t",
            partition=0,
            role="follower",
            leader=1,
            leader_epoch=9,
            isr=[],
            controller_epoch=1,
        )
    later = [
        {
            "ts": 300,
            "node": "broker-2",
            "kind": "partition.role_changed",
            "topic": "t",
            "partition": 0,
            "role": "follower",
            "leader": 1,
            "leader_epoch": 5,
            "isr": [],
            "controller_epoch": 1,
        },
    ]
    lines = [json.dumps(record).encode() for record in later]
    if malformed_second:
        # A line the fast path turns its file down for: Spark's readers read the file.
        lines.append(b'{"ts":301,"node":"broker-2","kind":"broker.shutdown","broker_id":2}')
    (directory / "broker-2-rotated.state-change.jsonl").write_bytes(b"\n".join(lines) + b"\n")


@pytest.mark.parametrize("malformed_second", [False, True], ids=["two-chunks", "one-file-read-by-spark"])
def test_a_node_the_tasks_did_not_see_whole_is_checked_by_spark(
    spark: Any, tmp_path: pathlib.Path, malformed_second: bool
) -> None:
    logs = tmp_path / "logs"
    _split_history(logs, malformed_second)
    with runs.ingest_results() as seen:
        outcome = _analyze(spark, logs, tmp_path / "out")
    assert outcome.summary["violations"][schema.LEADER_EPOCH_REGRESSION] == 1
    rows = [json.loads(row) for row in _violations(spark, tmp_path / "out")]
    assert [row["detail"] for row in rows] == ["broker-2 applied follower at leader epoch 5 after leader epoch 9"]
    # Where it was found: by Spark, since no task saw broker-2's records whole. (A task saw all
    # of them the fast path read, in one chunk, when the second file went to Spark's readers:
    # the check asks which nodes those files hold before it takes the task's word for one.)
    (checks,) = (found.checks for found in seen)
    assert checks is not None
    if malformed_second:
        assert checks.other_files and checks.nodes == frozenset({"broker-2"})
    else:
        assert not checks.other_files and not checks.nodes
        assert checks.multi_chunk_nodes == frozenset({"broker-2"})
    assert not _candidate_files(tmp_path / "out")
