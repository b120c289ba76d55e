"""Small tables the driver writes with Arrow when OUTDIR is local, instead of a Spark job each: a
history with nothing malformed gets its empty bad_records table, and its figures, with the same
table (columns, names and types) and summary as Spark's queries give with the job's scans off (a
history with malformed lines still has Spark find and resolve them); the files table is the one
Spark's writer wrote."""

from __future__ import annotations

import os
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


def test_the_files_table_is_written_in_the_driver_as_sparks_writer_wrote_it(spark: Any, tmp_path: pathlib.Path) -> None:
    from controller_svc.analytics import ingest, partition_tasks

    logs, out = tmp_path / "logs", tmp_path / "out"
    scenarios.clean_failover(logs)
    ingest.ingest(spark, [str(logs)], str(out))
    # Written by partition_tasks (its file name), not by a Spark job (part-NNNNN-<uuid>...).
    assert sorted(os.listdir(out / "files")) == [partition_tasks.SUCCESS_MARKER, "part-00000.parquet"]
    names = spark.read.text(ingest.list_inputs(spark, [str(logs)])).inputFiles()
    assert len(names) > 1
    ingest.file_table(spark, names).coalesce(1).write.parquet(str(tmp_path / "by-spark"))
    by_driver, by_spark = (spark.read.parquet(str(path)) for path in (out / "files", tmp_path / "by-spark"))
    assert by_driver.schema.simpleString() == by_spark.schema.simpleString() == "struct<file_id:int,file:string>"
    assert sorted(by_driver.collect()) == sorted(by_spark.collect())
    assert ingest.file_rows(spark, str(out)) == sorted((row["file_id"], row["file"]) for row in by_spark.collect())
