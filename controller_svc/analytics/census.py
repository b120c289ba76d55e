"""Which log files Spark's JSON reader reads as exactly one row per line.

The ingest parses most lines with Spark's JSON reader, which hands Jackson the line's bytes (its
UTF-8 stream parser). `from_json` over the text reader's lines goes through a java.io.Reader
instead, and at 10M lines the ingest spent ~6 s more that way (analytics-ingest-10m-json-reader.json). The
JSON reader, though, does not map lines to rows one to one in every file: it drops blank lines,
makes a line holding a JSON array one row per element, and rejects invalid UTF-8 that the text
reader's decoding replaces. Line numbers (of malformed lines and of violations' evidence) count
rows per file split, and a blank line must be reported as malformed; so a file goes to the JSON
reader only when one scan of its bytes shows none of that can happen:

- every line begins with `{` (the file's first byte, and the byte after every line feed but a
  final one): no blank lines, no leading whitespace, no arrays, no byte-order mark;
- no carriage return: Hadoop's line reader ends lines at a lone CR too;
- no NUL byte: Jackson would take `{` NUL for UTF-16 or UTF-32;
- valid UTF-8.

Everything else (a file failing a check, a compressed file, a file not on the local file system)
is read line by line with the text reader and `from_json`, as every file was before: slower, and
exact for any bytes. The scan runs at the speed of memchr (~1 GB/s, 1.6 GB in ~1.5 s).
"""

from __future__ import annotations

import codecs
import fnmatch
import logging
import os
import re
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

log = logging.getLogger("analytics")

CHUNK_BYTES = 16 << 20
_LINE_NOT_AN_OBJECT = re.compile(rb"\n[^{]")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True)
class ReaderPlan:
    """The input files split by how they are read, each list in the order given."""

    json_reader: tuple[str, ...]
    text_reader: tuple[str, ...]
    # Why each file in text_reader is there, for the log.
    reasons: tuple[tuple[str, str], ...] = ()


def plan(files: Sequence[str], chunk_bytes: int = CHUNK_BYTES, prefetch: Prefetch | None = None) -> ReaderPlan:
    """Scans each local, uncompressed file (or takes its scan from `prefetch`, when the file is
    unchanged since); the JSON reader gets those that map one row per line."""
    known = prefetch.results() if prefetch is not None else {}
    json_reader: list[str] = []
    text_reader: list[str] = []
    reasons: list[tuple[str, str]] = []
    for file in files:
        path = local_path(file)
        key = _key(path) if path is not None else None
        why = known[key] if key is not None and key in known else irregularity(file, chunk_bytes)
        if why is None:
            json_reader.append(file)
        else:
            text_reader.append(file)
            reasons.append((file, why))
    for file, why in reasons:
        log.info("%s is read line by line (%s)", file, why)
    return ReaderPlan(tuple(json_reader), tuple(text_reader), tuple(reasons))


class Prefetch:
    """The scan of the inputs' local files, in a thread started before Spark: the JVM's start-up
    leaves a core idle for seconds, and the scan (~1.5 s at 10M lines) is then off the job's
    path. `plan` uses a file's result only if the file has the same size and modification time
    as when it was scanned, and scans any other file itself."""

    def __init__(self, inputs: Sequence[str], pattern: str) -> None:
        self._results: dict[tuple[str, int, int], str | None] = {}
        self._thread = threading.Thread(
            target=self._scan, args=(list(inputs), pattern), name="census-prefetch", daemon=True
        )
        self._thread.start()

    def results(self) -> dict[tuple[str, int, int], str | None]:
        """The scans taken, once the thread is done: (path, size, mtime) -> irregularity."""
        self._thread.join()
        return self._results

    def _scan(self, inputs: list[str], pattern: str) -> None:
        try:
            for path in _local_files(inputs, pattern):
                key = _key(path)
                if key is not None:
                    self._results[key] = irregularity(path)
        except Exception:  # the job then scans every file itself: slower, never wrong
            log.exception("the census prefetch failed")


def _local_files(inputs: list[str], pattern: str) -> Iterator[str]:
    """The local files list_inputs would find (a superset does no harm: results are looked up)."""
    for given in inputs:
        path = local_path(given)
        if path is None:
            continue
        if os.path.isfile(path):
            yield path
        for directory, _subdirs, names in os.walk(path):
            for name in sorted(names):
                if fnmatch.fnmatchcase(name, pattern):
                    yield os.path.join(directory, name)


def _key(path: str) -> tuple[str, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (os.path.abspath(path), stat.st_size, stat.st_mtime_ns)


def local_path(file: str) -> str | None:
    """The local path of a file as list_inputs names it (Hadoop's qualified path, `file:/a b/c`,
    not URL-escaped), or of a plain path; None for any other file system."""
    if file.startswith("file:"):
        rest = file[len("file:") :]
        if not rest.startswith("//"):
            return rest
        host, _, path = rest[2:].partition("/")
        return "/" + path if host in ("", "localhost") else None
    return None if _SCHEME.match(file) else file


def place_irregularity(file: str) -> str | None:
    """What irregularity finds from the file's name alone: not local, or maybe compressed."""
    path = local_path(file)
    if path is None:
        return "not on the local file system"
    if not path.endswith(".jsonl"):
        return "not named .jsonl: may be compressed (Spark decompresses by extension)"
    return None


def bytes_irregularity(chunk: bytes, line_starts: bool, decoder: codecs.IncrementalDecoder) -> str | None:
    """irregularity's checks on the next bytes of a file: `line_starts` when the first byte
    begins a line, `decoder` the file's UTF-8 decoder so far (it raises UnicodeDecodeError)."""
    if line_starts and chunk[:1] != b"{":
        return "a line does not begin with {"
    if _LINE_NOT_AN_OBJECT.search(chunk) is not None:
        return "a line does not begin with {"
    if b"\r" in chunk:
        return "carriage return"
    if b"\x00" in chunk:
        return "NUL byte"
    # The decoder only sees what it must: ASCII chunks while no character is cut.
    if not chunk.isascii() or decoder.getstate()[0]:
        decoder.decode(chunk)
    return None


def irregularity(file: str, chunk_bytes: int = CHUNK_BYTES) -> str | None:
    """Why the JSON reader might not read `file` as one row per line, or None when it does."""
    why = place_irregularity(file)
    if why is not None:
        return why
    path = local_path(file)
    assert path is not None
    decoder = codecs.getincrementaldecoder("utf-8")()
    line_starts = True  # the next byte begins a line
    try:
        with open(path, "rb") as stream:
            while chunk := stream.read(chunk_bytes):
                why = bytes_irregularity(chunk, line_starts, decoder)
                if why is not None:
                    return why
                line_starts = chunk.endswith(b"\n")
            decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return "invalid UTF-8"
    except OSError as e:
        return f"not readable here: {e.strerror or e}"
    return None
