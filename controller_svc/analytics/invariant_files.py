"""The safety invariants of contract 6 (invariants.py) checked in the driver from the events
table's local Parquet files with Arrow and numpy, with no Spark query.

invariants.all_violations defines the checks; Spark runs them as 6 stages, 5.9 s of a cold run
at 1M events (2.2 s warm; bench/results/stages-1m-offline-files-ab-new-1.json), nearly all of
it planning, scheduling and the JIT: the records they read are few (the controllers' claims to
an epoch and the brokers' applied requests, 16k of each at 1M events; the elections, 84k) or
were checked in the ingest's tasks already (the role changes, leader_epochs.py). This finds the
same violations, field for field (tests/pipeline/test_invariant_files.py compares them with
Spark's on hand-made, generated and random histories of several clusters), and job.py resolves
their evidence as before; a history without violations, the common case, needs no Spark query
at all then.

Exactness: each check orders records by position (ts, file_id, block, mid) as Spark's windows
do, and groups by the same keys. A record without a file id (a file the files table does not
name) or a cluster cannot be ordered or grouped as Spark's nulls are without more care than
such a history deserves: `NotExact` is raised and job.py lets Spark check it.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from controller_svc.analytics import leader_epochs, schema
from controller_svc.analytics.events_files import (
    BROKER_PREFIX,
    CONTROLLER_PREFIX,
    EventsFiles,
    NotExact,
    has_role,
    node_id,
)

POSITION = ("ts", "file_id", "block", "mid")
Evidence = tuple[int, int, int]
Position = tuple[int, int, int, int]
# The unresolved violations as invariants.all_violations gives them (job.resolve_evidence reads them).
UNRESOLVED_DDL = (
    "cluster string, invariant string, subject string, detail string, ts bigint, "
    "records array<struct<file_id: int, block: bigint, mid: bigint>>"
)


@dataclasses.dataclass(frozen=True)
class Violation:
    """One row of invariants.all_violations: `records` are the offending records' identities
    (file_id, block, mid), in the order Spark's check lists them."""

    cluster: str
    invariant: str
    subject: str
    detail: str
    ts: int
    records: tuple[Evidence, ...]

    def row(self) -> tuple[Any, ...]:
        """The row as UNRESOLVED_DDL has it."""
        records = [{"file_id": file_id, "block": block, "mid": mid} for file_id, block, mid in self.records]
        return (self.cluster, self.invariant, self.subject, self.detail, self.ts, records)


def all_violations(files: EventsFiles, checks: leader_epochs.TaskChecks | None) -> list[Violation]:
    """Every invariant's violations in `files`; `checks`: the leader-epoch checks the ingest's
    tasks made (None: none made, every role change is checked here)."""
    received = _read(files, "request.received", RECEIVED_COLUMNS)  # both checks use it: read once
    return [
        *single_controller_per_epoch(files, received),
        *stale_controller_epoch_applied(files, received),
        *leader_epoch_regression(files, checks),
        *unclean_election_without_permission(files),
    ]


def _text(value: Any) -> str:
    """A value as Spark's format_string prints it (%d and %s alike): null as "null"."""
    return "null" if value is None else str(value)


def _read(files: EventsFiles, kind: str, columns: dict[str, str], **where: Any) -> Any:
    """EventsFiles.read of `columns` (name: schema.FIELDS' type) and ts, refusing records
    NotExact names."""
    import pyarrow as pa

    arrow = {
        schema.STRING: pa.string(),
        schema.LONG: pa.int64(),
        schema.BOOLEAN: pa.bool_(),
        schema.LONG_ARRAY: pa.list_(pa.int64()),
    }
    table = files.read(
        kind, {"ts": pa.int64(), **{name: arrow[kind_type] for name, kind_type in columns.items()}}, **where
    )
    for name in ("cluster", *POSITION):
        if table[name].null_count:
            raise NotExact(f"{kind} records without {name}")
    return table


def _named(table: Any, role: str) -> Any:
    """The rows written by `role`'s nodes (timelines.of_role): named so, with an id."""
    import pyarrow as pa
    import pyarrow.compute as pc

    nodes = [node for node in pc.unique(table["node"]).to_pylist() if has_role(node, role)]
    return table.filter(pc.is_in(table["node"], value_set=pa.array(nodes, pa.string())))


def _sorted(table: Any, keys: Sequence[str]) -> Any:
    """The table in the order of `keys` then the records' positions."""
    import pyarrow.compute as pc

    columns = [*keys, *POSITION]
    return table.take(pc.sort_indices(table, sort_keys=[(name, "ascending") for name in columns]))


def _position(row: dict[str, Any]) -> Position:
    return (row["ts"], row["file_id"], row["block"], row["mid"])


def _evidence(row: dict[str, Any]) -> Evidence:
    return (row["file_id"], row["block"], row["mid"])


# --- single_controller_per_epoch ------------------------------------------------------------


# The columns of request.received the controller-epoch checks read (`_read` adds ts and the position).
RECEIVED_COLUMNS = {
    "node": "string",
    "api": "string",
    "controller_id": "long",
    "controller_epoch": "long",
    "result": "string",
}


def single_controller_per_epoch(files: EventsFiles, received: Any = None) -> list[Violation]:
    """invariants.single_controller_per_epoch: an epoch claimed by more than one controller (by
    an election, a request sent by a controller node, or a request received naming its
    sender), and an election whose epoch is below one elected earlier in its cluster.
    `received`: the request.received records as `_read` gives them with RECEIVED_COLUMNS, when
    the caller has read them already."""
    import pyarrow as pa

    elected = _read(files, "controller.elected", {"controller_id": "long", "controller_epoch": "long"})
    sent = _named(
        _read(files, "request.sent", {"node": "string", "controller_epoch": "long"}, node_prefix=CONTROLLER_PREFIX),
        "controller",
    )
    if received is None:
        received = _read(files, "request.received", RECEIVED_COLUMNS)
    sent_ids = _node_ids(sent["node"])
    claims = pa.concat_tables(
        [
            _claims(elected, elected["controller_id"]),
            _claims(sent, sent_ids),
            _claims(received, received["controller_id"]),
        ]
    )
    return [*_shared_epochs(claims), *_backwards(elected)]


def _node_ids(nodes: Any) -> Any:
    """Each row's node id (events_files.node_id), worked out once per name."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = pc.unique(nodes)
    ids = pa.array([node_id(name) for name in names.to_pylist()], pa.int64())
    return ids.take(pc.index_in(nodes, value_set=names))


def _claims(table: Any, claimant: Any) -> Any:
    import pyarrow as pa

    return pa.table(
        {
            "cluster": table["cluster"],
            "controller_epoch": table["controller_epoch"],
            "claimant": claimant,
            **{name: table[name] for name in POSITION},
        }
    )


def _shared_epochs(claims: Any) -> Iterator[Violation]:
    """Per (cluster, epoch) claimed by more than one claimant: the claimants' ids in order, the
    earliest claim's time and each claimant's first claim, in position order."""
    import pyarrow.compute as pc

    keys = ["cluster", "controller_epoch"]
    if claims["controller_epoch"].null_count or claims["claimant"].null_count:
        # Spark groups nulls as one key and counts what collect_list drops: not worth copying.
        raise NotExact("a claim to an epoch without the epoch or the claimant")
    per_epoch = claims.group_by(keys).aggregate([("claimant", "count_distinct")])
    shared = per_epoch.filter(pc.greater(per_epoch["claimant_count_distinct"], 1)).select(keys)
    if shared.num_rows == 0:
        return
    firsts: dict[tuple[str, int], dict[int, Position]] = {}
    for row in claims.join(shared, keys, join_type="inner").to_pylist():
        claimants = firsts.setdefault((row["cluster"], row["controller_epoch"]), {})
        at = _position(row)
        if row["claimant"] not in claimants or at < claimants[row["claimant"]]:
            claimants[row["claimant"]] = at
    for (cluster, epoch), claimants in firsts.items():
        earliest = sorted(claimants.values())
        yield Violation(
            cluster,
            schema.SINGLE_CONTROLLER_PER_EPOCH,
            f"controller epoch {epoch}",
            f"epoch {epoch} claimed by controllers {', '.join(str(claimant) for claimant in sorted(claimants))}",
            earliest[0][0],
            tuple(at[1:] for at in earliest),
        )


def _backwards(elected: Any) -> Iterator[Violation]:
    """Per cluster in position order: an election below the highest (epoch, controller,
    record) elected before it."""
    highest: dict[str, tuple[int, int, int, int, int]] = {}
    for row in _sorted(elected, ["cluster"]).to_pylist():
        mine = (row["controller_epoch"], row["controller_id"], *_evidence(row))
        before = highest.get(row["cluster"])
        if before is not None and row["controller_epoch"] < before[0]:
            yield Violation(
                row["cluster"],
                schema.SINGLE_CONTROLLER_PER_EPOCH,
                f"controller epoch {row['controller_epoch']}",
                f"controller {row['controller_id']} elected with epoch {row['controller_epoch']} after controller "
                f"{before[1]} had been elected with epoch {before[0]}",
                row["ts"],
                (before[2:], _evidence(row)),
            )
        highest[row["cluster"]] = mine if before is None or mine > before else before


# --- stale_controller_epoch_applied ---------------------------------------------------------


def stale_controller_epoch_applied(files: EventsFiles, received: Any = None) -> list[Violation]:
    """invariants.stale_controller_epoch_applied: a broker applying a request whose controller
    epoch is below one it applied earlier. Found with numpy over every applied request; the
    earlier request a violation names is then looked for in its broker's requests alone.
    `received`: as single_controller_per_epoch takes it (every node's: brokers' kept here)."""
    import numpy as np
    import pyarrow.compute as pc

    if received is None:
        received = _read(files, "request.received", RECEIVED_COLUMNS, node_prefix=BROKER_PREFIX)
    received = _named(received, "broker")
    applied = _sorted(
        received.filter(pc.fill_null(pc.equal(received["result"], "applied"), False)), ["cluster", "node"]
    )
    if applied.num_rows == 0:
        return []
    if applied["controller_epoch"].null_count or applied["controller_id"].null_count:
        raise NotExact("an applied request without its controller epoch or id")
    from controller_svc.analytics import partition_tasks

    group = np.cumsum(partition_tasks.run_starts(applied, ("cluster", "node")))
    epoch = applied["controller_epoch"].to_numpy()
    has_earlier, highest = earlier_max(group, epoch)
    stale_groups = np.unique(group[has_earlier & (epoch < highest)])
    found: list[Violation] = []
    for rows in _groups(applied, group, stale_groups):
        best: tuple[Any, ...] | None = None
        for row in rows:
            if best is not None and row["controller_epoch"] < best[0]:
                found.append(
                    Violation(
                        row["cluster"],
                        schema.STALE_CONTROLLER_EPOCH_APPLIED,
                        row["node"],
                        f"{row['node']} applied {_text(row['api'])} from controller {row['controller_id']} "
                        f"at epoch {row['controller_epoch']} after applying epoch {best[0]} "
                        f"(controller {best[1]})",
                        row["ts"],
                        (best[2:], _evidence(row)),
                    )
                )
            mine = (row["controller_epoch"], row["controller_id"], *_evidence(row))
            best = mine if best is None or mine > best else best
    return found


def _groups(table: Any, group: Any, wanted: Any) -> Iterator[list[dict[str, Any]]]:
    """The rows of each group in `wanted` (group numbers of a sorted table), in order."""
    import numpy as np

    for number in wanted:
        at = np.flatnonzero(group == number)
        yield table.slice(int(at[0]), len(at)).to_pylist()


def earlier_max(group: Any, value: Any) -> tuple[Any, Any]:
    """For rows sorted by `group` (non-decreasing numbers): whether an earlier row of the same
    group exists, and the highest `value` among the earlier rows of its group (any value where
    there is none). With the dense rank of (group, value) in place of the value, one running
    max over every row never mixes groups: a later group's ranks are all higher."""
    import numpy as np

    count = len(value)
    order = np.lexsort((value, group))
    ordered_group, ordered_value = group[order], value[order]
    distinct = np.ones(count, dtype=bool)
    distinct[1:] = (ordered_group[1:] != ordered_group[:-1]) | (ordered_value[1:] != ordered_value[:-1])
    rank = np.empty(count, dtype=np.int64)
    rank[order] = np.cumsum(distinct) - 1
    rank_group, rank_value = ordered_group[distinct], ordered_value[distinct]
    before = np.full(count, -1, dtype=np.int64)
    if count > 1:
        before[1:] = np.maximum.accumulate(rank)[:-1]
    at = np.maximum(before, 0)
    has_earlier = (before >= 0) & (rank_group[at] == group)
    return has_earlier, rank_value[at]


# --- leader_epoch_regression ----------------------------------------------------------------


ROLE_COLUMNS = {"node": "string", "topic": "string", "partition": "long", "role": "string", "leader_epoch": "long"}


def leader_epoch_regression(files: EventsFiles, checks: leader_epochs.TaskChecks | None) -> list[Violation]:
    """invariants.leader_epoch_regression: the role changes at or below the highest epoch their
    broker applied earlier in the partition's generation, from the ingest's tasks for the nodes
    they checked and from a check here of the others' records (a node the tasks saw in several
    chunks, or in a file Spark's readers read, or every node without the tasks' checks); then
    the same epoch is allowed again across a broker.started of its node."""
    in_tasks, left = _split_nodes(files, checks)
    candidates = [*_task_candidates(files, checks, in_tasks), *_checked_here(left)]
    if not candidates:
        return []
    starts = _starts(files)
    found = []
    for row in candidates:
        if row["leader_epoch"] == row["prev_leader_epoch"]:
            started = starts.get((row["cluster"], row["node"]), [])
            # A start after the earlier record and at or before this one allows it.
            first_after = bisect.bisect_right(started, row["prev_pos"])
            if first_after < len(started) and started[first_after] <= row["pos"]:
                continue
        found.append(
            Violation(
                row["cluster"],
                schema.LEADER_EPOCH_REGRESSION,
                f"{row['node']} {row['topic']}-{row['partition']}",
                f"{row['node']} applied {row['role']} at leader epoch {row['leader_epoch']} "
                f"after leader epoch {row['prev_leader_epoch']}",
                row["ts"],
                (row["prev_evidence"], row["evidence"]),
            )
        )
    return found


def _split_nodes(files: EventsFiles, checks: leader_epochs.TaskChecks | None) -> tuple[frozenset[str], Any]:
    """The broker nodes whose candidates the tasks found, and the role changes (leader,
    follower, deleted) of the others, as invariants.leader_epoch_regression divides them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def roles(nodes: Iterable[str] | None = None) -> Any:
        where: dict[str, Any] = {"node_prefix": BROKER_PREFIX}
        if nodes is not None:
            where["nodes"] = sorted(nodes)
        table = _named(_read(files, "partition.role_changed", ROLE_COLUMNS, **where), "broker")
        return table.filter(pc.is_in(table["role"], value_set=pa.array(leader_epochs.CHECKED_ROLES)))

    if checks is None:
        return frozenset(), roles()
    if not checks.other_files:
        # Every record was seen by a task: only the nodes seen in several chunks are left.
        multi = checks.multi_chunk_nodes
        return checks.nodes, roles(multi) if multi else None
    # A node with records in a file Spark's readers read was only partly seen by the tasks.
    every = roles()
    fast = pa.array(sorted(checks.fast_file_ids), pa.int32())
    elsewhere = pc.unique(every.filter(pc.invert(pc.is_in(every["file_id"], value_set=fast)))["node"]).to_pylist()
    in_tasks = checks.nodes - set(elsewhere)
    return in_tasks, every.filter(pc.invert(pc.is_in(every["node"], value_set=pa.array(sorted(in_tasks), pa.string()))))


def _task_candidates(
    files: EventsFiles, checks: leader_epochs.TaskChecks | None, in_tasks: frozenset[str]
) -> Iterator[dict[str, Any]]:
    """The candidates the tasks wrote (leader_epochs.CANDIDATE_COLUMNS) for the nodes in
    `in_tasks`: the earlier record is in the same chunk, so it has the same file_id and block."""
    import pyarrow.dataset as ds

    if checks is None or not in_tasks or not os.path.isdir(checks.candidates_dir):
        return
    parts = [os.path.join(checks.candidates_dir, name) for name in sorted(os.listdir(checks.candidates_dir))]
    parts = [path for path in parts if path.endswith(".parquet")]
    if not parts:
        return
    written = ds.dataset(parts, format="parquet", schema=schema.task_columns_arrow(leader_epochs.CANDIDATE_COLUMNS))
    table = written.to_table(filter=ds.field("node").isin(sorted(in_tasks)))
    for row in table.to_pylist():
        if not has_role(row["node"], "broker"):
            continue
        cluster = files.cluster(row["file_id"])
        if cluster is None or row["file_id"] is None:
            raise NotExact("a candidate of the tasks' leader-epoch check without its file's cluster")
        yield {
            **row,
            "cluster": cluster,
            "pos": (row["ts"], row["file_id"], row["block"], row["mid"]),
            "evidence": (row["file_id"], row["block"], row["mid"]),
            "prev_pos": (row["prev_ts"], row["file_id"], row["block"], row["prev_mid"]),
            "prev_evidence": (row["file_id"], row["block"], row["prev_mid"]),
        }


def _checked_here(roles: Any) -> Iterator[dict[str, Any]]:
    """leader_epochs' check over `roles` (any files, any clusters): per (cluster, node, topic,
    partition) in position order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if roles is None or roles.num_rows == 0:
        return
    for name in ("node", "topic", "partition", "role", "leader_epoch"):
        if roles[name].null_count:
            raise NotExact(f"a role change without {name}")
    keys = pa.table(
        {
            "cluster": leader_epochs.codes(roles["cluster"]),
            "node": leader_epochs.codes(roles["node"]),
            "topic": leader_epochs.codes(roles["topic"]),
            "partition": roles["partition"].combine_chunks(),
            **{name: roles[name].combine_chunks() for name in POSITION},
        }
    )
    pairs = leader_epochs.reapplied_or_lower(
        keys, 4, roles["leader_epoch"].combine_chunks(), pc.equal(roles["role"].combine_chunks(), "deleted")
    )
    if pairs is None:
        return
    this, that = roles.take(pairs.at).to_pylist(), roles.take(pairs.prior).to_pylist()
    for row, prior in zip(this, that, strict=True):
        yield {
            **row,
            "pos": _position(row),
            "evidence": _evidence(row),
            "prev_leader_epoch": prior["leader_epoch"],
            "prev_pos": _position(prior),
            "prev_evidence": _evidence(prior),
        }


def _starts(files: EventsFiles) -> dict[tuple[str, str], list[Position]]:
    """Each (cluster, node)'s broker.started positions, in order."""
    started = _read(files, "broker.started", {"node": "string"})
    found: dict[tuple[str, str], list[Position]] = {}
    for row in started.to_pylist():
        found.setdefault((row["cluster"], row["node"]), []).append(_position(row))
    for positions in found.values():
        positions.sort()
    return found


# --- unclean_election_without_permission ----------------------------------------------------


def unclean_election_without_permission(files: EventsFiles) -> list[Violation]:
    """invariants.unclean_election_without_permission: a clean election (not of a new
    partition) whose leader is not in the previous ISR. As Spark's array_contains, a previous
    ISR holding a null is neither a match nor a miss: the election is not reported."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    elections = _read(
        files,
        "partition.leader_elected",
        {
            "topic": "string",
            "partition": "long",
            "leader": "long",
            "leader_epoch": "long",
            "controller_epoch": "long",
            "strategy": "string",
            "prev_isr": "array<long>",
            "unclean": "boolean",
        },
    )
    if elections.num_rows == 0:
        return []
    prev_isr, unclean = elections["prev_isr"].combine_chunks(), elections["unclean"].combine_chunks()
    leader = elections["leader"].combine_chunks()
    considered = np.asarray(
        pc.and_(
            pc.and_(
                pc.fill_null(pc.invert(unclean), False),
                pc.fill_null(pc.not_equal(elections["strategy"].combine_chunks(), "new"), False),
            ),
            pc.and_(pc.fill_null(pc.greater_equal(leader, 0), False), prev_isr.is_valid()),
        ),
        dtype=bool,
    )
    members = pc.list_flatten(prev_isr)
    parents = np.asarray(pc.list_parent_indices(prev_isr), dtype=np.int64)
    same = np.asarray(pc.fill_null(pc.equal(members, leader.take(pa.array(parents))), False), dtype=bool)
    unknown = np.asarray(members.is_null(), dtype=bool)
    count = elections.num_rows
    matched = np.bincount(parents[same], minlength=count) > 0
    undecided = np.bincount(parents[unknown], minlength=count) > 0
    offending = np.flatnonzero(considered & ~matched & ~undecided)
    found = []
    for at in offending:
        row = elections.slice(int(at), 1).to_pylist()[0]
        previous = prev_isr[int(at)].as_py()
        found.append(
            Violation(
                row["cluster"],
                schema.UNCLEAN_ELECTION_WITHOUT_PERMISSION,
                f"{_text(row['topic'])}-{_text(row['partition'])}",
                f"{row['strategy']} election flagged clean chose {row['leader']} (leader epoch "
                f"{_text(row['leader_epoch'])}, controller epoch {_text(row['controller_epoch'])}), not in the "
                f"previous ISR [{', '.join(str(member) for member in previous)}]",
                row["ts"],
                (_evidence(row),),
            )
        )
    return found


def write_empty_table(directory: str) -> None:
    """The violations table with no rows, as job._no_violations gives it to Spark's writer
    (zstd, marked written whole): what a history without violations gets."""
    import pyarrow as pa

    from controller_svc.analytics import partition_tasks

    evidence = pa.struct([("file", pa.string()), ("line", pa.int64()), ("record", pa.string())])
    columns = pa.schema(
        [
            ("cluster", pa.string()),
            ("invariant", pa.string()),
            ("subject", pa.string()),
            ("detail", pa.string()),
            ("ts", pa.int64()),
            ("records", pa.list_(evidence)),
        ]
    )
    partition_tasks.replace_table(columns.empty_table(), directory)
