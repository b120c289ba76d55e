"""The offline intervals table from the events table's local Parquet files, with no Spark query:
the few losses and deletions found in the driver with Arrow, then one Python task per core
(partition_tasks.py) that reads its partitions' controller and broker records itself, adds
their broker losses and deletions, scans them (offline_scan.py) and writes its part of the
table.

timelines.offline_intervals defines the table; offline_scan.intervals computes it from rows
Spark selects, unions and writes for its tasks (1.16M rows at 1M events), and from the lost
brokers' last signs of life that Spark joins and record_search's tasks search. Those were 15
Spark stages and 6.3 s of a cold run at 1M events (4.0 s warm), about half of it the driver
planning and scheduling (bench/results/stages-1m-analytics-7b8074d.json). This computes the
same rows, column for column (tests/pipeline/test_offline_files.py compares them with Spark's
on the hand-made histories and on generated ones with several clusters).

Like controller_tables.py it needs the events table in a local directory and a driver with
pyarrow and numpy (job.py's `_scans_dir`); job.py falls back to Spark's queries otherwise, or
when this fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence
from typing import Any

from pyspark.sql import SparkSession

from controller_svc.analytics import offline_scan, partition_tasks
from controller_svc.analytics.events_files import BROKER_PREFIX, EventsFiles, dictionary_string, has_role, node_id

LOSSES_DIR, DELETIONS_DIR = "losses", "deletions"
SUCCESS_MARKER = partition_tasks.SUCCESS_MARKER
DEREGISTERED, BOUNCED = "broker_deregistered", "broker_bounced"
SET_TO_NONE, LOG_DIR_FAILED = "leader_set_to_none", "leader_log_dir_failed"
Position = tuple[Any, Any, Any, Any]


def write(
    spark: SparkSession,
    files: EventsFiles,
    liveness: Iterable[tuple[str, str]],
    leaders_dir: str,
    work_dir: str,
    table_dir: str,
    node_times_dir: str | None = None,
) -> int:
    """Writes the offline intervals table into `table_dir` (a local directory, replaced) as the
    job's Spark queries would, and returns its rows. `liveness`: the (cluster, node) that write
    node.alive; `leaders_dir`: leadership_scan's timeline files; `work_dir`: a local directory
    of the job's own for the losses and deletions, which the caller removes afterwards;
    `node_times_dir`: the fast path's node times (node_index.py), when they cover every file."""
    import pyarrow.parquet as pq

    shutil.rmtree(work_dir, ignore_errors=True)
    shutil.rmtree(table_dir, ignore_errors=True)
    os.makedirs(work_dir)
    os.makedirs(table_dir)
    losses_dir, deletions_dir = os.path.join(work_dir, LOSSES_DIR), os.path.join(work_dir, DELETIONS_DIR)
    losses = broker_losses(files, liveness, node_times_dir)
    for table, directory in ((losses, losses_dir), (deletions(files), deletions_dir)):
        os.makedirs(directory)
        pq.write_table(table, os.path.join(directory, "part-00000.parquet"))
    found = partition_tasks.run(spark, _task, files, (leaders_dir, losses_dir, deletions_dir), table_dir)
    # As Spark's writer marks a table written whole.
    with open(os.path.join(table_dir, SUCCESS_MARKER), "w", encoding="utf-8"):
        pass
    return sum(found)


def _task(args: tuple[Any, ...]) -> int:
    files, loss_dirs, table_dir, share, shares = args
    return write_share(files, loss_dirs, table_dir, share, shares)


def write_share(files: EventsFiles, loss_dirs: tuple[str, str, str], table_dir: str, share: int, shares: int) -> int:
    """One task: the intervals of the partitions whose number is `share` modulo `shares`, from
    their records, leaderships, and every loss and deletion; writes its part of the table (zstd,
    as Spark's writer in session.build; a file even when empty) and returns its rows."""
    rows = offline_scan.with_losses(
        own_rows(files, share, shares), *offline_scan.read_loss_inputs(loss_dirs, share, shares)
    )
    found = offline_scan.sorted_intervals(rows)
    partition_tasks.write_part(found, table_dir, share, compression="zstd")
    return int(found.num_rows)


def own_rows(files: EventsFiles, share: int, shares: int) -> Any:
    """The share's timeline rows that come from one record each (offline_scan.ROWS_DDL): the
    controllers' leader -1 (partition.offline, by any node), and the role changes a broker
    recorded as its own partition's leader: applied (regained) or stopped by a failed log dir
    (lost). timelines.offline_intervals' `own_rows`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    longs = {name: pa.int64() for name in ("partition", "ts", "leader_epoch")}
    offline = partition_tasks.in_share(files.read("partition.offline", {"topic": pa.string(), **longs}), share, shares)
    # The role changes are most of the records (5M of 10M events) and every task reads them
    # all, to keep a sixth: their strings stay dictionary-encoded as the files hold them, and
    # the rows are filtered once, by one mask (10M events, one core: 1.0-1.2 s a task instead
    # of 1.55-1.94 s).
    text = dictionary_string()
    roles = files.read(
        "partition.role_changed",
        {"topic": text, **longs, "leader": pa.int64(), "node": text, "role": text, "reason": text},
        node_prefix=BROKER_PREFIX,
        with_cluster=False,
    )
    is_leader = _flags(pc.equal(roles["role"], "leader"))
    log_dir_failed = _flags(pc.and_(pc.equal(roles["role"], "stopped"), pc.equal(roles["reason"], "log_dir_failure")))
    recorder, is_broker = _broker_ids(roles["node"])
    leader = roles["leader"]
    own = (
        is_broker
        & _flags(pc.is_valid(leader))
        & (pc.fill_null(leader, 0).to_numpy() == recorder)
        & (is_leader | log_dir_failed)
    )
    keep = own & partition_tasks.share_mask(roles["partition"], share, shares)
    # Their clusters once filtered (a string per row).
    roles, leader = files.with_clusters(roles.filter(pa.array(keep))), is_leader[keep]
    schema = offline_scan.rows_schema()

    def rows(table: Any, regained: Any, cause: Any, new_leader: Any) -> Any:
        return pa.table(
            {
                "cluster": table["cluster"],
                "topic": table["topic"],
                "partition": table["partition"],
                "ts": table["ts"],
                "regain_last": pa.array(regained.astype(np.int32)),
                "pos_ts": table["ts"],
                "file_id": table["file_id"],
                "block": table["block"],
                "mid": table["mid"],
                "cause": cause,
                "epoch": table["leader_epoch"],
                "change_code": pa.array(np.where(regained, offline_scan.REGAINED, offline_scan.LOST).astype(np.int8)),
                "new_leader": new_leader,
                "alive_ts": pa.nulls(table.num_rows, pa.int64()),
            }
        ).cast(schema)

    count = offline.num_rows
    set_to_none = rows(
        offline,
        np.zeros(count, dtype=bool),
        pa.repeat(pa.scalar(SET_TO_NONE, pa.string()), count),
        pa.nulls(count, pa.int64()),
    )
    changes = rows(
        roles,
        leader,
        pc.if_else(pa.array(leader), pa.scalar(None, pa.string()), pa.scalar(LOG_DIR_FAILED, pa.string())),
        pc.if_else(pa.array(leader), roles["leader"], pa.scalar(None, pa.int64())),
    )
    return pa.concat_tables([set_to_none, changes])


def deletions(files: EventsFiles) -> Any:
    """Every topic.deleted record (cluster, topic, the position's fields, ts), as
    offline_scan.with_losses reads them."""
    import pyarrow as pa

    table = files.read("topic.deleted", {"topic": pa.string(), "ts": pa.int64()})
    return pa.table(
        {
            "cluster": table["cluster"],
            "topic": table["topic"],
            "pos_ts": table["ts"],
            "file_id": table["file_id"],
            "block": table["block"],
            "mid": table["mid"],
            "ts": table["ts"],
        }
    )


def broker_losses(files: EventsFiles, liveness: Iterable[tuple[str, str]], node_times_dir: str | None = None) -> Any:
    """One row per broker a broker.change record names dead or bounced (cluster, broker, the
    position's fields, ts, cause, alive_ts), as offline_scan.with_losses reads them:
    timelines.offline_intervals' `lost_brokers` with the broker's last sign of life before the
    loss was seen (deregistered) or before its new incarnation registered (bounced), for the
    brokers that write node.alive. Few rows (thousands at 10M events): plain Python."""
    import pyarrow as pa

    longs = pa.list_(pa.int64())
    changes = files.read("broker.change", {"ts": pa.int64(), "dead": longs, "bounced": longs})
    losses = [
        (record["cluster"], broker, _position(record), record["ts"], cause)
        for record in changes.to_pylist()
        for cause, column in ((DEREGISTERED, "dead"), (BOUNCED, "bounced"))
        for broker in record[column] or []
    ]
    alive = _last_alive(files, _alive_before(files, losses), liveness, node_times_dir)
    rows = [
        {
            "cluster": cluster,
            "broker": broker,
            "pos_ts": position[0],
            "file_id": position[1],
            "block": position[2],
            "mid": position[3],
            "ts": ts,
            "cause": cause,
            "alive_ts": None if cluster is None or broker is None else alive.get((cluster, position, broker)),
        }
        for cluster, broker, position, ts, cause in losses
    ]
    schema = pa.schema(
        [
            ("cluster", pa.string()),
            ("broker", pa.int64()),
            ("pos_ts", pa.int64()),
            ("file_id", pa.int32()),
            ("block", pa.int64()),
            ("mid", pa.int64()),
            ("ts", pa.int64()),
            ("cause", pa.string()),
            ("alive_ts", pa.int64()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def _node_records(files: EventsFiles, nodes: Sequence[str], node_times_dir: str | None) -> Any:
    """The `nodes`' record times (node dictionary-encoded, ts, file_id): from the fast path's
    node times (node_index.py: each chunk's distinct times per node, 2.8M rows at 10M events)
    when `node_times_dir` is given (they must cover every file), else every record of the
    events table (8.7M broker records there). Equal times of a node change no last sign of life."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    columns = {"node": dictionary_string(), "ts": pa.int64()}
    if node_times_dir is None:
        return files.read(
            None, columns, node_prefix=BROKER_PREFIX, nodes=nodes, with_cluster=False, with_position=False
        )
    wanted = pa.schema([*columns.items(), ("file_id", pa.int32())])
    if not os.path.isdir(node_times_dir):
        return wanted.empty_table()
    # Files under a temporary name (a leading '.') are ignored, as Spark's reader ignores them.
    found = ds.dataset(
        node_times_dir,
        format=ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=["node"])),
        schema=wanted,
    )
    return found.to_table(filter=ds.field("node").isin(sorted(nodes))).replace_schema_metadata(None)


def _flags(column: Any) -> Any:
    """A boolean Arrow column as a numpy mask, null as False."""
    import pyarrow.compute as pc

    return pc.fill_null(column, False).to_numpy(zero_copy_only=False)


def _broker_ids(nodes: Any) -> tuple[Any, Any]:
    """Each row's broker id from its node's name (a dictionary-encoded Arrow column), worked out
    once per name, and whether it has one (of_role: a node that is not a broker, or none, has
    not), as numpy arrays."""
    import numpy as np

    codes, names = _dictionary_codes(nodes)
    by_name = [node_id(name) if has_role(name, "broker") else None for name in names]
    # One more entry, for a row without a node (code -1).
    ids = np.array([0 if found is None else found for found in by_name] + [0], dtype=np.int64)
    known = np.array([found is not None for found in by_name] + [False], dtype=bool)
    return ids[codes], known[codes]


def _dictionary_codes(column: Any) -> tuple[Any, list[str]]:
    """Each row of a dictionary-encoded Arrow column (its chunks each with a dictionary of its
    own) as an index into the distinct values returned, -1 for null, as a numpy array."""
    import numpy as np
    import pyarrow.compute as pc

    index: dict[str, int] = {}
    codes = [np.zeros(0, dtype=np.int64)]
    for chunk in column.chunks:
        values = chunk.dictionary.to_pylist()
        # The chunk's codes in the column's; the last entry for a null row.
        lookup = np.array([index.setdefault(value, len(index)) for value in values] + [-1], dtype=np.int64)
        codes.append(lookup[pc.fill_null(chunk.indices, len(values)).to_numpy()])
    names = [value for value, _ in sorted(index.items(), key=lambda item: item[1])]
    return np.concatenate(codes), names


def _position(record: dict[str, Any]) -> Position:
    return (record["ts"], record["file_id"], record["block"], record["mid"])


def _alive_before(
    files: EventsFiles, losses: Sequence[tuple[Any, Any, Position, Any, str]]
) -> list[tuple[str, Position, int, int]]:
    """(cluster, position, broker, alive_before) per distinct loss that has a bound: the
    broker's last sign of life is before the loss was seen (ts + 1: before it, exclusive), or,
    bounced, before the latest registration of the broker's id at or before the loss. As
    Spark's left join, filter and aggregate give it: a loss whose broker only registered later
    has no bound; one whose broker never registered is bounded by its time when deregistered."""
    import pyarrow as pa

    registered: dict[tuple[str, int], list[int | None]] = {}
    for record in files.read("broker.registered", {"node": pa.string(), "ts": pa.int64()}).to_pylist():
        broker = node_id(record["node"])
        if record["cluster"] is not None and broker is not None:
            registered.setdefault((record["cluster"], broker), []).append(record["ts"])
    bounds = []
    for cluster, broker, position, ts, cause in set(losses):
        times = registered.get((cluster, broker)) if cluster is not None and broker is not None else None
        latest = None
        if times:
            kept = [time for time in times if time is None or (ts is not None and time <= ts)]
            if not kept:
                continue
            latest = max((time for time in kept if time is not None), default=None)
        before = latest if cause == BOUNCED else (None if ts is None else ts + 1)
        if before is not None and cluster is not None and broker is not None:
            bounds.append((cluster, position, broker, before))
    return bounds


def _last_alive(
    files: EventsFiles,
    bounds: Sequence[tuple[str, Position, int, int]],
    liveness: Iterable[tuple[str, str]],
    node_times_dir: str | None = None,
) -> dict[tuple[str, Position, int], int]:
    """Per (cluster, position, broker) of a loss: the latest record before its bound of a node
    named as that broker (broker-N) that writes node.alive, of any kind (timelines.node_records:
    every record is a sign of life); the latest over the loss's bounds and such nodes. From
    `node_times_dir` (_node_records) when given."""
    import numpy as np
    import pyarrow.compute as pc

    nodes_of: dict[tuple[str, int], list[str]] = {}
    for cluster, node in set(liveness):
        broker = node_id(node)
        if has_role(node, "broker") and broker is not None:
            nodes_of.setdefault((cluster, broker), []).append(node)
    queries = [
        (cluster, position, broker, node, before)
        for cluster, position, broker, before in bounds
        for node in nodes_of.get((cluster, broker), [])
    ]
    wanted = sorted({node for _, _, _, node, _ in queries})
    times: dict[tuple[str, str], Any] = {}
    if wanted:
        # Every record of the lost brokers (7M at 10M events; 2.8M distinct times), read with
        # its node's name dictionary-encoded and its cluster as a code: each (cluster, node) one
        # integer, the records grouped by it (numpy's argsort of integers), then each group's
        # times sorted. One Arrow sort of every record by (cluster, node, ts), two strings and a
        # time, took 1.9 s of the driver's before the offline intervals' tasks could start.
        records = _node_records(files, wanted, node_times_dir)
        cluster_codes, cluster_names = files.cluster_codes(records["file_id"])
        node_codes, node_names = _dictionary_codes(records["node"])
        valid = (cluster_codes >= 0) & (node_codes >= 0) & _flags(pc.is_valid(records["ts"]))
        node_key = cluster_codes[valid] * len(node_names) + node_codes[valid]
        ts = pc.fill_null(records["ts"], 0).to_numpy()[valid]
        order = np.argsort(node_key, kind="stable")
        node_key, ts = node_key[order], ts[order]
        starts: list[int] = (
            np.flatnonzero(np.concatenate(([True], node_key[1:] != node_key[:-1]))).tolist() if len(node_key) else []
        )
        ends = [*starts[1:], len(node_key)] if starts else []
        for start, end in zip(starts, ends, strict=True):
            cluster_code, node_code = divmod(int(node_key[start]), len(node_names))
            times[(cluster_names[cluster_code], node_names[node_code])] = np.sort(ts[start:end])
    alive: dict[tuple[str, Position, int], int] = {}
    for cluster, position, broker, node, before in queries:
        seen = times.get((cluster, node))
        if seen is None:
            continue
        index = int(np.searchsorted(seen, before, side="left")) - 1
        if index < 0:
            continue
        key, latest = (cluster, position, broker), int(seen[index])
        alive[key] = latest if key not in alive else max(alive[key], latest)
    return alive
