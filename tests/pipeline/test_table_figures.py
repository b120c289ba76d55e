"""The offline figures read from the table's files (table_figures.py) are what Spark's three
queries give (job._offline_availability, job._offline_series, the longest intervals): on random
intervals of two clusters with open ones, null detections, starts and ends in one millisecond and
starts before the plot's first time; and Spark's percentile_approx where its summary is exact."""

from __future__ import annotations

import itertools
import pathlib
import random
from typing import Any

import pytest

pytestmark = pytest.mark.pipeline

OFFLINE_DDL = (
    "cluster string, topic string, partition bigint, start_ts bigint, end_ts bigint, duration_ms bigint, "
    "detected_ts bigint, detection_ms bigint, cause string, end_cause string, lost_leader_epoch bigint, "
    "new_leader bigint, new_leader_epoch bigint"
)


def _intervals(seed: int, count: int) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    rows: list[tuple[Any, ...]] = []
    starts = rng.sample(range(900, 20_000), count)  # distinct starts: the longest's order is total
    for start in starts:
        cluster = rng.choice(["a", "b"])
        # Ends in few milliseconds, so that starts and ends share them.
        end = None if rng.random() < 0.1 else start + rng.choice([0, 5, 50, 500, rng.randint(1, 3000)])
        detected = start + rng.randint(0, 40)
        detection = None if rng.random() < 0.2 else detected - start
        rows.append(
            (
                cluster,
                rng.choice(["t1", "t2"]),
                rng.randint(0, 30),
                start,
                end,
                None if end is None else end - start,
                detected,
                detection,
                "broker_deregistered",
                None if end is None else "leader_applied",
                1,
                None if end is None else 2,
                None if end is None else 2,
            )
        )
    return rows


def test_the_figures_read_from_the_files_are_the_queries(spark: Any, tmp_path: pathlib.Path) -> None:
    from controller_svc.analytics import job, table_figures

    rows = _intervals(1, 3000)
    frame = spark.createDataFrame(rows, OFFLINE_DDL)
    frame.write.parquet(str(tmp_path / "offline"))
    table = table_figures.read(str(tmp_path / "offline"))
    # The plot starts after some intervals did; cluster c has none.
    per_cluster = {
        "a": {"first_ts": 1000, "last_ts": 25_000},
        "b": {"first_ts": 950, "last_ts": 9_000},
        "c": {"first_ts": 0, "last_ts": 10},
    }

    by_queries = job._offline_availability(frame)
    assert table_figures.offline_availability(table) == by_queries
    assert set(by_queries) == {"a", "b"}
    assert all(entry["still_offline"] > 0 and entry["p99_offline_ms"] is not None for entry in by_queries.values())

    series = job._offline_series(spark, frame, per_cluster)
    assert table_figures.offline_series(table, job._plot_bounds(per_cluster)) == series
    assert set(series) == {"a", "b"} and len(series["a"]) > 50
    # Some bucket's peak was above both its start and its end level.
    assert any(
        bucket["peak"] > max(bucket["last"], previous["last"])
        for entries in series.values()
        for previous, bucket in itertools.pairwise(entries)
    )

    longest = job._rows(frame.orderBy(job.F.desc_nulls_first("duration_ms"), "start_ts"), job.SAMPLE_INTERVALS)
    assert table_figures.longest_offline(table, job.SAMPLE_INTERVALS) == longest
    assert longest[0]["duration_ms"] is None

    # No interval at all: no figures, as from the queries.
    empty = spark.createDataFrame([], OFFLINE_DDL)
    empty.write.parquet(str(tmp_path / "empty"))
    nothing = table_figures.read(str(tmp_path / "empty"))
    assert table_figures.offline_availability(nothing) == job._offline_availability(empty) == {}
    assert table_figures.offline_series(nothing, job._plot_bounds(per_cluster)) == {}
    assert table_figures.longest_offline(nothing, 5) == []


@pytest.mark.parametrize("count", [1, 2, 7, 1000, 9000])
def test_percentiles_are_sparks_exact_summary(spark: Any, count: int) -> None:
    """Up to about 10,000 values Spark's percentile_approx keeps every value: the same answers,
    the quantiles within its relative error of 0 and 1 included."""
    import numpy as np
    from pyspark.sql import functions as F

    from controller_svc.analytics import table_figures

    rng = random.Random(count)
    values = [rng.randint(-50, 5000) for _ in range(count)]
    quantiles = [0.00005, 0.01, 0.25, 0.5, 0.9, 0.99, 0.99995]
    frame = spark.createDataFrame([(v,) for v in values], "v bigint")
    by_spark = frame.agg(F.percentile_approx("v", quantiles)).first()[0]
    assert [table_figures.percentile(np.array(values, dtype=np.int64), q) for q in quantiles] == by_spark
    assert table_figures.percentile(np.array([], dtype=np.int64), 0.5) is None


def test_the_failover_figures_read_from_the_files_are_the_queries(spark: Any, tmp_path: pathlib.Path) -> None:
    """Failovers of two clusters, some never converged (no total), negative or missing
    detection and election times (a clock step, an old log), against job._failover_availability
    and the report's listing query."""
    from controller_svc.analytics import job, table_figures

    rng = random.Random(3)
    rows = []
    for elected in rng.sample(range(1000, 90_000), 400):
        detection = rng.choice([None, -5, 0, rng.randint(1, 6000)])
        election = rng.choice([None, -1, rng.randint(0, 300)])
        total = None if rng.random() < 0.15 else rng.randint(10, 9000)
        rows.append((rng.choice(["a", "b"]), elected, detection, election, total, 2.5, [1] if total is None else []))
    frame = spark.createDataFrame(
        rows,
        "cluster string, elected_ts bigint, detection_ms bigint, election_ms bigint, total_ms bigint, "
        "load_ms double, brokers_not_applied array<bigint>",
    )
    frame.write.parquet(str(tmp_path / "incidents"))
    table = table_figures.read(str(tmp_path / "incidents"))

    by_queries = job._failover_availability(frame)
    assert table_figures.failover_availability(table) == by_queries
    assert set(by_queries) == {"a", "b"} and all(entry["controller_gap_ms"] > 0 for entry in by_queries.values())
    listed = job._rows(frame.orderBy("cluster", "elected_ts").drop("brokers_not_applied"), 50)
    assert (
        table_figures.first_rows(table.drop_columns(["brokers_not_applied"]), ["cluster", "elected_ts"], 50) == listed
    )
    assert len(listed) == 50 and listed[0]["cluster"] == "a"
