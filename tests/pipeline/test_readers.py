"""The two ways the ingest reads a log file (census.py) give the same table: Spark's JSON reader
for files of one JSON object per line, the text reader with `from_json` for any other file."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from tests.pipeline import scenarios

pytestmark = pytest.mark.pipeline

# Every line begins with "{": the JSON reader's kind of file. (line, malformed: why or None):
# the malformed scenario's lines of that kind, and more.
LINES: list[tuple[bytes, str | None]] = [
    *[(line, why) for line, why in scenarios.MALFORMED if line.startswith(b"{")],
    (b"{not json at all", "not a JSON object"),
    (b'{"ts":1001,"node":"broker-1","kind":"some.future_kind","anything":[1,{"x":2}]}', None),
    (b'{"ts":0,"node":"broker-1","kind":"node.alive"}', "ts is not a positive"),
    (b'{"ts":1005,"node":"br\\u00f8ker-\xe2\x9c\x93 \\"q\\"","kind":"node.alive"}', None),
    (b'{"ts":1006.5,"node":"broker-1","kind":"node.alive"}', "ts missing or not an integer"),
    (b'{"ts":1007,"node":"broker-1","kind":"node.alive","broker_id":"one"}', None),  # optional field mistyped
    (b'{"ts":1008,"node":"broker-1","kind":"node.alive"} trailing', None),
    (b'{"ts":99999999999999999999,"node":"broker-1","kind":"node.alive"}', "ts missing or not an integer"),
    (b'{"ts":1009,"node":"broker-1","kind":"node.alive","ts":1010}', None),  # a repeated key
    (b'{"ts":1011,"node":null,"kind":"node.alive"}', "node missing"),
    # A mistyped array element is null in both readers, and the record stays usable.
    (
        b'{"ts":1012,"node":"broker-1","kind":"broker.change","new":[1],"dead":[2,"x"],"bounced":[],'
        b'"controller_epoch":1}',
        None,
    ),
    (b'{"ts":1012,"node":"broker-1","kind":"broker.change","new":[1],"dead":[2],"bounced":[]', "not a JSON"),
    (b"{}", "not a JSON object"),
    (b'{"ts":1013,"node":"broker-1","kind":"broker.shutdown","broker_id":1,"broker_epoch":7}', None),
]


def _write(directory: pathlib.Path, name: str, lines: list[bytes]) -> pathlib.Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_the_json_reader_and_the_line_reader_agree_line_for_line(spark: Any, tmp_path: pathlib.Path) -> None:
    from controller_svc.analytics import census, ingest, schema

    path = _write(tmp_path / "logs", "broker-1.state-change.jsonl", [line for line, _ in LINES])
    files = ingest.list_inputs(spark, [str(tmp_path / "logs")])
    assert census.plan(files).json_reader == tuple(files)
    columns = ["file_id", "block", "mid", "status", "kind_group", *[name for name, _ in schema.FIELDS]]
    by_json = ingest.json_reader_records(spark, files).orderBy("mid").collect()
    by_text = ingest.parse(ingest.read_lines(spark, files)).orderBy("mid").collect()
    assert len(by_json) == len(by_text) == len(LINES)
    for (line, why), fast, exact in zip(LINES, by_json, by_text, strict=True):
        assert [fast[c] for c in columns] == [exact[c] for c in columns], line
        assert fast["status"] == ("ok" if why is None else "bad"), line
        # The text of a malformed line: kept by the line reader; the JSON reader keeps none
        # (bad_records reads it again, the next test).
        assert exact["value"] == (None if why is None else line.decode())
        assert fast["value"] is None
    assert path.stat().st_size > 0


def test_malformed_lines_keep_file_line_and_text_whichever_reader_read_them(spark: Any, tmp_path: pathlib.Path) -> None:
    from pyspark.sql import functions as F

    from controller_svc.analytics import ingest, job

    logs = tmp_path / "lo gs%41#1"  # a path Spark's file URI escapes
    regular = _write(logs, "broker-1.state-change.jsonl", [line for line, _ in LINES])
    # The same lines after a blank one: this file is read line by line.
    irregular = _write(logs, "broker-2.state-change.jsonl", [b"", *[line for line, _ in LINES]])
    outcome = job.analyze(spark, [str(logs)], str(tmp_path / "out"))
    bad = spark.read.parquet(str(tmp_path / "out" / "bad_records")).collect()
    expected_regular = [(n + 1, line.decode(), why) for n, (line, why) in enumerate(LINES) if why is not None]
    expected_irregular = [(1, "", "empty line")] + [(n + 1, text, why) for n, text, why in expected_regular]
    for path, expected in ((regular, expected_regular), (irregular, expected_irregular)):
        found = sorted((r["line"], r["value"], r["reason"]) for r in bad if r["file"].endswith(path.name))
        assert [(line, text) for line, text, _ in found] == [(line, text) for line, text, _ in expected]
        for (_, _, reason), (_, _, why) in zip(found, expected, strict=True):
            assert why in reason
    assert outcome.summary["malformed"] == len(expected_regular) + len(expected_irregular)
    assert outcome.summary["events"] == 2 * sum(why is None for _, why in LINES)
    # The regular file really went through the JSON reader: the events table lacks the text of
    # its malformed lines (bad_records read them again); the other file's has all.
    events = ingest.events_table(spark, str(tmp_path / "out")).filter(F.col("status") == "bad")
    files = spark.read.parquet(str(tmp_path / "out" / "files"))
    textless = events.filter(F.col("value").isNull()).select("file_id").distinct().join(files, "file_id").collect()
    assert [row["file"].rsplit("/", 1)[-1] for row in textless] == [regular.name]
    # The files table names both files by Spark's escaped URIs, ranked by name.
    assert [(row["file_id"], row["file"].rsplit("/", 1)[-1]) for row in files.orderBy("file_id").collect()] == [
        (0, regular.name),
        (1, irregular.name),
    ]


def test_records_of_a_file_the_files_table_does_not_name_stop_the_job(
    spark: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose scan names it otherwise than the files table (ingest.file_table) would leave
    its records without a file_id: the job refuses them rather than analysing them unidentified
    (or, with an inner join, silently without them)."""
    from controller_svc.analytics import ingest, job

    logs = tmp_path / "logs"
    _write(logs, "broker-1.state-change.jsonl", [line for line, why in LINES if why is None])
    _write(logs, "broker-2.state-change.jsonl", [line for line, why in LINES if why is None])
    named = ingest.file_table_rows

    def one_named_otherwise(files: Any) -> list[tuple[int, str]]:
        return [
            (file_id, "elsewhere" if file.endswith("broker-2.state-change.jsonl") else file)
            for file_id, file in named(files)
        ]

    monkeypatch.setattr(ingest, "file_table_rows", one_named_otherwise)
    with pytest.raises(RuntimeError, match=r"^\d+ records of files the files table does not name"):
        job.analyze(spark, [str(logs)], str(tmp_path / "out"))
    monkeypatch.undo()
    assert job.analyze(spark, [str(logs)], str(tmp_path / "out")).summary["events"] == 2 * sum(
        why is None for _, why in LINES
    )


def _listing_tree(tmp_path: pathlib.Path) -> pathlib.Path:
    """Logs in nested directories, names Hadoop keeps unescaped, links of each kind."""
    root = tmp_path / "root"
    for name in [
        "sub/broker-1.state-change.jsonl",
        "sub/deep/broker-2.state-change.jsonl.gz",
        "a b/broker-3.state-change.jsonl",
        "é/broker-4.state-change.jsonl",
        "x%20y.state-change.jsonl",
        ".hidden.state-change.jsonl",
        "_under.state-change.jsonl",
        "not-a-log.jsonl",
        "../elsewhere/broker-5.state-change.jsonl",
    ]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("{}\n")
    (root / "linked").symlink_to(tmp_path / "elsewhere")
    (root / "broker-6.state-change.jsonl").symlink_to(tmp_path / "elsewhere" / "broker-5.state-change.jsonl")
    (root / "broken.state-change.jsonl").symlink_to(tmp_path / "nowhere")
    return root


def test_a_local_directory_is_listed_in_python_as_hadoop_lists_it(
    spark: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """list_inputs walks a local directory itself (ingest.local_files): the same names as
    Hadoop's listing (hadoop_files) for every kind of name and link, qualified as Hadoop
    qualifies the directory however it was given."""
    from controller_svc.analytics import ingest

    root = _listing_tree(tmp_path)
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    directory = jvm.org.apache.hadoop.fs.Path(str(root))
    by_hadoop = sorted(ingest.hadoop_files(directory.getFileSystem(conf), directory))
    assert by_hadoop == [
        f"file:{root}/{name}"
        for name in [
            ".hidden.state-change.jsonl",
            "_under.state-change.jsonl",
            "a b/broker-3.state-change.jsonl",
            "broker-6.state-change.jsonl",
            "linked/broker-5.state-change.jsonl",
            "sub/broker-1.state-change.jsonl",
            "sub/deep/broker-2.state-change.jsonl.gz",
            "x%20y.state-change.jsonl",
            "é/broker-4.state-change.jsonl",
        ]
    ]
    assert sorted(ingest.local_files(f"file:{root}") or []) == by_hadoop

    def no_hadoop_listing(*_: Any) -> list[str]:
        raise AssertionError("a local directory listed through Hadoop")

    monkeypatch.setattr(ingest, "hadoop_files", no_hadoop_listing)
    for given in [str(root), f"{root}/", f"file://{root}", f"{tmp_path}//root/../root"]:
        assert ingest.list_inputs(spark, [given]) == by_hadoop, given
    # A file named as well as its directory is read once; a sub-directory as Hadoop names it.
    assert ingest.list_inputs(spark, [str(root), str(root / "sub" / "broker-1.state-change.jsonl")]) == by_hadoop
    assert ingest.list_inputs(spark, [f"{root}/x/../sub"]) == [
        f"file:{root}/sub/broker-1.state-change.jsonl",
        f"file:{root}/sub/deep/broker-2.state-change.jsonl.gz",
    ]


def test_what_python_cannot_list_as_hadoop_does_is_left_to_hadoop(tmp_path: pathlib.Path) -> None:
    """local_files gives up (None: list_inputs then asks Hadoop) on a directory that is not
    local, a cycle of links, a name that is not UTF-8."""
    import os

    from controller_svc.analytics import ingest

    assert ingest.local_files("hdfs://namenode/logs") is None
    assert ingest.local_files(f"file:{tmp_path}/missing") is None
    cycle = tmp_path / "cycle"
    (cycle / "inner").mkdir(parents=True)
    (cycle / "inner" / "broker-1.state-change.jsonl").write_text("{}\n")
    assert ingest.local_files(f"file:{cycle}") == [f"file:{cycle}/inner/broker-1.state-change.jsonl"]
    (cycle / "inner" / "back").symlink_to(cycle)
    assert ingest.local_files(f"file:{cycle}") is None
    undecodable = tmp_path / "undecodable"
    undecodable.mkdir()
    (undecodable / "broker-1.state-change.jsonl").write_text("{}\n")
    assert ingest.local_files(f"file:{undecodable}") == [f"file:{undecodable}/broker-1.state-change.jsonl"]
    with open(os.path.join(os.fsencode(undecodable), b"\xff.state-change.jsonl"), "w") as f:
        f.write("{}\n")
    assert ingest.local_files(f"file:{undecodable}") is None
