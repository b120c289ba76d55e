"""census.plan: which log files the JSON reader may read (one row per line), from their bytes."""

from __future__ import annotations

import pathlib

import pytest

from controller_svc.analytics import census

RECORD = b'{"ts":1,"node":"broker-1","kind":"node.alive"}'


def _file(tmp_path: pathlib.Path, content: bytes, name: str = "broker-1.state-change.jsonl") -> str:
    path = tmp_path / name
    path.write_bytes(content)
    return f"file:{path}"  # as list_inputs names files: Hadoop's qualified path, not URL-escaped


@pytest.mark.parametrize(
    "content",
    [
        b"",
        RECORD,
        RECORD + b"\n",
        RECORD + b"\n" + RECORD + b"\n",
        b"{not json at all\n" + RECORD + b"\n",  # fails to parse, but is one row
        '{"node":"brøker-1 ✓"}\n'.encode() + RECORD,  # multi-byte UTF-8
        b"{}\n{}\n{}",
    ],
)
def test_files_of_lines_that_begin_with_a_brace_go_to_the_json_reader(tmp_path: pathlib.Path, content: bytes) -> None:
    file = _file(tmp_path, content)
    assert census.irregularity(file) is None
    assert census.plan([file]) == census.ReaderPlan(json_reader=(file,), text_reader=())


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (RECORD + b"\n\n" + RECORD, "a line does not begin with {"),  # blank line inside
        (RECORD + b"\n\n", "a line does not begin with {"),  # blank last line
        (b"\n" + RECORD, "a line does not begin with {"),  # blank first line
        (b" " + RECORD, "a line does not begin with {"),  # leading whitespace
        (RECORD + b"\n[" + RECORD + b"]", "a line does not begin with {"),  # an array: one row per element
        (b"\xef\xbb\xbf" + RECORD, "a line does not begin with {"),  # byte-order mark
        (b"not json\n" + RECORD, "a line does not begin with {"),
        (RECORD + b"\r\n" + RECORD, "carriage return"),
        (RECORD + b"\r" + RECORD, "carriage return"),
        (b"{\x00\x00\x00", "NUL byte"),
        (b'{"node":"broker-\xff"}', "invalid UTF-8"),
        (b'{"node":"broker-\xc3"}', "invalid UTF-8"),  # a character cut short
    ],
)
def test_files_the_json_reader_would_read_differently_are_read_line_by_line(
    tmp_path: pathlib.Path, content: bytes, why: str
) -> None:
    file = _file(tmp_path, content)
    assert census.irregularity(file) == why
    assert census.plan([file]) == census.ReaderPlan(json_reader=(), text_reader=(file,), reasons=((file, why),))


@pytest.mark.parametrize("chunk_bytes", [1, 2, 3, 5, 7, len(RECORD), len(RECORD) + 1])
def test_checks_hold_across_chunk_boundaries(tmp_path: pathlib.Path, chunk_bytes: int) -> None:
    """A blank line, a line not starting with { or a multi-byte character split across two reads
    is seen whatever the chunk size."""
    wide = '{"node":"brøker ✓ 𝄞"}'.encode()
    assert census.irregularity(_file(tmp_path, wide + b"\n" + RECORD + b"\n" + wide), chunk_bytes) is None
    assert census.irregularity(_file(tmp_path, RECORD + b"\n\n" + RECORD), chunk_bytes) is not None
    assert census.irregularity(_file(tmp_path, RECORD + b"\n " + RECORD), chunk_bytes) is not None
    cut = wide[: wide.index("𝄞".encode()) + 2] + b'"}'  # 2 of the character's 4 bytes
    assert census.irregularity(_file(tmp_path, RECORD + b"\n" + cut), chunk_bytes) == "invalid UTF-8"


def test_files_elsewhere_or_compressed_are_read_line_by_line(tmp_path: pathlib.Path) -> None:
    assert census.irregularity("s3a://bucket/logs/broker-1.state-change.jsonl") == "not on the local file system"
    assert census.irregularity("hdfs://nn:8020/logs/broker-1.state-change.jsonl") == "not on the local file system"
    gz = _file(tmp_path, b"\x1f\x8b", "broker-1.state-change.jsonl.gz")
    assert "may be compressed" in (census.irregularity(gz) or "")
    assert (census.irregularity(str(tmp_path / "gone.state-change.jsonl")) or "").startswith("not readable here")


def test_local_paths_as_hadoop_names_them() -> None:
    assert census.local_path("file:/tmp/a dir%20with#odd?name/x.jsonl") == "/tmp/a dir%20with#odd?name/x.jsonl"
    assert census.local_path("file:///tmp/x.jsonl") == "/tmp/x.jsonl"
    assert census.local_path("file://localhost/tmp/x.jsonl") == "/tmp/x.jsonl"
    assert census.local_path("file://otherhost/tmp/x.jsonl") is None
    assert census.local_path("/tmp/x.jsonl") == "/tmp/x.jsonl"
    assert census.local_path("s3a://bucket/x.jsonl") is None


def test_plan_keeps_the_order_and_a_path_with_escaped_characters(tmp_path: pathlib.Path) -> None:
    odd = tmp_path / "a dir%20with space#and?more"
    odd.mkdir()
    regular = [_file(odd, RECORD, f"broker-{n}.state-change.jsonl") for n in (2, 1, 3)]
    blank = _file(tmp_path, b"\n", "broker-9.state-change.jsonl")
    plan = census.plan([regular[0], blank, regular[1], regular[2]])
    assert plan.json_reader == tuple(regular)
    assert plan.text_reader == (blank,)


def test_a_prefetched_scan_is_used_for_unchanged_files_only(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "nested").mkdir()
    same = _file(logs, RECORD + b"\n", "broker-1.state-change.jsonl")
    grown = _file(logs / "nested", RECORD + b"\n", "broker-2.state-change.jsonl")
    _file(logs, b"\n", "not-a-log.txt")
    prefetch = census.Prefetch([str(logs)], "*.state-change.jsonl*")
    assert sorted(key[0] for key in prefetch.results()) == sorted(f.removeprefix("file:") for f in (same, grown))
    # broker-2's log gains a blank line after the scan: its size changed, so it is scanned again.
    with open(grown.removeprefix("file:"), "ab") as stream:
        stream.write(b"\n")
    scanned: list[str] = []
    real = census.irregularity
    monkeypatch.setattr(census, "irregularity", lambda file, *a: scanned.append(file) or real(file, *a))
    plan = census.plan([same, grown], prefetch=prefetch)
    assert scanned == [grown]
    assert plan.json_reader == (same,)
    assert plan.text_reader == (grown,)


def test_a_failed_prefetch_leaves_the_scan_to_plan(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    file = _file(tmp_path, RECORD)
    prefetch = census.Prefetch([str(tmp_path)], None)  # type: ignore[arg-type]  # fnmatch raises
    assert prefetch.results() == {}
    assert "the census prefetch failed" in caplog.text
    assert census.plan([file], prefetch=prefetch).json_reader == (file,)
