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


def _malformed(number: int, shape: str) -> str:
    """A malformed line. `text`: one no JSON reader reads, so the file is read line by line;
    `json`: lines that begin with "{" (the file goes to Spark's JSON reader), alternately one
    that fails to parse and one that parses but lacks fields (its text is read again later)."""
    if shape == "text":
        return f"malformed line {number}"
    if number % 2:
        return f"{{malformed line {number}"
    return json.dumps({"ts": 1000 + number, "node": "broker-1", "kind": "partition.role_changed"})


def _log(directory: pathlib.Path, shape: str) -> pathlib.Path:
    directory.mkdir(parents=True)
    lines = []
    for number in range(1, LINES + 1):
        if number in MALFORMED_AT:
            lines.append(_malformed(number, shape))
        else:
            lines.append(json.dumps({"ts": 1000 + number, "node": "broker-1", "kind": "node.alive"}))
    (directory / "broker-1.state-change.jsonl").write_text("\n".join(lines) + "\n")
    return directory


@pytest.mark.parametrize("shape", ["text", "json"])
def test_line_numbers_are_exact_across_file_splits(spark: Any, tmp_path: pathlib.Path, shape: str) -> None:
    from pyspark.sql import functions as F

    from controller_svc.analytics import census, ingest, job

    logs = _log(tmp_path / "logs", shape)
    file = f"file:{logs / 'broker-1.state-change.jsonl'}"
    assert (census.irregularity(file) is None) == (shape == "json")
    spark.conf.set(SPLIT_CONF, str(TINY_SPLIT))
    try:
        outcome = job.analyze(spark, [str(logs)], str(tmp_path / "out"))
    finally:
        spark.conf.unset(SPLIT_CONF)
    events = ingest.events_table(spark, str(tmp_path / "out"))
    size = (logs / "broker-1.state-change.jsonl").stat().st_size
    # The file really was read in pieces: one block per split.
    assert events.select("block").distinct().count() == -(-size // TINY_SPLIT) > 5
    bad = spark.read.parquet(str(tmp_path / "out" / "bad_records")).orderBy("line").collect()
    assert [row["line"] for row in bad] == list(MALFORMED_AT)
    assert [row["value"] for row in bad] == [_malformed(n, shape) for n in MALFORMED_AT]
    assert outcome.summary["events"] == LINES - len(MALFORMED_AT)
    assert events.filter(F.col("status") == "ok").count() == LINES - len(MALFORMED_AT)
