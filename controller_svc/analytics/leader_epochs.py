"""The leader-epoch check (invariants.leader_epoch_regression) made in the ingest's fast-path
tasks, on the role changes a task has just parsed, for every node whose role changes all lie in
that one chunk.

Spark's check sorts every role change of the history (5M of 10M records) by broker, partition
and position and runs two windows over them: at 10M events, 6-10 s of a 36-42 s warm job (the
job without the check: 30-32 s, one JVM, interleaved; issue 13's notes). A task holds its
chunk's role changes in Arrow already, and a broker's role changes are in its own log file,
which one task reads when the file is under arrow_ingest.CHUNK_BYTES: the same check there is a
sort of a few hundred thousand rows in Arrow's C++ kernels, about 40 ms per broker's 165k role
changes (the job with the check in the tasks against the check in Spark, 3 interleaved pairs in
one JVM: 36.9, 32.5, 30.5 s against 40.0, 36.5, 34.2 s).

Exactness: the check of a (broker, partition) looks only at that key's records, in position
order (ts, file_id, block, mid). When every record of a node lies in one chunk, file_id and
block are the chunk's own, so position order there is (ts, mid), which the task sorts by.
Which nodes qualify is decided over every chunk's outcome (`TaskChecks`): a node seen in two
chunks, or in a file Spark's readers read, is left to Spark's check, whole. For the rest, a task
returns the rows Spark's check would keep before its restart test (`reapplied_or_lower`: a
record at or below the highest epoch applied earlier in its generation), with the same values;
the restart test (a broker.started in between) is then made on those few rows by Spark as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controller_svc.analytics import schema

# The roles whose epochs the check compares (leader, follower) and the deletion that starts a
# partition over (a recreated topic's epochs begin again at 0).
CHECKED_ROLES = ("leader", "follower", "deleted")
# The columns of the rows a task returns, as written to its candidates file: the record and the
# earlier one it is compared with (same chunk, so same file_id and block).
CANDIDATE_COLUMNS = (
    ("node", "string"),
    ("topic", "string"),
    ("partition", "long"),
    ("ts", "long"),
    ("role", "string"),
    ("leader_epoch", "long"),
    ("mid", "long"),
    ("file_id", "int"),
    ("block", "long"),
    ("generation", "long"),
    ("prev_generation", "long"),
    ("prev_leader_epoch", "long"),
    ("prev_ts", "long"),
    ("prev_mid", "long"),
)


@dataclass(frozen=True)
class Checked:
    """A chunk's check: the nodes whose role changes it compared (`nodes`) and the rows at or
    below an earlier epoch of their generation (`candidates`, an Arrow table of
    CANDIDATE_COLUMNS, empty when there are none)."""

    nodes: tuple[str, ...]
    candidates: Any


@dataclass(frozen=True)
class TaskChecks:
    """What the ingest's tasks checked, for the whole job: `nodes` are checked in the tasks
    (each one's role changes lie in a single accepted chunk), `multi_chunk_nodes` were seen in
    more than one chunk, `fast_file_ids` are the files the tasks wrote, and `other_files` says
    whether Spark's readers read any file (whose nodes are not known without a scan).
    `candidates_dir`: where the tasks wrote their candidates (arrow_ingest.CHECKS_DIR)."""

    nodes: frozenset[str]
    multi_chunk_nodes: frozenset[str]
    fast_file_ids: frozenset[int]
    other_files: bool
    candidates_dir: str


def _changed(column: Any) -> Any:
    """True where a value differs from the one before it (and at the first row)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(column) == 0:
        return pa.array([], pa.bool_())
    return pa.concat_arrays(
        [pa.array([True], pa.bool_()), pc.not_equal(column.slice(1), column.slice(0, len(column) - 1))]
    )


def codes(column: Any) -> Any:
    """Integer codes of a string column (equal strings, equal codes): what the sort needs of a
    node or topic name, which only groups."""
    import pyarrow as pa
    import pyarrow.compute as pc

    whole = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return pc.dictionary_encode(whole).indices


@dataclass(frozen=True)
class Pairs:
    """The role changes at or below the highest epoch applied earlier in their generation
    (`at`, row numbers of the rows given to reapplied_or_lower) and the earlier record each is
    compared with (`prior`), with both records' generations."""

    at: Any
    prior: Any
    generation: Any
    prior_generation: Any


def reapplied_or_lower(keys: Any, group_columns: int, epoch: Any, deleted: Any) -> Pairs | None:
    """The check itself over rows in any order: `keys` (an Arrow table of numeric columns) names
    each row's group in its first `group_columns` columns and its position in the others;
    `epoch` and `deleted` (Arrow arrays) are each row's leader epoch and whether it is a
    deletion. None when no row is a candidate.

    Per group, in position order: `generation` counts the deletions before a record; the record
    is a candidate when an earlier leader/follower record of the same generation has an epoch
    at or above its own, and the prior record is the highest such (the latest among equals), as
    Spark's max of (generation, leader_epoch, pos) over the earlier rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    count = keys.num_rows
    # Composite values below are rank * count + index: they must fit in an int64.
    assert count < 1 << 31, count
    order = pc.sort_indices(keys, sort_keys=[(name, "ascending") for name in keys.column_names])
    groups = [keys[name].combine_chunks().take(order) for name in keys.column_names[:group_columns]]
    epoch = epoch.take(order)
    deleted = deleted.take(order)
    # Typed scalars: a Python number makes pyarrow infer its type, and the inference tries to
    # import dateutil, a search of sys.path on every call where it is not installed (~0.1 ms).
    zero, one, count_value = (pa.scalar(value, pa.int64()) for value in (0, 1, count))
    index = pc.subtract(pc.cumulative_sum(pc.fill_null(pa.nulls(count, pa.int64()), one)), one)
    new_key = _changed(groups[0])
    for column in groups[1:]:
        new_key = pc.or_(new_key, _changed(column))
    key = pc.cumulative_sum(pc.cast(new_key, pa.int64()))
    key_start = pc.cumulative_max(pc.if_else(new_key, index, zero))
    # Deletions strictly before a record, in its key: its generation.
    deletions = pc.cumulative_sum(pc.cast(deleted, pa.int64()))
    before = pc.subtract(deletions, pc.cast(deleted, pa.int64()))
    generation = pc.subtract(before, before.take(key_start))
    # Dense rank of (key, generation, epoch): larger for a later key, then a later generation,
    # then a higher epoch. With the index as the last digit, one running max over all rows is
    # each record's highest (generation, epoch, position) so far; deletions take no part.
    by_value = pc.sort_indices(
        pa.table({"key": key, "generation": generation, "epoch": epoch}),
        sort_keys=[("key", "ascending"), ("generation", "ascending"), ("epoch", "ascending")],
    )
    distinct = pc.or_(
        pc.or_(_changed(key.take(by_value)), _changed(generation.take(by_value))), _changed(epoch.take(by_value))
    )
    rank = pc.cumulative_sum(pc.cast(distinct, pa.int64())).take(pc.sort_indices(by_value))
    composite = pc.if_else(deleted, pa.scalar(-1, pa.int64()), pc.add(pc.multiply(rank, count_value), index))
    so_far = pc.cumulative_max(composite)
    # The running max before each row: shifted by one.
    before_max = pa.concat_arrays([pa.array([-1], pa.int64()), so_far.slice(0, count - 1)])
    has_earlier = pc.greater_equal(before_max, zero)
    earlier = pc.if_else(
        has_earlier, pc.subtract(before_max, pc.multiply(pc.divide(before_max, count_value), count_value)), zero
    )
    # The running max may be a previous key's (no earlier record in this one): not a match then.
    candidate = pc.and_(
        pc.and_(has_earlier, pc.invert(deleted)),
        pc.and_(
            pc.equal(key.take(earlier), key),
            pc.and_(
                pc.equal(generation.take(earlier), generation),
                pc.less_equal(epoch, epoch.take(earlier)),
            ),
        ),
    )
    if not pc.any(candidate).as_py():
        return None
    at = pc.filter(index, candidate)
    prior = pc.filter(earlier, candidate)
    return Pairs(order.take(at), order.take(prior), generation.take(at), generation.take(prior))


def check_chunk(rows: Any, file_id: int, block: int) -> Checked:
    """The leader-epoch check over one chunk's partition.role_changed rows (an Arrow table with
    node, topic, partition, role, leader_epoch, ts and mid, none of them null: the fast path
    accepts no chunk with a role change missing one), whose records carry `file_id` and `block`:
    per (node, topic, partition) in (ts, mid) order (reapplied_or_lower)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = rows.filter(pc.is_in(rows["role"], value_set=pa.array(CHECKED_ROLES, pa.string())))
    count = rows.num_rows
    if count == 0:
        return Checked((), schema.task_columns_arrow(CANDIDATE_COLUMNS).empty_table())
    nodes = tuple(sorted(pc.unique(rows["node"]).to_pylist()))
    keys = pa.table(
        {
            "node": codes(rows["node"]),
            "topic": codes(rows["topic"]),
            "partition": rows["partition"].combine_chunks(),
            "ts": rows["ts"].combine_chunks(),
            "mid": rows["mid"].combine_chunks(),
        }
    )
    pairs = reapplied_or_lower(
        keys,
        3,
        rows["leader_epoch"].combine_chunks(),
        pc.equal(rows["role"].combine_chunks(), pa.scalar("deleted", pa.string())),
    )
    if pairs is None:
        return Checked(nodes, schema.task_columns_arrow(CANDIDATE_COLUMNS).empty_table())
    this, that = rows.take(pairs.at), rows.take(pairs.prior)
    found = len(pairs.at)
    candidates = pa.table(
        {
            "node": this["node"],
            "topic": this["topic"],
            "partition": this["partition"],
            "ts": this["ts"],
            "role": this["role"],
            "leader_epoch": this["leader_epoch"],
            "mid": this["mid"],
            "file_id": pa.nulls(found, pa.int32()).fill_null(file_id),
            "block": pa.nulls(found, pa.int64()).fill_null(block),
            "generation": pairs.generation,
            "prev_generation": pairs.prior_generation,
            "prev_leader_epoch": that["leader_epoch"],
            "prev_ts": that["ts"],
            "prev_mid": that["mid"],
        },
        schema=schema.task_columns_arrow(CANDIDATE_COLUMNS),
    )
    return Checked(nodes, candidates)


def task_checks(
    chunk_nodes: list[tuple[int, tuple[str, ...]]], fast_file_ids: set[int], other_files: bool, candidates_dir: str
) -> TaskChecks:
    """TaskChecks from every accepted chunk's (file_id, nodes checked): a node counts as
    checked when it was seen in exactly one chunk."""
    chunks_of: dict[str, int] = {}
    for _file_id, nodes in chunk_nodes:
        for name in nodes:
            chunks_of[name] = chunks_of.get(name, 0) + 1
    return TaskChecks(
        nodes=frozenset(name for name, chunks in chunks_of.items() if chunks == 1),
        multi_chunk_nodes=frozenset(name for name, chunks in chunks_of.items() if chunks > 1),
        fast_file_ids=frozenset(fast_file_ids),
        other_files=other_files,
        candidates_dir=candidates_dir,
    )
