"""The controllers' two tables, controller_tenures and failover_incidents, from the events
table's local Parquet files, read with Arrow and computed in the driver's Python, instead of
Spark's queries.

timelines.controller_tenures and timelines.failover_incidents define the tables; this computes
the same rows, column for column (tests/pipeline/test_controller_tables.py compares the two on
the hand-made histories, on generated ones with several clusters, and on random elections with
zombies, duplicates and missing records). The large inputs are aggregated with Arrow first (a
controller's records per node and epoch, the UpdateMetadata requests sent per broker and those
applied per broker and epoch); what is left is one row per election, broker or node, which plain
Python joins as Spark's plan does, multiplicities included.

Why: the two tables were 30 Spark stages in the controllers' branch of the job (9 and 21: a
controller's activity joined with its tenures, the live brokers' union and anti-join, the
applied requests, the last sign of life's search), 4.9 s of a cold run at 1M events and 2.6 s
warm when the steps run one after another (bench.analytics_stages at dc2ad32), almost all of it
the driver planning, generating code and scheduling for inputs of a few thousand rows once
aggregated. Like the timelines' scans, it needs the events table in a local directory and a
driver with pyarrow and numpy (job.py's `_scans_dir`); job.py falls back to Spark's queries
otherwise, or when this fails.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from controller_svc.analytics import leadership_scan, partition_tasks
from controller_svc.analytics.events_files import BROKER_PREFIX, CONTROLLER_PREFIX, EventsFiles, has_role, node_id

UPDATE_METADATA = "UpdateMetadata"
Value = TypeVar("Value")


def tenures_schema() -> Any:
    """controller_tenures as Spark writes it (timelines.controller_tenures without start_pos)."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("cluster", pa.string(), nullable=False),
            pa.field("controller_epoch", pa.int64()),
            pa.field("controller_id", pa.int64()),
            pa.field("node", pa.string()),
            pa.field("vacancy_ts", pa.int64()),
            pa.field("start_ts", pa.int64()),
            pa.field("end_ts", pa.int64()),
            pa.field("ended", pa.string(), nullable=False),
            pa.field("resign_reason", pa.string()),
            pa.field("last_active_ts", pa.int64()),
            pa.field("duration_ms", pa.int64()),
        ]
    )


def incidents_schema() -> Any:
    """failover_incidents as Spark writes it (timelines.failover_incidents)."""
    import pyarrow as pa

    longs = ("previous_last_active_ts", "fault_ts", "lost_ts")
    later = ("elected_ts", "converged_ts", "detection_ms", "election_ms", "propagation_ms", "total_ms")
    return pa.schema(
        [
            pa.field("cluster", pa.string()),
            pa.field("controller_epoch", pa.int64()),
            pa.field("controller_id", pa.int64()),
            pa.field("previous_epoch", pa.int64()),
            pa.field("previous_controller", pa.int64()),
            pa.field("previous_ended", pa.string()),
            pa.field("previous_resign_reason", pa.string()),
            *[pa.field(name, pa.int64()) for name in longs],
            pa.field("lost_evidence", pa.string(), nullable=False),
            *[pa.field(name, pa.int64()) for name in later],
            pa.field("load_ms", pa.float64()),
            pa.field("brokers", pa.int64(), nullable=False),
            pa.field("brokers_applied", pa.int64(), nullable=False),
            pa.field("brokers_not_applied", pa.list_(pa.field("element", pa.int64(), nullable=False)), nullable=False),
        ]
    )


# --- what the tables are computed from ------------------------------------------------------


def _position(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """timelines.position() as a sort key: (ts, file_id, block, mid), nulls first."""
    return tuple(_nulls_first(row[name]) for name in leadership_scan.POSITION_FIELDS)


def _nulls_first(value: Any) -> tuple[int, Any]:
    return (0, 0) if value is None else (1, value)


def _key(*values: Any) -> tuple[Any, ...] | None:
    """A join key; None when any part is null (a null key meets nothing, as in Spark's joins)."""
    return None if any(value is None for value in values) else tuple(values)


def _get(mapping: Mapping[tuple[Any, ...], Value], key: tuple[Any, ...] | None) -> Value | None:
    """mapping[key] as a left join finds it: None for a null key or none there."""
    return None if key is None else mapping.get(key)


def _rows(table: Any, columns: Sequence[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = table.select(list(columns)).to_pylist()
    return rows


def _earliest_per_key(rows: Iterable[dict[str, Any]], key: Sequence[str]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Per distinct `key` (nulls a group of their own, as Spark's groupBy): the row with the least
    position (min_by over timelines.position())."""
    earliest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        group = tuple(row[name] for name in key)
        if group not in earliest or _position(row) < _position(earliest[group]):
            earliest[group] = row
    return earliest


def _grouped_extreme(table: Any, keys: Sequence[str], column: str, how: str) -> Any:
    """Arrow's group-by: per distinct `keys`, the min or max of `column` (nulls ignored)."""
    grouped = table.group_by(list(keys), use_threads=False).aggregate([(column, how)])
    return grouped.rename_columns([*[name for name in grouped.column_names[:-1]], column])


# --- controller_tenures ---------------------------------------------------------------------


def tenures(files: EventsFiles, controller_records: Any) -> list[dict[str, Any]]:
    """timelines.controller_tenures' rows (start_pos as `_start_pos`, a sort key). `controller_records`:
    every record of a node named as a controller's (controller_records)."""
    import pyarrow as pa

    elected_table = files.read(
        "controller.elected",
        {
            "ts": pa.int64(),
            "node": pa.string(),
            "controller_epoch": pa.int64(),
            "controller_id": pa.int64(),
            "vacancy_ts": pa.int64(),
        },
    )
    elected = _rows(elected_table, [*elected_table.column_names])
    in_order = sorted(
        elected, key=lambda row: (_nulls_first(row["cluster"]), _position(row), _nulls_first(row["controller_epoch"]))
    )
    for index, row in enumerate(in_order):
        following = in_order[index + 1] if index + 1 < len(in_order) else None
        same_cluster = following is not None and following["cluster"] == row["cluster"]
        row["next_start_ts"] = following["ts"] if same_cluster and following is not None else None
    resigned_table = files.read(
        "controller.resigned",
        {"ts": pa.int64(), "node": pa.string(), "controller_epoch": pa.int64(), "reason": pa.string()},
    )
    # Per key: min(ts) and min_by(reason, position), two aggregates: the least time need not be
    # the earliest record's where files disagree.
    resigned_rows = _rows(resigned_table, resigned_table.column_names)
    least_ts: dict[tuple[Any, ...], int] = {}
    for row in resigned_rows:
        group = (row["cluster"], row["node"], row["controller_epoch"])
        if row["ts"] is not None:
            least_ts[group] = row["ts"] if group not in least_ts else min(least_ts[group], row["ts"])
    resigned = {
        group: (row["reason"], least_ts.get(group))
        for group, row in _earliest_per_key(resigned_rows, ("cluster", "node", "controller_epoch")).items()
    }

    # The activity's bound per key: joined with every election of its key, a record is kept when
    # any of them has no successor, or one at or after the record.
    bounds: dict[tuple[Any, ...], int | None] = {}
    for row in elected:
        elected_key = _key(row["cluster"], row["node"], row["controller_epoch"])
        if elected_key is None or not has_role(row["node"], "controller"):
            continue
        if elected_key in bounds and bounds[elected_key] is None:
            continue
        bound = row["next_start_ts"]
        earlier = bounds.get(elected_key)
        bounds[elected_key] = bound if bound is None or earlier is None else max(bound, earlier)
    activity = _activity(controller_records, bounds)

    rows = []
    for row in elected:
        joined = _key(row["cluster"], row["node"], row["controller_epoch"])
        reason, resigned_ts = _get(resigned, joined) or (None, None)
        next_start = row["next_start_ts"]
        resigned_in_office = resigned_ts is not None and (next_start is None or resigned_ts <= next_start)
        ends = [value for value in (resigned_ts, next_start) if value is not None]
        end = min(ends) if ends else None
        ended = "resigned" if resigned_in_office else "superseded" if next_start is not None else "active"
        rows.append(
            {
                "cluster": row["cluster"],
                "controller_epoch": row["controller_epoch"],
                "controller_id": row["controller_id"],
                "node": row["node"],
                "vacancy_ts": row["vacancy_ts"],
                "start_ts": row["ts"],
                "end_ts": end,
                "ended": ended,
                "resign_reason": reason,
                "last_active_ts": _get(activity, joined),
                "duration_ms": None if end is None or row["ts"] is None else end - row["ts"],
            }
        )
    return rows


def controller_records(files: EventsFiles) -> Any:
    """(cluster, node, controller_epoch, ts) of every record of a node named as a controller's
    (timelines.node_records' and the activity's rows), of every kind."""
    import pyarrow as pa

    table = files.read(None, {"ts": pa.int64(), "node": pa.string(), "controller_epoch": pa.int64()}, CONTROLLER_PREFIX)
    return table.select(["cluster", "node", "controller_epoch", "ts"])


def _activity(records: Any, bounds: Mapping[tuple[Any, ...], int | None]) -> dict[tuple[Any, ...], int]:
    """Per (cluster, node, epoch) of `bounds` (the key's successor's start, None for none): the
    latest record of the key at or before its bound."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not bounds:
        return {}
    with_epoch = records.filter(pc.and_(pc.is_valid(records["controller_epoch"]), pc.is_valid(records["ts"])))
    keys = list(bounds)
    bound_table = pa.table(
        {
            "cluster": pa.array([key[0] for key in keys], pa.string()),
            "node": pa.array([key[1] for key in keys], pa.string()),
            "controller_epoch": pa.array([key[2] for key in keys], pa.int64()),
            "_bound": pa.array([bounds[key] for key in keys], pa.int64()),
        }
    )
    joined = with_epoch.join(bound_table, ["cluster", "node", "controller_epoch"], join_type="inner")
    kept = joined.filter(pc.or_kleene(pc.is_null(joined["_bound"]), pc.less_equal(joined["ts"], joined["_bound"])))
    latest = _grouped_extreme(kept.drop_columns(["_bound"]), ["cluster", "node", "controller_epoch"], "ts", "max")
    return {(row["cluster"], row["node"], row["controller_epoch"]): row["ts"] for row in latest.to_pylist()}


# --- failover_incidents ---------------------------------------------------------------------


def incidents(
    files: EventsFiles,
    tenure_rows: Sequence[dict[str, Any]],
    controller_records: Any,
    liveness: Iterable[tuple[str, str]],
) -> list[dict[str, Any]]:
    """timelines.failover_incidents' rows for `tenure_rows` (the controller_tenures table's),
    `liveness` the (cluster, node) that write node.alive."""
    chained = _chained(tenure_rows)
    completed = _completed(files)
    targets = _targets(files, completed)
    applied = _applied(files)

    # Every broker the new controller had to reach, per chained election (each election of a
    # key counts its targets again, as the join does).
    per_broker: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in chained:
        group = _key(row["cluster"], row["node"], row["controller_epoch"])
        if group is None:
            continue
        for broker in targets.get(group, ()):
            applied_ts = _get(applied, _key(row["cluster"], row["controller_epoch"], broker))
            reached = per_broker.setdefault(group, {"brokers": 0, "applied": 0, "last": None, "not_applied": []})
            reached["brokers"] += 1
            if applied_ts is None:
                if broker is not None:
                    reached["not_applied"].append(broker)
                continue
            reached["applied"] += 1
            reached["last"] = applied_ts if reached["last"] is None else max(reached["last"], applied_ts)

    last_alive = _last_alive(chained, controller_records, set(liveness))
    rows = []
    for row in chained:
        incident_key = _key(row["cluster"], row["node"], row["controller_epoch"])
        entry = _get(per_broker, incident_key)
        done = _get(completed, incident_key)
        alive = _get(last_alive, _key(row["cluster"], row["controller_epoch"]))
        fault = alive if alive is not None else row["lost_ts"]
        converged = entry["last"] if entry is not None and entry["applied"] == entry["brokers"] else None
        rows.append(
            {
                "cluster": row["cluster"],
                "controller_epoch": row["controller_epoch"],
                "controller_id": row["controller_id"],
                "previous_epoch": row["previous_epoch"],
                "previous_controller": row["previous_controller"],
                "previous_ended": row["previous_ended"],
                "previous_resign_reason": row["previous_resign_reason"],
                "previous_last_active_ts": row["previous_last_active_ts"],
                "fault_ts": fault,
                "lost_ts": row["lost_ts"],
                "lost_evidence": row["lost_evidence"],
                "elected_ts": row["start_ts"],
                "converged_ts": converged,
                "detection_ms": _minus(row["lost_ts"], fault),
                "election_ms": _minus(row["start_ts"], row["lost_ts"]),
                "propagation_ms": _minus(converged, row["start_ts"]),
                "total_ms": _minus(converged, fault),
                "load_ms": done["load_ms"] if done is not None else None,
                "brokers": entry["brokers"] if entry is not None else 0,
                "brokers_applied": entry["applied"] if entry is not None else 0,
                "brokers_not_applied": sorted(entry["not_applied"]) if entry is not None else [],
            }
        )
    return rows


def _minus(later: int | None, earlier: int | None) -> int | None:
    return None if later is None or earlier is None else later - earlier


def _chained(tenure_rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each election after another in its cluster (by start_ts, then epoch), with the previous
    tenure's columns and how its loss was seen (lost_ts, lost_evidence)."""
    in_order = sorted(
        tenure_rows,
        key=lambda row: (
            _nulls_first(row["cluster"]),
            _nulls_first(row["start_ts"]),
            _nulls_first(row["controller_epoch"]),
        ),
    )
    chained = []
    for previous, row in itertools.pairwise(in_order):
        if previous["cluster"] != row["cluster"] or previous["controller_epoch"] is None:
            continue
        start = row["start_ts"]
        previous_end = previous["end_ts"]
        resigned_before = (
            previous_end
            if previous["ended"] == "resigned"
            and previous_end is not None
            and start is not None
            and previous_end <= start
            else None
        )
        vacancy = row["vacancy_ts"]
        seen_vacancy = (
            vacancy
            if vacancy is not None and previous["start_ts"] is not None and vacancy >= previous["start_ts"]
            else None
        )
        known = [value for value in (resigned_before, seen_vacancy) if value is not None]
        known_loss = min(known) if known else None
        if known_loss is None:
            evidence = "last_record"
        elif resigned_before is not None and resigned_before == known_loss:
            evidence = "resigned"
        else:
            evidence = "vacancy_observed"
        chained.append(
            {
                **row,
                "previous_epoch": previous["controller_epoch"],
                "previous_controller": previous["controller_id"],
                "previous_node": previous["node"],
                "previous_ended": previous["ended"],
                "previous_resign_reason": previous["resign_reason"],
                "previous_last_active_ts": previous["last_active_ts"],
                "lost_ts": known_loss if known_loss is not None else previous["last_active_ts"],
                "lost_evidence": evidence,
            }
        )
    return chained


def _completed(files: EventsFiles) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Per (cluster, node, epoch): the earliest controller.failover_completed (ts, load_ms,
    live_brokers)."""
    import pyarrow as pa

    table = files.read(
        "controller.failover_completed",
        {
            "ts": pa.int64(),
            "node": pa.string(),
            "controller_epoch": pa.int64(),
            "load_ms": pa.float64(),
            "live_brokers": pa.list_(pa.int64()),
        },
    )
    earliest = _earliest_per_key(_rows(table, table.column_names), ("cluster", "node", "controller_epoch"))
    return {group: row for group, row in earliest.items() if _key(*group) is not None}


def _targets(
    files: EventsFiles, completed: Mapping[tuple[Any, ...], dict[str, Any]]
) -> dict[tuple[Any, ...], set[int | None]]:
    """Per (cluster, node, epoch): the live brokers the new controller recorded, else those it
    sent UpdateMetadata to before it completed its failover (at all, without that record)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = files.read(
        "request.sent",
        {
            "ts": pa.int64(),
            "node": pa.string(),
            "controller_epoch": pa.int64(),
            "broker": pa.int64(),
            "api": pa.string(),
        },
    )
    updates = table.filter(pc.fill_null(pc.equal(table["api"], UPDATE_METADATA), False))
    # The earliest send per broker decides whether any came before the completion.
    first_sent = _grouped_extreme(
        updates.select(["cluster", "node", "controller_epoch", "broker", "ts"]),
        ["cluster", "node", "controller_epoch", "broker"],
        "ts",
        "min",
    )
    recorded: dict[tuple[Any, ...], set[int | None]] = {}
    for group, row in completed.items():
        # explode: an empty list gives no rows, so the sends count for that election.
        if row["live_brokers"]:
            recorded[group] = set(row["live_brokers"])
    targets: dict[tuple[Any, ...], set[int | None]] = {group: set(brokers) for group, brokers in recorded.items()}
    for row in first_sent.to_pylist():
        sent_key = _key(row["cluster"], row["node"], row["controller_epoch"])
        if sent_key is None or sent_key in recorded:
            continue
        done = completed.get(sent_key)
        completed_ts = done["ts"] if done is not None else None
        if completed_ts is None or (row["ts"] is not None and row["ts"] <= completed_ts):
            targets.setdefault(sent_key, set()).add(row["broker"])
    return targets


def _applied(files: EventsFiles) -> dict[tuple[Any, ...], int]:
    """Per (cluster, epoch, broker id): when the broker first applied that epoch's UpdateMetadata."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = files.read(
        "request.received",
        {
            "ts": pa.int64(),
            "node": pa.string(),
            "controller_epoch": pa.int64(),
            "api": pa.string(),
            "result": pa.string(),
        },
        BROKER_PREFIX,
    )
    is_applied = pc.and_kleene(pc.equal(table["api"], UPDATE_METADATA), pc.equal(table["result"], "applied"))
    per_node = _grouped_extreme(
        table.filter(pc.fill_null(is_applied, False)).select(["cluster", "node", "controller_epoch", "ts"]),
        ["cluster", "node", "controller_epoch"],
        "ts",
        "min",
    )
    applied: dict[tuple[Any, ...], int] = {}
    for row in per_node.to_pylist():
        if not has_role(row["node"], "broker") or row["ts"] is None:
            continue
        group = _key(row["cluster"], row["controller_epoch"], node_id(row["node"]))
        if group is not None:
            applied[group] = row["ts"] if group not in applied else min(applied[group], row["ts"])
    return applied


def _last_alive(
    chained: Sequence[dict[str, Any]], records: Any, liveness: set[tuple[str, str]]
) -> dict[tuple[Any, ...], int]:
    """Per (cluster, epoch): the previous controller's last record at or before the loss, for the
    previous controllers that write node.alive (the latest over elections of one epoch)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    queries = [
        row
        for row in chained
        if row["lost_ts"] is not None
        and (row["cluster"], row["previous_node"]) in liveness
        and has_role(row["previous_node"], "controller")
    ]
    nodes = sorted({(row["cluster"], row["previous_node"]) for row in queries})
    times: dict[tuple[str, str], Any] = {}
    if nodes:
        wanted = records.filter(
            pc.and_(
                pc.is_in(records["node"], value_set=pa.array(sorted({node for _, node in nodes}), pa.string())),
                pc.is_valid(records["ts"]),
            )
        )
        for cluster, node in nodes:
            mine = wanted.filter(
                pc.fill_null(pc.and_(pc.equal(wanted["cluster"], cluster), pc.equal(wanted["node"], node)), False)
            )
            times[(cluster, node)] = np.sort(np.asarray(mine["ts"].combine_chunks(), dtype=np.int64))
    last_alive: dict[tuple[Any, ...], int] = {}
    for row in queries:
        seen = times[(row["cluster"], row["previous_node"])]
        index = int(np.searchsorted(seen, row["lost_ts"], side="right")) - 1
        group = (row["cluster"], row["controller_epoch"])
        if index < 0 or _key(*group) is None:
            continue
        latest = int(seen[index])
        last_alive[group] = latest if group not in last_alive else max(last_alive[group], latest)
    return last_alive


# --- the tables ------------------------------------------------------------------------------


def write(
    files: EventsFiles, liveness: Iterable[tuple[str, str]], tenures_dir: str, incidents_dir: str
) -> tuple[int, int]:
    """Writes both tables into their local directories (replaced) as the job's writes would, and
    returns their row counts."""
    import pyarrow as pa

    records = controller_records(files)
    tenure_rows = tenures(files, records)
    incident_rows = incidents(files, tenure_rows, records, liveness)
    for rows, schema, directory in (
        (tenure_rows, tenures_schema(), tenures_dir),
        (incident_rows, incidents_schema(), incidents_dir),
    ):
        table = pa.Table.from_pylist([{name: row[name] for name in schema.names} for row in rows], schema=schema)
        partition_tasks.replace_table(table, directory)
    return len(tenure_rows), len(incident_rows)
