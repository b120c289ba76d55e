"""How the ingest cuts log files into tasks, and line numbers that stay exact across the cuts."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

pytestmark = pytest.mark.pipeline

LINES = 3000
MALFORMED_AT = (1, 2, 777, 1500, 1501, 2999, 3000)  # 1-based, the first and last lines included
TINY_SPLIT = 16 << 10


def _log(directory: pathlib.Path) -> pathlib.Path:
    directory.mkdir(parents=True)
    lines = []
    for number in range(1, LINES + 1):
        if number in MALFORMED_AT:
            lines.append(f"malformed line {number}")
        else:
            lines.append(json.dumps({"ts": 1000 + number, "node": "broker-1", "kind": "node.alive"}))
    (directory / "broker-1.state-change.jsonl").write_text("\n".join(lines) + "\n")
    return directory


def test_split_bytes() -> None:
    from controller_svc.analytics.ingest import MAX_SPLIT_BYTES, MIN_SPLIT_BYTES, TASKS_PER_CORE, split_bytes

    assert split_bytes(0, 2) == MIN_SPLIT_BYTES
    assert split_bytes(1000, 0) == MIN_SPLIT_BYTES
    # 10M events are ~1.6 GB: ~50 MB per task, 32 tasks on 2 cores.
    assert split_bytes(1_650_000_000, 2) == -(-1_650_000_000 // (2 * TASKS_PER_CORE))
    assert split_bytes(100 << 30, 2) == MAX_SPLIT_BYTES
    assert split_bytes(100 << 30, 10_000) == MIN_SPLIT_BYTES


def test_line_numbers_are_exact_across_file_splits(spark: Any, tmp_path: pathlib.Path) -> None:
    from pyspark.sql import functions as F

    from controller_svc.analytics import ingest, job

    logs = _log(tmp_path / "logs")
    spark.conf.set(ingest.SPLIT_CONF, str(TINY_SPLIT))
    try:
        outcome = job.analyze(spark, [str(logs)], str(tmp_path / "out"))
        # The setting was the operator's: the ingest kept it.
        assert spark.conf.get(ingest.SPLIT_CONF, None) == str(TINY_SPLIT)
    finally:
        spark.conf.unset(ingest.SPLIT_CONF)
    events = spark.read.parquet(str(tmp_path / "out" / "events"))
    size = (logs / "broker-1.state-change.jsonl").stat().st_size
    # The file really was read in pieces: one block per split.
    assert events.select("block").distinct().count() == -(-size // TINY_SPLIT) > 5
    bad = spark.read.parquet(str(tmp_path / "out" / "bad_records")).orderBy("line").collect()
    assert [row["line"] for row in bad] == list(MALFORMED_AT)
    assert [row["value"] for row in bad] == [f"malformed line {n}" for n in MALFORMED_AT]
    assert outcome.summary["events"] == LINES - len(MALFORMED_AT)
    assert events.filter(F.col("status") == "ok").count() == LINES - len(MALFORMED_AT)


def test_the_ingest_sizes_its_splits_and_leaves_the_setting_unset(spark: Any, tmp_path: pathlib.Path) -> None:
    from controller_svc.analytics import ingest

    logs = _log(tmp_path / "logs")
    assert spark.conf.get(ingest.SPLIT_CONF, None) is None
    ingest.ingest(spark, [str(logs)], str(tmp_path / "out"))
    assert spark.conf.get(ingest.SPLIT_CONF, None) is None
    # A small file: one split of at least MIN_SPLIT_BYTES holds it.
    assert spark.read.parquet(str(tmp_path / "out" / "events")).select("block").distinct().count() == 1
