"""A history with nothing malformed gets its empty bad_records table, and its figures, without a
Spark query: the same table (columns, names and types) and summary as Spark's queries give with
the job's scans off; a history with malformed lines still has Spark find and resolve them."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from tests.pipeline import runs, scenarios

pytestmark = pytest.mark.pipeline

RUN_FIELDS = ("timings_s", "step_spans_s", "elapsed_s", "tables", "report")


def _table(spark: Any, out: pathlib.Path) -> tuple[list[Any], list[tuple[str, str]]]:
    read = spark.read.parquet(str(out / "bad_records"))
    return read.collect(), [(f.name, f.dataType.simpleString()) for f in read.schema]


def test_a_history_without_malformed_lines_gets_its_bad_records_without_spark(
    spark: Any, tmp_path: pathlib.Path
) -> None:
    from controller_svc.analytics import job

    clean, malformed = tmp_path / "clean", tmp_path / "malformed"
    scenarios.clean_failover(clean)
    scenarios.malformed(malformed)
    written: list[str] = []
    real_write = job._write

    def recording(build: Any, out: str, name: str, clock: Any) -> Any:
        written.append(name)
        return real_write(build, out, name, clock)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(job, "_write", recording)
        by_files = job.analyze(spark, [str(clean)], str(tmp_path / "clean-files"))
        assert "bad_records" not in written
        job.analyze(spark, [str(malformed)], str(tmp_path / "malformed-files"))
        assert "bad_records" in written
    by_spark = runs.analyze(spark, clean, tmp_path / "clean-spark", {job.SCAN_TIMELINES_CONF: False})
    rows, columns = _table(spark, tmp_path / "clean-files")
    spark_rows, spark_columns = _table(spark, tmp_path / "clean-spark")
    assert rows == spark_rows == [] and columns == spark_columns
    assert {k: v for k, v in by_files.summary.items() if k not in RUN_FIELDS} == {
        k: v for k, v in by_spark.summary.items() if k not in RUN_FIELDS
    }
    assert "bad_records" in by_files.summary["timings_s"]
    # The malformed history's lines were found and resolved as before.
    assert len(_table(spark, tmp_path / "malformed-files")[0]) == 6
