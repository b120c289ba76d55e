"""Line numbers stay exact when a log file is read in many splits (one per task, as a large
file is: Spark cuts files at spark.sql.files.maxPartitionBytes, 128 MB by default)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

pytestmark = pytest.mark.pipeline

LINES = 3000
MALFORMED_AT = (1, 2, 777, 1500, 1501, 2999, 3000)  # 1-based, the first and last lines included
TINY_SPLIT = 16 << 10
SPLIT_CONF = "spark.sql.files.maxPartitionBytes"


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


def test_line_numbers_are_exact_across_file_splits(spark: Any, tmp_path: pathlib.Path) -> None:
    from pyspark.sql import functions as F

    from controller_svc.analytics import job

    logs = _log(tmp_path / "logs")
    spark.conf.set(SPLIT_CONF, str(TINY_SPLIT))
    try:
        outcome = job.analyze(spark, [str(logs)], str(tmp_path / "out"))
    finally:
        spark.conf.unset(SPLIT_CONF)
    events = spark.read.parquet(str(tmp_path / "out" / "events"))
    size = (logs / "broker-1.state-change.jsonl").stat().st_size
    # The file really was read in pieces: one block per split.
    assert events.select("block").distinct().count() == -(-size // TINY_SPLIT) > 5
    bad = spark.read.parquet(str(tmp_path / "out" / "bad_records")).orderBy("line").collect()
    assert [row["line"] for row in bad] == list(MALFORMED_AT)
    assert [row["value"] for row in bad] == [f"malformed line {n}" for n in MALFORMED_AT]
    assert outcome.summary["events"] == LINES - len(MALFORMED_AT)
    assert events.filter(F.col("status") == "ok").count() == LINES - len(MALFORMED_AT)
