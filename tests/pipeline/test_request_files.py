"""The request latency table and histogram computed from the events table's files
(request_files.py) are Spark's (timelines.request_latency and latency_histogram), row for row
and column for column, on a hand-made history and on random ones of two clusters with values
at and around powers of two, nulls and errors, and groups of up to a few thousand requests
(where Spark's percentile_approx is exact); and the whole job uses them by default and falls
back to Spark's queries when they fail."""

from __future__ import annotations

import json
import logging
import pathlib
import random
from typing import Any

import pytest

from controller_svc.analytics import schema
from controller_svc.analytics.synthetic import HistoryWriter
from tests.pipeline import scenarios

pytestmark = pytest.mark.pipeline

# Values that meet the histogram's bucket edges: powers of two, just either side of them, below
# its least bucket and above its greatest, zero and below 1e-9.
EDGES = (0.0, 1e-10, 1e-9, 0.0625, 0.1, 0.5, 0.999, 1.0, 1.001, 2.0, 3.0, 4.0, 1023.9, 1024.0, 65536.0, 70000.0, 5e5)


def _random_requests(directory: pathlib.Path, seed: int) -> None:
    """Two clusters, `east` and `west`, whose controllers complete requests to brokers 1-3 (one
    of them thousands of times for one API), some failed, some without `partitions`."""
    rng = random.Random(seed)
    for name in ("east", "west"):
        with HistoryWriter(directory / name) as out:
            for at in range(2500 if name == "east" else 600):
                busy = name == "east" and at % 2 == 0
                fields: dict[str, Any] = {
                    "broker": 1 if busy else rng.randrange(1, 4),
                    "api": "UpdateMetadata" if busy else rng.choice(schema.CONTROL_APIS[:3]),
                    "correlation_id": at,
                    "controller_epoch": 1,
                    "queue_ms": rng.choice(EDGES) if rng.random() < 0.3 else round(rng.expovariate(0.2), 3),
                    "rtt_ms": rng.choice(EDGES) if rng.random() < 0.3 else rng.uniform(0, 300),
                    "error": 0 if rng.random() < 0.9 else rng.choice((11, 6, -1)),
                }
                if rng.random() < 0.8:
                    fields["partitions"] = rng.randrange(100)
                out.record(1_000 + at, f"controller-{rng.randrange(1, 3)}", "request.completed", **fields)


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True))


def _both(spark: Any, logs: pathlib.Path, out: pathlib.Path, by_directory: bool) -> dict[str, Any]:
    from controller_svc.analytics import ingest, request_files, timelines
    from controller_svc.analytics.events_files import events_files
    from controller_svc.analytics.ingest import ClusterBy

    cluster_by = ClusterBy("dir" if by_directory else "none")
    ingest.ingest(spark, [str(logs)], str(out))
    file_rows = ingest.file_rows(spark, str(out))
    events = ingest.events(spark, str(out), cluster_by, spark.createDataFrame(file_rows, ingest.FILES_DDL))
    by_spark = timelines.request_latency(events)
    table, histogram = request_files.write(events_files(str(out), cluster_by, file_rows), str(out / "latency"))
    read = spark.read.parquet(str(out / "latency"))
    # The same columns, named and typed as Spark's, in the same order.
    assert [(f.name, f.dataType.simpleString()) for f in read.schema] == [
        (f.name, f.dataType.simpleString()) for f in by_spark.schema
    ]
    assert (out / "latency" / request_files.SUCCESS_MARKER).exists()
    files_rows = [row.asDict() for row in read.collect()]
    # Written in the order the job's figures list them.
    assert files_rows == sorted(files_rows, key=lambda row: (row["cluster"], row["broker"], row["api"]))
    assert table.to_pylist() == files_rows
    return {
        "spark": _sorted([row.asDict() for row in by_spark.collect()]),
        "files": _sorted(files_rows),
        "spark_histogram": _sorted([row.asDict() for row in timelines.latency_histogram(events).collect()]),
        "files_histogram": _sorted(histogram),
    }


def test_the_files_give_sparks_latency_for_a_hand_made_history(spark: Any, tmp_path: pathlib.Path) -> None:
    scenarios.clean_failover(tmp_path / "logs")
    found = _both(spark, tmp_path / "logs", tmp_path / "out", by_directory=False)
    assert found["files"] == found["spark"] and found["files"]
    assert found["files_histogram"] == found["spark_histogram"] and found["files_histogram"]


def test_the_files_give_sparks_empty_latency_for_a_history_without_requests(spark: Any, tmp_path: pathlib.Path) -> None:
    scenarios.violations(tmp_path / "logs")
    found = _both(spark, tmp_path / "logs", tmp_path / "out", by_directory=False)
    assert found["files"] == found["spark"] == []
    assert found["files_histogram"] == found["spark_histogram"] == []


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "spark-json"])
def test_the_files_give_sparks_latency_for_random_requests(spark: Any, tmp_path: pathlib.Path, fast_path: bool) -> None:
    from controller_svc.analytics import ingest

    spark.conf.set(ingest.FAST_PATH_CONF, "true" if fast_path else "false")
    try:
        found = _both(spark, _history(tmp_path), tmp_path / "out", by_directory=True)
    finally:
        spark.conf.unset(ingest.FAST_PATH_CONF)
    assert found["files"] == found["spark"]
    assert found["files_histogram"] == found["spark_histogram"]
    # Both clusters, a group of over a thousand requests, errors, and every bucket from the
    # least to the greatest.
    assert {row["cluster"].rsplit("/", 1)[-1] for row in found["files"]} == {"east", "west"}
    assert max(row["requests"] for row in found["files"]) > 1000
    assert sum(row["errors"] for row in found["files"]) > 0
    buckets = {row["bucket"] for row in found["files_histogram"]}
    assert {-4, 0, 1, 2, 10, 16} <= buckets


def _history(tmp_path: pathlib.Path) -> pathlib.Path:
    logs = tmp_path / "logs"
    _random_requests(logs, 7)
    return logs


def _latency_table(spark: Any, out: pathlib.Path) -> list[dict[str, Any]]:
    return _sorted([row.asDict() for row in spark.read.parquet(str(out / "request_latency")).collect()])


def test_the_job_computes_the_latency_from_the_files_and_falls_back_to_spark(
    spark: Any, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Spark's queries made to raise: the job computes the table and the figures from the
    files, the same table as Spark's queries write (the files' path patched out), and the
    report's figures from them; a failure is logged and Spark computes them."""
    from controller_svc.analytics import job, report, request_files, timelines

    logs = _history(tmp_path)
    real_latency, real_histogram = timelines.request_latency, timelines.latency_histogram
    rendered: list[Any] = []
    real_render = report.render

    def recording(data: Any) -> str:
        rendered.append(data)
        return real_render(data)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Spark's latency queries ran")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report, "render", recording)
        patch.setattr(timelines, "request_latency", refuse)
        patch.setattr(timelines, "latency_histogram", refuse)
        job.analyze(spark, [str(logs)], str(tmp_path / "files"))
        patch.setattr(job, "_requests_from_files", lambda *args: None)
        patch.setattr(timelines, "request_latency", real_latency)
        patch.setattr(timelines, "latency_histogram", real_histogram)
        job.analyze(spark, [str(logs)], str(tmp_path / "spark"))
    assert _latency_table(spark, tmp_path / "files") == _latency_table(spark, tmp_path / "spark")
    by_files, by_spark = rendered
    assert by_files.latency == by_spark.latency and by_files.latency
    assert _sorted(by_files.latency_histogram) == _sorted(by_spark.latency_histogram)

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise OSError("disk gone")

    caplog.set_level(logging.WARNING, logger="analytics")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(request_files, "write", fail)
        job.analyze(spark, [str(logs)], str(tmp_path / "fallback"))
    assert "the request latency could not be computed from the files; Spark computes it" in caplog.text
    assert _latency_table(spark, tmp_path / "fallback") == _latency_table(spark, tmp_path / "spark")
