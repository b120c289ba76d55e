"""The analytics' sort-based lookups against the plain joins they replaced, on seeded random data.

`last_record_before` (Spark's searches and record_search's tasks), `first_loss_in_tenure` and
the restart lookup of `leader_epoch_regression` exist for speed (a join of every query with
every record of its node was quadratic at 10M events); each must give exactly what the plain
join gives, ties within a millisecond, empty sides and spans over many time buckets included.
"""

from __future__ import annotations

import logging
import pathlib
import random
from typing import Any

import pytest

from controller_svc.analytics import record_search

pytestmark = pytest.mark.pipeline

SEEDS = (1, 2, 3)
POS = "struct<ts: bigint, file_id: int, block: bigint, mid: bigint>"


def _pos(ts: int, file_id: int, mid: int) -> tuple[int, int, int, int]:
    return (ts, file_id, 0, mid)


def persisted(spark: Any) -> set[int]:
    """Ids of the RDDs Spark keeps cached (a cached frame's data, once computed)."""
    return set(spark.sparkContext._jsc.getPersistentRDDs().keys())


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("inclusive", [False, True])
@pytest.mark.parametrize("search", ["joined", "joined-coarse", "sorted", "tasks"])
def test_last_record_before_is_the_latest_earlier_record(
    spark: Any, seed: int, inclusive: bool, search: str, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    from pyspark.sql import functions as F

    from controller_svc.analytics import timelines
    from controller_svc.analytics.timelines import last_record_before

    # Each key has about 20 query times: joined below the limit, sorted with none. Joined, the
    # slots are cut into one bucket per ms of the queries' span, or (coarse) into 3 buckets, so
    # that slots share buckets and span several. Tasks: record_search's, in tmp_path.
    monkeypatch.setattr(timelines, "JOINED_QUERY_TIMES", 0 if search == "sorted" else 64)
    monkeypatch.setattr(timelines, "SLOT_BUCKETS_PER_KEY", 3 if search == "joined-coarse" else 1024)
    rng = random.Random(seed)
    # Records also before the first and after the last query time (the first and last buckets).
    records = [("c", rng.choice("abc"), rng.randint(-20, 90)) for _ in range(300)]
    queries = [("c", rng.choice("abcd"), q, rng.randint(-5, 70)) for q in range(80)]
    record_frame = spark.createDataFrame(records, "cluster string, k string, ts bigint")
    query_frame = spark.createDataFrame(queries, "cluster string, k string, qid bigint, at bigint")

    before = persisted(spark)
    held = timelines.HeldFrames()
    search_dir = tmp_path / "search" if search == "tasks" else None
    found = last_record_before(
        query_frame,
        record_frame,
        ["cluster", "k"],
        at="at",
        inclusive=inclusive,
        alias="last",
        held=held,
        search_dir=str(search_dir) if search_dir is not None else None,
    )
    got = {row["qid"]: row["last"] for row in found.collect()}
    assert persisted(spark) > before  # the queries were computed once, into the cache
    if search_dir is not None:
        # The tasks answered (one file per core of local[2]), and their directory goes with the frames.
        assert len(list((search_dir / record_search.ANSWERS_DIR).glob("part-*.parquet"))) == 2
    held.release()
    assert persisted(spark) == before
    assert search_dir is None or not search_dir.exists()

    plain = (
        query_frame.join(record_frame, ["cluster", "k"], "left")
        .withColumn(
            "ts", F.when((F.col("ts") <= F.col("at")) if inclusive else (F.col("ts") < F.col("at")), F.col("ts"))
        )
        .groupBy("qid")
        .agg(F.max("ts").alias("last"))
    )
    expected = {row["qid"]: row["last"] for row in plain.collect()}
    assert got == expected
    assert len(got) == len(queries)  # every query answered once, with null when nothing came before
    assert any(v is None for v in got.values()) and any(v is not None for v in got.values())


def _plain_latest(query_frame: Any, record_frame: Any, keys: list[str], inclusive: bool) -> dict[Any, Any]:
    """Per query id, the latest record before its `at` by the plain join (null keys meet nothing)."""
    from pyspark.sql import functions as F

    before = (F.col("r.ts") <= F.col("q.at")) if inclusive else (F.col("r.ts") < F.col("q.at"))
    same = [F.col(f"q.{k}") == F.col(f"r.{k}") for k in keys]
    condition = same[0]
    for other in same[1:]:
        condition = condition & other
    plain = (
        query_frame.alias("q")
        .join(record_frame.alias("r"), condition & before, "left")
        .groupBy("q.qid")
        .agg(F.max("r.ts").alias("last"))
    )
    return {row["qid"]: row["last"] for row in plain.collect()}


@pytest.mark.parametrize("inclusive", [False, True])
def test_the_search_tasks_take_null_keys_null_times_and_repeated_queries(
    spark: Any, inclusive: bool, tmp_path: pathlib.Path
) -> None:
    """record_search's tasks on what the job's searches never meet but a history could hold:
    null keys (no record matches them), records without a time, one query time asked by many
    queries, a bigint key, and three tasks (an odd count) as well as local[2]'s two."""
    from controller_svc.analytics import timelines

    rng = random.Random(7)
    records = [
        (rng.choice(["c", None]), rng.choice([1, 2, 3, None]), rng.choice([rng.randint(0, 40), None]))
        for _ in range(400)
    ]
    queries = [
        (rng.choice(["c", None]), rng.choice([1, 2, 4, None]), q, rng.choice([rng.randint(0, 40), 20, None]))
        for q in range(150)
    ]
    record_frame = spark.createDataFrame(records, "cluster string, k bigint, ts bigint")
    query_frame = spark.createDataFrame(queries, "cluster string, k bigint, qid bigint, at bigint")
    held = timelines.HeldFrames()
    found = timelines.last_record_before(
        query_frame, record_frame, ["cluster", "k"], "at", inclusive, "last", held, str(tmp_path / "search")
    )
    got = {row["qid"]: row["last"] for row in found.collect()}
    expected = _plain_latest(query_frame, record_frame, ["cluster", "k"], inclusive)
    assert got == expected and len(got) == len(queries)
    assert sum(1 for q in queries if q[3] == 20) > 5  # the repeated time was asked many times
    assert any(v is not None for v in got.values()) and any(v is None for q, v in got.items() if queries[q][1] is None)
    # The same rows in three tasks.
    three = tmp_path / "three"
    three.mkdir()
    rows_dir = str(tmp_path / "search" / record_search.ROWS_DIR)
    key_types = (("cluster", "string"), ("k", "bigint"))
    answered = sum(
        record_search.search_share(rows_dir, str(three), key_types, inclusive, "last", share, 3) for share in range(3)
    )
    by_three = spark.read.parquet(str(three)).collect()
    assert answered == len(by_three) == len({(q[0], q[1], q[3]) for q in queries if None not in (q[0], q[1], q[3])})
    expected_by_time = {(q[0], q[1], q[3]): expected[q[2]] for q in queries if None not in (q[0], q[1], q[3])}
    assert {(r["cluster"], r["k"], r["_at"]): r["last"] for r in by_three} == expected_by_time
    held.release()


def test_failed_search_tasks_leave_the_search_to_spark(
    spark: Any, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task that fails (here: raises) is logged, and Spark's search gives the same answers; a
    key of a type the tasks do not carry (a double) goes to Spark's search without them."""
    from controller_svc.analytics import timelines

    rng = random.Random(3)
    records = [("c", rng.choice("ab"), rng.randint(0, 50)) for _ in range(100)]
    queries = [("c", rng.choice("ab"), q, rng.randint(0, 50)) for q in range(30)]
    record_frame = spark.createDataFrame(records, "cluster string, k string, ts bigint")
    query_frame = spark.createDataFrame(queries, "cluster string, k string, qid bigint, at bigint")
    expected = _plain_latest(query_frame, record_frame, ["cluster", "k"], False)
    caplog.set_level(logging.WARNING, logger="analytics")
    held = timelines.HeldFrames()
    with monkeypatch.context() as patch:
        patch.setattr(record_search, "_search_task", lambda args: 1 // 0)
        found = timelines.last_record_before(
            query_frame, record_frame, ["cluster", "k"], "at", False, "last", held, str(tmp_path / "search")
        )
    assert "the search for last failed" in caplog.text
    assert {row["qid"]: row["last"] for row in found.collect()} == expected
    held.release()
    assert not (tmp_path / "search").exists()

    doubles = spark.createDataFrame(
        [(float(k), t) for _, k, t in [(0, 1, 5), (0, 1, 9), (0, 2, 3)]], "k double, ts bigint"
    )
    asked = spark.createDataFrame([(1.0, 1, 8), (2.0, 2, 8), (3.0, 3, 8)], "k double, qid bigint, at bigint")
    found = timelines.last_record_before(asked, doubles, ["k"], "at", False, "last", held, str(tmp_path / "doubles"))
    assert {row["qid"]: row["last"] for row in found.collect()} == {1: 5, 2: 3, 3: None}
    assert not (tmp_path / "doubles").exists()
    held.release()


def _first_losses_in_tasks(led: list[tuple[Any, ...]], losses: list[tuple[Any, ...]]) -> dict[Any, Any]:
    """offline_scan's broker-loss rows of the same leaderships (their `broker` as the leader)
    and losses, as Arrow tables, by (partition, leader epoch)."""
    import pyarrow as pa

    from controller_svc.analytics import offline_scan

    position = pa.struct([("ts", pa.int64()), ("file_id", pa.int32()), ("block", pa.int64()), ("mid", pa.int64())])

    def positions(values: list[Any]) -> Any:
        return pa.array(
            [None if v is None else dict(zip(("ts", "file_id", "block", "mid"), v, strict=True)) for v in values],
            position,
        )

    leaders = pa.table(
        {
            "cluster": [r[0] for r in led],
            "topic": [r[1] for r in led],
            "partition": [r[2] for r in led],
            "leader": [r[3] for r in led],
            "leader_epoch": [r[4] for r in led],
            "from_pos": positions([r[5] for r in led]),
            "until_pos": positions([r[6] for r in led]),
        }
    )
    loss_table = pa.table(
        {
            "cluster": [r[0] for r in losses],
            "broker": [r[3] for r in losses],
            **{name: [r[1][i] for r in losses] for i, name in enumerate(offline_scan.POSITION_FIELDS)},
            "ts": [r[2] for r in losses],
            "cause": [r[4] for r in losses],
            "alive_ts": [r[5] for r in losses],
        }
    )
    found = offline_scan._first_losses(leaders, loss_table).to_pylist()
    assert all(r["change_code"] == offline_scan.LOST and r["new_leader"] is None for r in found)
    return {
        (r["partition"], r["epoch"]): ((r["pos_ts"], r["file_id"], r["block"], r["mid"]), r["ts"], r["alive_ts"])
        for r in found
    }


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("search", ["joined", "joined-coarse", "sorted", "tasks"])
def test_first_loss_in_tenure_is_the_earliest_loss_while_leading(
    spark: Any, seed: int, search: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.sql import functions as F

    from controller_svc.analytics import timelines
    from controller_svc.analytics.timelines import first_loss_in_tenure

    # Joined: slots in one bucket per ms of the losses' span, or (coarse) in 3 buckets, so that
    # slots share buckets and span several; sorted: the fallback for more losses than a broadcast holds.
    monkeypatch.setattr(timelines, "JOINED_LOSSES", -1 if search == "sorted" else 100_000)
    monkeypatch.setattr(timelines, "SLOT_BUCKETS_PER_KEY", 3 if search == "joined-coarse" else 1024)
    rng = random.Random(seed)
    times = rng.sample(range(1, 5000), 700)  # distinct record times; mids make positions unique
    led: list[tuple[Any, ...]] = []
    for partition in range(12):
        starts = sorted(times.pop() for _ in range(rng.randint(1, 8)))
        for i, start in enumerate(starts):
            until = _pos(starts[i + 1], 1, 10 * starts[i + 1]) if i + 1 < len(starts) else None
            led.append(("c", "t", partition, rng.randint(1, 4), i, _pos(start, 1, 10 * start), until))
    losses = []
    for _ in range(60):
        ts = times.pop()
        losses.append(("c", _pos(ts, 1, 10 * ts), ts, rng.randint(1, 4), "broker_deregistered", ts - 3))
    # Losses in the millisecond a leadership starts or ends, just before or just after its record.
    for _ in range(30):
        tenure = rng.choice(led)
        bound = rng.choice([tenure[5], tenure[6] or tenure[5]])
        mid = bound[3] + rng.choice([-1, 1])
        losses.append(("c", _pos(bound[0], 1, mid), bound[0], tenure[3], "broker_bounced", bound[0] - 1))
    led_frame = spark.createDataFrame(
        led,
        f"cluster string, topic string, partition bigint, broker bigint, leader_epoch bigint, "
        f"from_pos {POS}, until_pos {POS}",
    )
    loss_frame = spark.createDataFrame(
        losses, f"cluster string, pos {POS}, ts bigint, broker bigint, cause string, alive_ts bigint"
    )

    if search == "tasks":
        got = _first_losses_in_tasks(led, losses)
    else:
        before = persisted(spark)
        held = timelines.HeldFrames()
        got = {
            (r["partition"], r["leader_epoch"]): (tuple(r["pos"]), r["ts"], r["alive_ts"])
            for r in first_loss_in_tenure(led_frame, loss_frame, held).collect()
        }
        assert persisted(spark) > before  # the losses were computed once, into the cache
        held.release()
        assert persisted(spark) == before

    plain = (
        led_frame.join(loss_frame, ["cluster", "broker"])
        .filter(
            (F.col("from_pos") <= F.col("pos")) & (F.col("until_pos").isNull() | (F.col("pos") < F.col("until_pos")))
        )
        .groupBy("partition", "leader_epoch")
        .agg(F.min(F.struct("pos", "ts", "alive_ts")).alias("first"))
    )
    expected = {
        (r["partition"], r["leader_epoch"]): (tuple(r["first"]["pos"]), r["first"]["ts"], r["first"]["alive_ts"])
        for r in plain.collect()
    }
    assert got == expected
    assert expected  # the data has tenures with losses


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("partitions", [6, 400])
def test_leader_epoch_regression_counts_restarts_between_reapplications(spark: Any, seed: int, partitions: int) -> None:
    """The check against a plain reading of its rule: each applied role's epoch compared with the
    highest earlier one of its generation, a re-application of that epoch allowed only when the
    broker's process started (broker.started at or before the record) since the latest record
    at that epoch. Ties within a millisecond, deletions, starts in a record's millisecond.
    Over 6 partitions most records meet an earlier one of theirs; over 400, most keys never
    regress. Epochs beyond int32's range and below -1 are among them."""
    from controller_svc.analytics import invariants

    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    mid = 0
    for node in ("broker-1", "broker-2", "broker-3"):
        ts = 0
        for _ in range(400 if partitions == 6 else 2000):
            mid += 1
            ts += rng.choice([0, 0, 1, 2, 5])
            kind = rng.choices(["role", "started"], weights=[30, 1 if node != "broker-3" else 0])[0]
            row: dict[str, Any] = {"ts": ts, "node": node, "file_id": int(node[-1]), "block": 0, "mid": mid}
            if kind == "started":
                rows.append({**row, "kind": "broker.started", "broker_id": int(node[-1])})
                continue
            role = rng.choices(["leader", "follower", "deleted", "stopped"], weights=[8, 8, 1, 1])[0]
            rows.append(
                {
                    **row,
                    "kind": "partition.role_changed",
                    "topic": "t",
                    "partition": rng.randrange(partitions),
                    "role": role,
                    "leader": 1,
                    "leader_epoch": _epoch(rng, partitions, mid),
                }
            )
    events = _events(spark, rows)

    found = invariants.leader_epoch_regression(events).collect()
    got = {(r["records"][0]["mid"], r["records"][1]["mid"]) for r in found}

    expected: set[tuple[int, int]] = set()
    lower = same_epoch = allowed_after_restart = 0
    by_position = sorted(rows, key=lambda r: (r["ts"], r["file_id"], r["block"], r["mid"]))
    starts_before: dict[str, int] = {}  # incarnation: starts at or before the current record
    history: dict[tuple[str, int], tuple[int, list[tuple[int, int, int, int]]]] = {}
    for r in by_position:
        if r["kind"] == "broker.started":
            starts_before[r["node"]] = starts_before.get(r["node"], 0) + 1
            continue
        if r["role"] not in ("leader", "follower", "deleted"):
            continue
        key = (r["node"], r["partition"])
        generation, earlier = history.get(key, (0, []))
        if r["role"] == "deleted":
            history[key] = (generation + 1, earlier)
            continue
        incarnation = starts_before.get(r["node"], 0)
        same = [e for e in earlier if e[0] == generation]
        if same:
            prev = max(same)
            if r["leader_epoch"] < prev[1] or (r["leader_epoch"] == prev[1] and incarnation == prev[2]):
                expected.add((prev[3], r["mid"]))
                lower += r["leader_epoch"] < prev[1]
                same_epoch += r["leader_epoch"] == prev[1]
            elif r["leader_epoch"] == prev[1]:
                allowed_after_restart += 1
        history[key] = (generation, [*earlier, (generation, r["leader_epoch"], incarnation, r["mid"])])
    assert got == expected
    if partitions == 6:
        # The data holds both kinds of violation and re-applications a restart allows.
        assert lower > 10 and same_epoch > 10 and allowed_after_restart > 3, (lower, same_epoch, allowed_after_restart)
    else:
        # Violations, and many keys without any.
        keys = {(r["node"], r["partition"]) for r in rows if r["kind"] == "partition.role_changed"}
        violating_mids = {later for _, later in expected}
        violating = {(r["node"], r["partition"]) for r in rows if r["mid"] in violating_mids}
        assert lower > 10 and len(keys - violating) > 100, (lower, len(keys), len(violating))


def _epoch(rng: random.Random, partitions: int, mid: int) -> int:
    """Few partitions: any of a few epochs. Many: increasing (the record's id) but for a few
    records, so that most keys never regress. Rarely offset out of int32's range either way."""
    offset = rng.choice([0] * 30 + [-9, 1 << 33, 1 << 45])
    if partitions == 6:
        return rng.randint(0, 6) + offset
    return (mid if rng.random() > 0.03 else rng.randint(0, mid)) + offset


def _events(spark: Any, rows: list[dict[str, Any]]) -> Any:
    """Rows as the events table reads: every field of the schema, cluster and node columns derived."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from controller_svc.analytics import ingest, schema

    fields = [f for f in ingest.events_schema().fields if f.name in {*dict(schema.FIELDS), "file_id", "block", "mid"}]
    frame = spark.createDataFrame([tuple(r.get(f.name) for f in fields) for r in rows], T.StructType(fields))
    return (
        frame.withColumn("kind_group", F.col("kind"))
        .withColumn("cluster", F.lit("default"))
        .withColumn("node_role", F.substring_index(F.col("node"), "-", 1))
        .withColumn("node_id", F.substring_index(F.col("node"), "-", -1).cast("long"))
    )
