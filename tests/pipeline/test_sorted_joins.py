"""The analytics' sort-based lookups against the plain joins they replaced, on seeded random data.

`last_record_before`, `first_loss_in_tenure` and the incarnation lookup of
`leader_epoch_regression` exist for speed (a join of every query with every record of its node
was quadratic at 10M events); each must give exactly what the plain join gives, ties within a
millisecond, empty sides and spans over many time buckets included.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

pytestmark = pytest.mark.pipeline

SEEDS = (1, 2, 3)
POS = "struct<ts: bigint, file: string, block: bigint, mid: bigint>"


def _pos(ts: int, file: str, mid: int) -> tuple[int, str, int, int]:
    return (ts, file, 0, mid)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("inclusive", [False, True])
def test_last_record_before_is_the_latest_earlier_record(spark: Any, seed: int, inclusive: bool) -> None:
    from pyspark.sql import functions as F

    from controller_svc.analytics.timelines import last_record_before

    rng = random.Random(seed)
    records = [("c", rng.choice("abc"), rng.randint(0, 60)) for _ in range(300)]
    queries = [("c", rng.choice("abcd"), q, rng.randint(-5, 70)) for q in range(80)]
    record_frame = spark.createDataFrame(records, "cluster string, k string, ts bigint")
    query_frame = spark.createDataFrame(queries, "cluster string, k string, qid bigint, at bigint")

    found = last_record_before(query_frame, record_frame, ["cluster", "k"], at="at", inclusive=inclusive, alias="last")
    got = {row["qid"]: row["last"] for row in found.collect()}

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


@pytest.mark.parametrize("seed", SEEDS)
def test_first_loss_in_tenure_is_the_earliest_loss_while_leading(spark: Any, seed: int) -> None:
    from pyspark.sql import functions as F

    from controller_svc.analytics.timelines import first_loss_in_tenure

    rng = random.Random(seed)
    times = rng.sample(range(1, 5000), 700)  # distinct record times; mids make positions unique
    led: list[tuple[Any, ...]] = []
    for partition in range(12):
        starts = sorted(times.pop() for _ in range(rng.randint(1, 8)))
        for i, start in enumerate(starts):
            until = _pos(starts[i + 1], "controller-1", 10 * starts[i + 1]) if i + 1 < len(starts) else None
            led.append(("c", "t", partition, rng.randint(1, 4), i, _pos(start, "controller-1", 10 * start), until))
    losses = []
    for _ in range(60):
        ts = times.pop()
        losses.append(("c", _pos(ts, "controller-1", 10 * ts), ts, rng.randint(1, 4), "broker_deregistered", ts - 3))
    # Losses in the millisecond a leadership starts or ends, just before or just after its record.
    for _ in range(30):
        tenure = rng.choice(led)
        bound = rng.choice([tenure[5], tenure[6] or tenure[5]])
        mid = bound[3] + rng.choice([-1, 1])
        losses.append(("c", _pos(bound[0], "controller-1", mid), bound[0], tenure[3], "broker_bounced", bound[0] - 1))
    led_frame = spark.createDataFrame(
        led,
        f"cluster string, topic string, partition bigint, broker bigint, leader_epoch bigint, "
        f"from_pos {POS}, until_pos {POS}",
    )
    loss_frame = spark.createDataFrame(
        losses, f"cluster string, pos {POS}, ts bigint, broker bigint, cause string, alive_ts bigint"
    )

    got = {
        (r["partition"], r["leader_epoch"]): (tuple(r["pos"]), r["ts"], r["alive_ts"])
        for r in first_loss_in_tenure(led_frame, loss_frame).collect()
    }

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
def test_incarnation_counts_the_starts_before_each_record(spark: Any, seed: int) -> None:
    from pyspark.sql import functions as F

    from controller_svc.analytics.invariants import _with_incarnation

    rng = random.Random(seed)
    # Wide spans (many time buckets), starts and records sharing milliseconds, a node never started.
    rows, starts, mid = [], [], 0
    for node in ("broker-1", "broker-2", "broker-3"):
        for _ in range(150):
            mid += 1
            ts = rng.choice([rng.randint(0, 2_000_000), rng.randint(0, 50)])
            rows.append(("c", node, ts, f"{node}.log", 0, mid))
        if node == "broker-3":
            continue
        for _ in range(rng.randint(3, 6)):
            mid += 1
            ts = rng.choice([rng.randint(0, 2_000_000), rng.choice(rows)[2]])
            starts.append(("c", node, ts, f"{node}.log", 0, mid))
    schema = "cluster string, node string, ts bigint, file string, block bigint, mid bigint"
    row_frame = spark.createDataFrame(rows, schema)
    start_frame = spark.createDataFrame(starts, schema)

    got = {r["mid"]: r["incarnation"] for r in _with_incarnation(row_frame, start_frame).collect()}

    position = F.struct("ts", "file", "block", "mid")
    plain = (
        row_frame.select("cluster", "node", "mid", position.alias("pos"))
        .join(start_frame.select("cluster", "node", position.alias("started")), ["cluster", "node"], "left")
        .groupBy("mid")
        .agg(F.sum(F.when(F.col("started") <= F.col("pos"), 1).otherwise(0)).alias("incarnation"))
    )
    expected = {r["mid"]: r["incarnation"] for r in plain.collect()}
    assert got == expected
    assert len(set(expected.values())) > 2

    assert {r["incarnation"] for r in _with_incarnation(row_frame, start_frame.limit(0)).collect()} == {0}
