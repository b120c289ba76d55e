"""The ingest's fast path (arrow_ingest.py) writes exactly the events table Spark's readers
would, or turns a file down and leaves it to them."""

from __future__ import annotations

import logging
import pathlib
import re
import uuid
from typing import Any

import pytest

from tests.pipeline import scenarios
from tests.pipeline.test_readers import LINES

pytestmark = pytest.mark.pipeline

# Lines Arrow's reader must accept (so that the fast path is not "exact" by refusing
# everything), each read by Spark as a usable record.
ACCEPTED: list[bytes] = [
    b'{"ts":1001,"node":"broker-1","kind":"some.future_kind","anything":[1,{"x":2}],"more":{"a":null}}',
    b'{"ts":1005,"node":"br\\u00f8ker-\xe2\x9c\x93 \\"q\\"","kind":"node.alive"}',
    b'{"ts":1013,"node":"broker-1","kind":"broker.shutdown","broker_id":1,"broker_epoch":7}',
    # NaN and an integer where a double is expected: Spark's reader takes both.
    b'{"ts":1014,"node":"controller-1","kind":"request.completed","broker":1,"api":"LeaderAndIsr",'
    b'"correlation_id":4,"controller_epoch":2,"queue_ms":NaN,"rtt_ms":3,"error":0}',
    # A null element in a list, a boolean, whitespace between tokens.
    b'{ "ts" : 1015 , "node":"controller-1","kind":"partition.leader_elected","topic":"t","partition":0,'
    b'"leader":1,"leader_epoch":3,"isr":[1,null],"prev_isr":[],"strategy":"offline","unclean":true,'
    b'"controller_epoch":2}   ',
    b'{"ts":1016,"node":"broker-2","kind":"partition.role_changed","topic":"t","partition":0,"role":"follower",'
    b'"leader":1,"leader_epoch":3,"isr":[1,2],"controller_epoch":2,"rtt_ms":-0.0,"partitions":-5}',
]


def _write(directory: pathlib.Path, name: str, lines: list[bytes], end: bytes = b"\n") -> pathlib.Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(b"\n".join(lines) + end)
    return path


def test_chunks_end_after_a_line_feed_and_cover_the_file(tmp_path: pathlib.Path) -> None:
    from controller_svc.analytics import arrow_ingest

    lines = [b"{" + b"x" * (n * 37 % 300) + b"}" for n in range(200)] + [b"{" + b"y" * 5000 + b"}"]
    for end in (b"\n", b""):
        path = _write(tmp_path, f"f{len(end)}.jsonl", lines, end)
        data = path.read_bytes()
        chunks = arrow_ingest.chunks_of(7, str(path), target_bytes=1000)
        assert len(chunks) > 5
        assert [c.start for c in chunks] == [0, *[c.end for c in chunks[:-1]]]
        assert chunks[-1].end == len(data)
        for chunk in chunks:
            assert chunk.file_id == 7
            assert chunk.start == 0 or data[chunk.start - 1 : chunk.start] == b"\n"
        # The 5,000-byte line, longer than a chunk, is one chunk's last line, whole.
        assert any(data[c.start : c.end].rstrip(b"\n").endswith(b"y" * 5000 + b"}") for c in chunks)


def _read_written(spark: Any, directory: pathlib.Path) -> list[Any]:
    from controller_svc.analytics import ingest

    if not any(directory.rglob("*.parquet")):
        return []
    return ingest.events_table(spark, str(directory)).orderBy("mid").collect()


def test_arrow_accepts_only_lines_spark_reads_the_same(spark: Any, tmp_path: pathlib.Path) -> None:
    """Each line alone in a file: the fast path either writes the row Spark's JSON reader reads
    from it (same fields, usable, the same partition) or writes nothing."""
    from controller_svc.analytics import arrow_ingest, ingest, schema

    candidates = [(line, why) for line, why in LINES] + [(line, None) for line in ACCEPTED]
    accepted: list[bytes] = []
    for n, (line, why) in enumerate(candidates):
        path = _write(tmp_path / f"logs{n}", "broker-1.state-change.jsonl", [line])
        out = tmp_path / f"out{n}"
        (chunk,) = arrow_ingest.chunks_of(0, str(path))
        outcome = arrow_ingest.ingest_chunk(chunk, str(out / "events"))
        written = _read_written(spark, out)
        if outcome.rejected is not None:
            assert written == [], line
            continue
        accepted.append(line)
        assert why is None, f"a malformed line was accepted: {line!r}"
        (spark_row,) = ingest.json_reader_records(spark, [str(path)]).collect()
        (row,) = written
        assert spark_row["status"] == row["status"] == "ok"
        assert row["kind_group"] == spark_row["kind_group"]
        assert (row["file_id"], row["block"], row["mid"], row["value"]) == (0, 0, 0, None)
        for name, _ in schema.FIELDS:
            same_nan = isinstance(row[name], float) and row[name] != row[name] and spark_row[name] != spark_row[name]
            assert same_nan or row[name] == spark_row[name], (line, name)
    assert set(ACCEPTED) <= set(accepted)


def test_a_rejected_chunk_writes_nothing_and_says_why(tmp_path: pathlib.Path) -> None:
    from controller_svc.analytics import arrow_ingest

    good = b'{"ts":1,"node":"broker-1","kind":"node.alive"}'
    cases = {
        "two objects on one line": (good + good, "8 records in 7 lines"),
        "a repeated key": (b'{"ts":1,"ts":2,"node":"broker-1","kind":"node.alive"}', "Arrow's JSON reader"),
        "a missing required field": (
            b'{"ts":1,"node":"broker-1","kind":"broker.shutdown","broker_id":1}',
            "broker.shutdown without broker_epoch",
        ),
        "a value outside its set": (
            b'{"ts":1,"node":"b-1","kind":"partition.role_changed","topic":"t","partition":0,"role":"boss",'
            b'"leader":1,"leader_epoch":0}',
            "partition.role_changed with a role outside its values",
        ),
        "a ts of zero": (b'{"ts":0,"node":"broker-1","kind":"node.alive"}', "a ts that is not positive"),
        "no kind": (b'{"ts":1,"node":"broker-1","Kind":"node.alive"}', "a record without kind"),
        # The census' checks (census.py), made by the task on the chunk's bytes.
        "a carriage return": (b'{"ts":1,\r"node":"broker-1","kind":"node.alive"}', "carriage return"),
        "invalid UTF-8": (b'{"ts":1,"node":"broker-\xff","kind":"node.alive"}', "invalid UTF-8"),
        "a leading space": (b' {"ts":1,"node":"broker-1","kind":"node.alive"}', "a line does not begin with {"),
        "a NUL byte": (b'{"ts":1,"node":"broker-1","kind":"node.alive"}\x00', "NUL byte"),
    }
    for name, (line, why) in cases.items():
        path = _write(tmp_path / name, "broker-1.state-change.jsonl", [good] * 3 + [line] + [good] * 3)
        (chunk,) = arrow_ingest.chunks_of(3, str(path))
        outcome = arrow_ingest.ingest_chunk(chunk, str(tmp_path / name / "events"))
        assert outcome.rejected is not None and why in outcome.rejected, (name, outcome)
        assert outcome.rows == 0
        assert not (tmp_path / name / "events").exists(), name


def _lined(spark: Any, out: pathlib.Path) -> list[tuple[Any, ...]]:
    from controller_svc.analytics import ingest

    table = ingest.events_table(spark, str(out))
    rows = ingest.with_line(table, ingest.splits_of(table)).drop("block", "mid").collect()
    return sorted((tuple(row) for row in rows), key=repr)


def test_the_fast_path_writes_the_table_spark_would(
    spark: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Three files: one the fast path takes in several chunks; one it turns down in its last
    chunk (after writing the first ones, which it then removes); one the census gives the line
    reader. The table equals Spark's own, line for line."""
    import pyarrow.parquet as pq

    from controller_svc.analytics import arrow_ingest, ingest

    history = tmp_path / "history"
    scenarios.clean_failover(history)
    logs = history / "logs" if (history / "logs").is_dir() else history
    lines = [line for file in sorted(logs.rglob("*.jsonl")) for line in file.read_bytes().splitlines()]
    assert len(lines) > 40
    given = tmp_path / "given"
    _write(given, "a-taken.state-change.jsonl", lines)
    bad_line = b'{"ts":5,"node":"broker-1","kind":"broker.shutdown","broker_id":1}'
    _write(given, "b-turned-down.state-change.jsonl", [*lines, bad_line])
    _write(given, "c-line-reader.state-change.jsonl", [*lines[:5], b"", *lines[5:]])
    monkeypatch.setattr(arrow_ingest, "CHUNK_BYTES", 1024)
    caplog.set_level(logging.INFO, logger="analytics")

    ingest.ingest(spark, [str(given)], str(tmp_path / "fast"))
    spark.conf.set(ingest.FAST_PATH_CONF, "false")
    try:
        ingest.ingest(spark, [str(given)], str(tmp_path / "spark"))
    finally:
        spark.conf.unset(ingest.FAST_PATH_CONF)

    fast, by_spark = _lined(spark, tmp_path / "fast"), _lined(spark, tmp_path / "spark")
    assert len(fast) == 3 * len(lines) + 2
    assert fast == by_spark
    # Where each file went: only the first file's records are the fast path's, in many chunks.
    written = sorted((tmp_path / "fast" / "events").rglob(f"{arrow_ingest.FILE_PREFIX}*.parquet"))
    assert {p.name.split("-")[1] for p in written} == {"0"}
    assert len({p.name for p in written}) > 3
    assert not list((tmp_path / "spark" / "events").rglob(f"{arrow_ingest.FILE_PREFIX}*"))
    assert "b-turned-down.state-change.jsonl is read by Spark's readers" in caplog.text
    assert "broker.shutdown without broker_epoch" in caplog.text
    assert "c-line-reader.state-change.jsonl is read by Spark's readers" in caplog.text
    assert "c-line-reader.state-change.jsonl is read line by line (a line does not begin with {)" in caplog.text
    # Many small chunks (CHUNK_BYTES is 1 KB here, TASK_BYTES is not), in 4 tasks per core
    # (local[2]): a task ingests several chunks in turn.
    dealt = re.search(r"from (\d+) chunks in (\d+) tasks", caplog.text)
    assert dealt is not None and int(dealt[1]) > 8 and int(dealt[2]) == 8, caplog.text[-2000:]
    # Narrow files: a kind's file holds only the columns its records carry.
    alive = [p for p in written if "kind_group=node.alive" in str(p)]
    assert alive
    columns = set(pq.read_schema(alive[0]).names)
    assert {"ts", "node", "kind", "file_id", "block", "mid"} <= columns
    assert not columns & {"isr", "topic", "leader_epoch", "value"}


def test_a_failed_fast_path_leaves_every_file_to_spark(
    spark: Any, tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Tasks that fail (here: the table's directory is a file, so no task can write) are no
    reason to fail the job: Spark's reader reads the files."""
    from controller_svc.analytics import ingest

    logs = tmp_path / "logs"
    _write(logs, "broker-1.state-change.jsonl", ACCEPTED)
    _write(logs, "broker-2.state-change.jsonl", ACCEPTED)
    files = ingest.list_inputs(spark, [str(logs)])
    names = spark.read.text(files).inputFiles()
    not_a_directory = tmp_path / "events"
    not_a_directory.write_text("")
    caplog.set_level(logging.WARNING, logger="analytics")
    result = ingest._fast_path(spark, files, names, ingest.file_table_rows(names), str(not_a_directory))
    assert result.turned_down == files
    assert result.checked == [] and result.written_file_ids == frozenset() and result.node_totals == []
    assert "the ingest's fast path failed" in caplog.text


def _fast_events(spark: Any, out: pathlib.Path) -> int:
    from controller_svc.analytics import arrow_ingest

    written = list((out / "events").rglob(f"{arrow_ingest.FILE_PREFIX}*.parquet"))
    assert written  # the fast path's tasks wrote them
    return spark.read.parquet(str(out / "events")).count()


def test_the_python_workers_are_started_ahead_of_the_fast_path(
    spark: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One task per core imports the fast path's modules in its worker, in a job the ingest
    starts before it lists the files (ingest._start_python_workers); not when an ingest's
    Python tasks ended moments ago in the same application (its workers are alive)."""
    from controller_svc.analytics import arrow_ingest, ingest

    logs, marks = tmp_path / "logs", tmp_path / "marks"
    _write(logs, "broker-1.state-change.jsonl", ACCEPTED)
    _write(logs, "broker-2.state-change.jsonl", ACCEPTED)
    marks.mkdir()
    real = arrow_ingest.preload

    def marking(task: object = None) -> int:  # pickled by value: it runs in the workers
        pid = real(task)
        (marks / f"{task}-{pid}-{uuid.uuid4().hex}").write_text("")
        return pid

    monkeypatch.setattr(arrow_ingest, "preload", marking)
    monkeypatch.setattr(ingest, "_python_tasks_ended", {})  # as in a new application
    ingest.ingest(spark, [str(logs)], str(tmp_path / "out"))
    cores = spark.sparkContext.defaultParallelism
    assert sorted(int(mark.name.split("-")[0]) for mark in marks.iterdir()) == list(range(cores))
    assert _fast_events(spark, tmp_path / "out") == 2 * len(ACCEPTED)
    # Right after: the workers are alive, and no job starts them.
    ingest.ingest(spark, [str(logs)], str(tmp_path / "again"))
    assert len(list(marks.iterdir())) == cores
    assert _fast_events(spark, tmp_path / "again") == 2 * len(ACCEPTED)
    # Long after (Spark may have ended them): started again.
    monkeypatch.setattr(ingest, "PYTHON_WORKERS_KEPT_S", 0.0)
    ingest.ingest(spark, [str(logs)], str(tmp_path / "later"))
    assert len(list(marks.iterdir())) == 2 * cores


def test_workers_that_cannot_be_started_ahead_are_no_reason_to_fail(
    spark: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from controller_svc.analytics import arrow_ingest, ingest

    logs = tmp_path / "logs"
    _write(logs, "broker-1.state-change.jsonl", ACCEPTED)

    def failing(task: object = None) -> int:
        raise RuntimeError("no modules here")

    monkeypatch.setattr(arrow_ingest, "preload", failing)
    monkeypatch.setattr(ingest, "_python_tasks_ended", {})
    caplog.set_level(logging.WARNING, logger="analytics")
    ingest.ingest(spark, [str(logs)], str(tmp_path / "out"))
    assert "the Python workers could not be started ahead" in caplog.text
    assert _fast_events(spark, tmp_path / "out") == len(ACCEPTED)


@pytest.mark.parametrize("setting", ["FAST_PATH_CONF", "LEADER_EPOCHS_IN_TASKS_CONF", "NODE_INDEX_IN_TASKS_CONF"])
def test_the_fast_path_settings_must_be_true_or_false(spark: Any, tmp_path: pathlib.Path, setting: str) -> None:
    """The fast path's own setting, and those of the leader-epoch check and the node figures in
    its tasks."""
    from controller_svc.analytics import ingest

    name = getattr(ingest, setting)
    logs = tmp_path / "logs"
    _write(logs, "broker-1.state-change.jsonl", ACCEPTED)
    spark.conf.set(name, "sometimes")
    try:
        with pytest.raises(ingest.InputError, match="must be true or false"):
            ingest.ingest(spark, [str(logs)], str(tmp_path / "out"))
    finally:
        spark.conf.unset(name)
