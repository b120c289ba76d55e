"""The ingest's fast path: Spark tasks that parse a file's lines with Arrow's JSON reader and
write each kind's records as a narrow Parquet file of the events table.

Spark's writer writes one schema per table, so every row of the events table it writes carries
all of schema.FIELDS, null where the row's kind has none: at 10M lines those nulls cost 6.1 s
of a 13.9 s write (bench/results/analytics-ingest-10m-write-split-160f7ac.json), and the ingest
as a whole took 2.5x Spark's JSON parse of the same files. Here each task parses a chunk of a
file (whole lines, ~CHUNK_BYTES) with Arrow's C++ reader, checks it as ingest.is_malformed
does, and writes one Parquet file per kind with only the columns that kind's rows carry. The
table's readers read it with the full schema (ingest.events_schema): Spark's Parquet reader
gives null for a column a file lacks, so the analyses read exactly the rows and values the
other path writes.

Exactness comes first. A chunk is accepted only if its bytes pass the census' checks (every
line begins with `{`, no carriage return, no NUL byte, valid UTF-8: census.bytes_irregularity,
made here in the tasks), every line parses to exactly one row, Arrow raises on nothing, and no
row is malformed; otherwise its whole file goes to Spark's readers, which then decide (and
report) what is wrong exactly as before. Arrow rejects what Spark would read differently (a
repeated key, a number where a string is expected, leading zeros, a comment), and two objects
on one line are caught by counting rows against lines. Only local `.jsonl` files come here,
only on a local master (the tasks run the driver's own Python, which has pyarrow), and only
when the events table is on the local file system.

Records keep the other path's identity: (file_id, block, mid) with block the chunk's first byte
and mid the line's index in the chunk, so ingest.with_line numbers lines the same way.
"""

from __future__ import annotations

import codecs
import functools
import heapq
import itertools
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from controller_svc.analytics import census, leader_epochs, node_index, schema

# A chunk of a file: 1.6 GB of logs (10M records) make 36, dealt to the tasks (task_groups) so that 2 cores
# finish together, few enough files per kind for the readers.
CHUNK_BYTES = 64 << 20
# What the tasks' files are named: part of how a turned-down file's chunks are found and removed.
FILE_PREFIX = "arrow-"
BLOCK_BYTES = 8 << 20
# A Python task costs tens of milliseconds of scheduling and hand-off to a Python worker whatever
# it does (a job of 33 trivial Python tasks took 1.1-1.3 s on 2 cores warm, of 4 tasks 0.2 s,
# of 33 JVM tasks 0.4 s): the 33 files of 1M events paid it as much as the 33 of 10M. Small
# chunks are therefore dealt to fewer tasks (task_count, task_groups): this many per core, or
# one per TASK_BYTES of input when there is more (a large task's cost is then a small part of
# its work, and more tasks than cores keep the cores' ends close: 8 tasks for 10M events ended
# later than 33 in one warm A/B).
TASKS_PER_CORE = 4
TASK_BYTES = 64 << 20
# Where the tasks write the leader-epoch check's candidates (leader_epochs.py), inside the
# events table's directory: Spark's file listing skips a name beginning with `_`, so the
# table's readers never see them, and whatever clears the table clears them.
CHECKS_DIR = "_leader_epochs"
# Where they write each chunk's distinct node times (node_index.py), likewise hidden.
NODE_TIMES_DIR = "_node_times"
# Snappy rather than the zstd of Spark's writer: the 10M-event fast path ~0.7 s faster in one
# warm A/B (15.2-15.5 s against 16.1 s; issue 13's notes).
COMPRESSION = "snappy"


@dataclass(frozen=True)
class Chunk:
    """Whole lines of one file: bytes [start, end) of `path`, a local file."""

    file_id: int
    path: str
    start: int
    end: int


@dataclass(frozen=True)
class Outcome:
    """What a task did with a chunk: `rows` records written, or why it wrote nothing;
    `checked_nodes`: the nodes whose role changes it checked (leader_epochs.check_chunk);
    `node_totals`: each node's totals in the chunk (node_index.summarize_chunk)."""

    file_id: int
    start: int
    rows: int
    rejected: str | None
    checked_nodes: tuple[str, ...] = ()
    node_totals: tuple[node_index.NodeTotal, ...] = ()


def available() -> bool:
    """Whether pyarrow is installed (the `analytics` extra installs it)."""
    try:
        import pyarrow.json
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


def preload(_: object = None) -> int:
    """Imports what ingest_chunk uses (pyarrow's JSON reader, Parquet writer and kernels,
    numpy) in the Python worker that runs it; returns the worker's process id. A worker keeps
    its modules for the tasks it runs later (Spark reuses its Python workers)."""
    import numpy  # noqa: F401
    import pyarrow.compute
    import pyarrow.json
    import pyarrow.parquet  # noqa: F401

    return os.getpid()


def chunks_of(file_id: int, path: str, target_bytes: int | None = None) -> list[Chunk]:
    """`path` cut into chunks of about `target_bytes` (CHUNK_BYTES), each ending after a line
    feed (or at the end of the file)."""
    target_bytes = target_bytes or CHUNK_BYTES
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as stream:
        while cuts[-1] + target_bytes < size:
            stream.seek(cuts[-1] + target_bytes)
            skipped = 0
            while True:
                block = stream.read(1 << 16)
                if not block:
                    cut = size
                    break
                newline = block.find(b"\n")
                if newline >= 0:
                    cut = cuts[-1] + target_bytes + skipped + newline + 1
                    break
                skipped += len(block)
            if cut >= size:
                break
            cuts.append(cut)
    cuts.append(size)
    return [Chunk(file_id, path, a, b) for a, b in itertools.pairwise(cuts) if b > a]


@functools.cache
def _arrow_schema() -> Any:
    import pyarrow as pa

    types = {
        schema.LONG: pa.int64(),
        schema.DOUBLE: pa.float64(),
        schema.STRING: pa.string(),
        schema.BOOLEAN: pa.bool_(),
        schema.LONG_ARRAY: pa.list_(pa.int64()),
    }
    return pa.schema([(name, types[kind]) for name, kind in schema.FIELDS])


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def _malformed(table: Any, by_kind: dict[str, Any]) -> str | None:
    """Why some row of `table` is not a usable record (ingest.is_malformed_sql's tests), or None.
    `by_kind`: the table's rows of each kind."""
    import pyarrow.compute as pc

    for name in schema.ENVELOPE:
        if table[name].null_count:
            return f"a record without {name}"
    if pc.min(table["ts"]).as_py() <= 0:
        return "a ts that is not positive"
    for kind, rows in by_kind.items():
        for name in schema.REQUIRED.get(kind, ()):
            if rows[name].null_count:
                return f"{kind} without {name}"
        for name, values in schema.ALLOWED_VALUES.get(kind, {}).items():
            column = rows[name].drop_null()
            if len(column) and not pc.all(pc.is_in(column, value_set=_string_set(values))).as_py():
                return f"{kind} with a {name} outside its values"
    return None


def _by_kind(table: Any) -> dict[str, Any]:
    """The table's rows of each kind (in line order), for rows that have one. The kinds are
    told apart by their dictionary codes: one pass over the strings, then integer compares
    (a stable sort by code and one gather of the rows measured no faster)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(table["kind"]).combine_chunks()
    return {
        kind: table.filter(pc.equal(encoded.indices, pa.scalar(code, encoded.indices.type)))
        for code, kind in enumerate(encoded.dictionary.to_pylist())
        if kind is not None
    }


def _constant(rows: int, value: int, type_: Any) -> Any:
    """A column of `rows` copies of `value`, built in Arrow (no Python list)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.fill_null(pa.nulls(rows, type_), pa.scalar(value, type_))


@functools.cache
def _string_set(values: tuple[str, ...]) -> Any:
    import pyarrow as pa

    return pa.array(values, pa.string())


def _dictionary_columns(carried: Sequence[str]) -> list[str]:
    """The columns worth Parquet's dictionary encoding: the strings and the per-file constants.
    Timestamps and line ids are nearly all distinct; trying a dictionary on them only to fall
    back costs time."""
    strings = {name for name, kind in schema.FIELDS if kind == schema.STRING}
    return [name for name in carried if name in strings] + ["file_id", "block"]


def kind_group(kind: str) -> str:
    """The events table's partition for a usable record of `kind` (ingest.classify)."""
    return kind if kind in schema.KNOWN_KINDS else schema.OTHER_KINDS


def _read(chunk: Chunk) -> bytes | str:
    """The chunk's bytes, or why they could not be read as they were cut."""
    with open(chunk.path, "rb") as stream:
        stream.seek(chunk.start)
        data = stream.read(chunk.end - chunk.start)
    return data if len(data) == chunk.end - chunk.start else "the file changed while it was read"


def _parse(data: bytes) -> Any:
    """Arrow's table of the lines (typed as schema.FIELDS), or why Arrow's reader refused them."""
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        return pj.read_json(
            pa.BufferReader(data),
            # One thread per task (Spark runs a task per core), and blocks of a few MB: ~10%
            # faster than one 64 MB block (a 48 MB file: 0.45 vs 0.50 s). A line longer than a
            # block makes Arrow refuse the chunk, which Spark's reader then reads.
            read_options=pj.ReadOptions(use_threads=False, block_size=BLOCK_BYTES),
            parse_options=pj.ParseOptions(explicit_schema=_arrow_schema(), unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        return f"Arrow's JSON reader: {str(e).splitlines()[0][:200]}"


def parsed_rows(chunk: Chunk) -> int:
    """Rows Arrow's reader parses from the chunk, -1 if it refuses them: the parse alone, for
    bench.analytics' floor."""
    data = _read(chunk)
    table = _parse(data) if isinstance(data, bytes) else None
    return -1 if table is None or isinstance(table, str) else int(table.num_rows)


def _census(data: bytes) -> str | None:
    """The census' checks (census.py) on a chunk's bytes: Arrow must read only what Spark's
    JSON reader would read as one row per line. Made here, in the tasks, in parallel."""
    try:
        decoder = codecs.getincrementaldecoder("utf-8")()
        why = census.bytes_irregularity(data, True, decoder)
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return "invalid UTF-8"
    return why


def task_count(chunks: Sequence[Chunk], cores: int) -> int:
    """How many tasks the fast path's chunks go to: TASKS_PER_CORE per core, or one per
    TASK_BYTES of input if that is more, never more than the chunks."""
    total = sum(chunk.end - chunk.start for chunk in chunks)
    return min(len(chunks), max(max(1, cores) * TASKS_PER_CORE, -(-total // TASK_BYTES)))


def task_groups(chunks: Sequence[Chunk], tasks: int) -> list[tuple[Chunk, ...]]:
    """The chunks dealt to at most `tasks` tasks: each chunk, largest first, to the task with
    the fewest bytes so far (LPT scheduling: no task ends more than one chunk's bytes after
    another), and the tasks largest first, since Spark runs them in order and the last wave is
    then of the smallest."""
    count = max(1, min(tasks, len(chunks)))
    groups: list[list[Chunk]] = [[] for _ in range(count)]
    loads = [(0, index) for index in range(count)]
    for chunk in sorted(chunks, key=lambda c: (c.start - c.end, c.file_id, c.start)):
        load, index = heapq.heappop(loads)
        groups[index].append(chunk)
        heapq.heappush(loads, (load + chunk.end - chunk.start, index))
    sized = sorted(loads, key=lambda entry: (-entry[0], entry[1]))
    return [tuple(groups[index]) for _, index in sized if groups[index]]


def ingest_chunks(
    chunks: Sequence[Chunk], events_dir: str, check_leader_epochs: bool = False, index_nodes: bool = False
) -> list[Outcome]:
    """ingest_chunk of each chunk of one task, in turn."""
    return [ingest_chunk(chunk, events_dir, check_leader_epochs, index_nodes) for chunk in chunks]


def ingest_chunk(
    chunk: Chunk, events_dir: str, check_leader_epochs: bool = False, index_nodes: bool = False
) -> Outcome:
    """Parses, checks and writes one chunk (in a Spark task). Writes nothing unless the whole
    chunk is accepted; each file is written under a temporary name and renamed, so a reader
    never sees half a file. With `check_leader_epochs`, also makes the leader-epoch check over
    the chunk's role changes (leader_epochs.check_chunk) and writes its candidates, if any,
    under CHECKS_DIR. With `index_nodes`, also returns each node's totals and writes its
    distinct record times under NODE_TIMES_DIR (node_index.summarize_chunk)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    data = _read(chunk)
    if isinstance(data, str):
        return Outcome(chunk.file_id, chunk.start, 0, data)
    irregular = _census(data)
    if irregular is not None:
        return Outcome(chunk.file_id, chunk.start, 0, irregular)
    table = _parse(data)
    if isinstance(table, str):
        return Outcome(chunk.file_id, chunk.start, 0, table)
    lines = _line_count(data)
    if table.num_rows != lines:
        return Outcome(chunk.file_id, chunk.start, 0, f"{table.num_rows} records in {lines} lines")
    rows = table.num_rows
    # 0, 1, 2, ... along the chunk's lines (Arrow's cumulative sum of ones, no Python loop),
    # before the rows are split by kind.
    table = table.append_column(
        "mid", pc.subtract(pc.cumulative_sum(_constant(rows, 1, pa.int64())), pa.scalar(1, pa.int64()))
    )
    by_kind = _by_kind(table)
    why = _malformed(table, by_kind)
    if why is not None:
        return Outcome(chunk.file_id, chunk.start, 0, why)
    groups: dict[str, list[Any]] = {}
    for kind, rows_of_kind in sorted(by_kind.items()):
        groups.setdefault(kind_group(kind), []).append(rows_of_kind)
    for group, tables in groups.items():
        rows_of = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        count = rows_of.num_rows
        carried = [name for name, _ in schema.FIELDS if rows_of[name].null_count < count]
        narrow = (
            rows_of.select([*carried, "mid"])
            .append_column("file_id", _constant(count, chunk.file_id, pa.int32()))
            .append_column("block", _constant(count, chunk.start, pa.int64()))
        )
        directory = os.path.join(events_dir, "status=ok", f"kind_group={group}")
        os.makedirs(directory, exist_ok=True)
        final = os.path.join(directory, f"{FILE_PREFIX}{chunk.file_id}-{chunk.start}.parquet")
        _write_parquet(narrow, directory, final, use_dictionary=_dictionary_columns(carried))
    checked: tuple[str, ...] = ()
    role_changes = by_kind.get("partition.role_changed")
    if check_leader_epochs and role_changes is not None:
        found = leader_epochs.check_chunk(role_changes, chunk.file_id, chunk.start)
        checked = found.nodes
        if found.candidates.num_rows:
            directory = os.path.join(events_dir, CHECKS_DIR)
            os.makedirs(directory, exist_ok=True)
            final = os.path.join(directory, f"{FILE_PREFIX}{chunk.file_id}-{chunk.start}.parquet")
            _write_parquet(found.candidates, directory, final, use_dictionary=True)
    totals: tuple[node_index.NodeTotal, ...] = ()
    if index_nodes:
        summary = node_index.summarize_chunk(table, chunk.file_id)
        totals = summary.totals
        directory = os.path.join(events_dir, NODE_TIMES_DIR)
        os.makedirs(directory, exist_ok=True)
        final = os.path.join(directory, f"{FILE_PREFIX}{chunk.file_id}-{chunk.start}.parquet")
        _write_parquet(summary.times, directory, final, use_dictionary=["node"])
    return Outcome(chunk.file_id, chunk.start, rows, None, checked, totals)


def _write_parquet(table: Any, directory: str, final: str, use_dictionary: bool | list[str]) -> None:
    """Writes under a temporary name, then renames: a reader never sees half a file."""
    import pyarrow.parquet as pq

    temporary = os.path.join(directory, f".{uuid.uuid4().hex}.tmp")
    pq.write_table(table, temporary, compression=COMPRESSION, use_dictionary=use_dictionary)
    os.replace(temporary, final)


def remove_written(events_dir: str, file_id: int) -> None:
    """Removes what the tasks wrote for a file that was turned down (some of its chunks may
    have been accepted): its records are then read by Spark's reader."""
    for directory, _subdirs, names in os.walk(events_dir):
        for name in names:
            if name.startswith(f"{FILE_PREFIX}{file_id}-"):
                os.remove(os.path.join(directory, name))


def clear(events_dir: str) -> None:
    """Removes everything the tasks wrote (after a failed run of them)."""
    for directory, _subdirs, names in os.walk(events_dir):
        for name in names:
            if name.startswith(FILE_PREFIX) or name.endswith(".tmp"):
                os.remove(os.path.join(directory, name))
