"""Timelines of a cluster's history: controller tenures, failover incidents, partition
leadership, offline intervals and control-request latency. DataFrame in, DataFrame out: only
the small results the report plots ever reach the driver.

Records of one node are ordered by (ts, file_id, block, mid): the file's line order breaks ties
inside a millisecond, which the controller's own records (broker change, then elections) rely on
(file_id is the file's rank by name, ingest.file_table).
"""

from __future__ import annotations

import functools
import logging
import shutil
from collections.abc import Callable

from py4j.protocol import Py4JJavaError
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from controller_svc.analytics import offline_scan, record_search, schema
from controller_svc.analytics.ingest import with_node_columns

POSITION_COLUMNS = ("ts", "file_id", "block", "mid")
log = logging.getLogger("analytics")


class HeldFrames:
    """The few-row frames a timeline caches for its own queries (last_record_before's queries,
    first_loss_in_tenure's losses), and the working directories whose files a frame reads
    (offline_scan's), released by the caller once the tables built from them are written.
    Spark's cache keeps a frame until it is unpersisted: without this, every analysis in a
    long-lived session (a notebook, the benchmark's warm runs) left three behind."""

    def __init__(self) -> None:
        self._frames: list[DataFrame] = []
        self._directories: list[str] = []

    def cache(self, frame: DataFrame) -> DataFrame:
        cached = frame.cache()
        self._frames.append(cached)
        return cached

    def persist(self, frame: DataFrame, level: StorageLevel) -> DataFrame:
        persisted = frame.persist(level)
        self._frames.append(persisted)
        return persisted

    def remove(self, directory: str) -> None:
        """A local working directory whose files a frame reads: removed on release."""
        self._directories.append(directory)

    def release(self) -> None:
        while self._frames:
            self._frames.pop().unpersist()
        while self._directories:
            shutil.rmtree(self._directories.pop(), ignore_errors=True)


def position() -> Column:
    """Order of records: time, then the order of lines within a file (ingest's block and mid)."""
    return F.struct(*POSITION_COLUMNS)


def ref() -> Column:
    """A record's identity in the events table, resolved to file:line only for what is reported."""
    return F.struct("file_id", "block", "mid")


def of_kind(events: DataFrame, kind: str) -> DataFrame:
    """Records of one kind; the filter is on the events table's partition column, so only that
    kind's files are read."""
    assert kind in schema.KNOWN_KINDS, kind
    return events.filter(F.col("kind_group") == kind)


def of_role(events: DataFrame, role: str) -> DataFrame:
    """Records written by `role`'s nodes (controller, broker). The node_role column is derived,
    so Parquet cannot filter on it; the node-name prefix it implies can: the scan skips the
    files whose node statistics hold only other nodes. A controller's scans then read the
    controllers' few records instead of every broker's (10M events: 1.6M rows read, not 10M)."""
    return events.filter(_named_as(role) & (F.col("node_role") == role))


def _named_as(role: str) -> Column:
    """The node's name begins as a `role` node's does (contract 5: controller-N, broker-N)."""
    assert role in ("controller", "broker"), role
    return F.col("node").startswith(f"{role}-")


# --- controllers ---------------------------------------------------------------------------


def writers_of_liveness(events: DataFrame) -> DataFrame:
    """(cluster, node) of the nodes that write `node.alive`: a scan of those records. The job
    passes the same few rows from its per-node totals instead (job._per_cluster), which read
    every record already."""
    return of_kind(events, "node.alive").select("cluster", "node").distinct()


def liveness_nodes(writers: DataFrame, role: str) -> DataFrame:
    """(cluster, node, node_id) of the `role`'s nodes among `writers` (writers_of_liveness:
    the nodes that write `node.alive` at a fixed interval): for them, the last record of any
    kind bounds when the process stopped. A node without liveness records (an older log) gives
    no such bound: its losses are counted from when they were seen, as before. Few rows (one
    per node)."""
    # The role and id are derived from a node's name once per node, not once per record.
    return of_role(with_node_columns(writers.select("cluster", "node")), role).select("cluster", "node", "node_id")


def node_records(events: DataFrame, role: str, signs_of_life: DataFrame | None = None) -> DataFrame:
    """(cluster, node, ts) of every record written by a node named as `role`'s are, or of
    `signs_of_life` when given (the same times, fewer rows: ingest.signs_of_life). Which of
    those nodes count (liveness_nodes) is decided on the few queries about them, not on these
    millions of rows: a join of every broker record with the nodes' table was a third of the
    last-sign-of-life lookup at 10M events."""
    source = events if signs_of_life is None else signs_of_life
    return source.filter(_named_as(role)).select("cluster", "node", "ts")


# Up to this many query times for one key, records meet their key's times in a broadcast join;
# beyond it (a node lost thousands of times in a long history) they are sorted with them.
JOINED_QUERY_TIMES = 64
# The broadcast slot table is cut into time buckets (at most this many per key, and this many
# rows in all), so that a record is compared with the one or two slots of its bucket instead of
# every slot of its key: 9M broker records x ~40 losses per broker were 360M comparisons.
SLOT_BUCKETS_PER_KEY = 1024
SLOT_BUCKET_ROWS = 200_000


def _time_buckets(first: int, last: int, key_count: int) -> Callable[[Column], Column]:
    """The bucket of a time, for slot tables (at most SLOT_BUCKETS_PER_KEY buckets per key and
    SLOT_BUCKET_ROWS in all): bucket b holds the times [first + b * width, first + (b + 1) *
    width); earlier and later times fall into the first and the last bucket, so every time has one."""
    buckets = max(1, min(SLOT_BUCKETS_PER_KEY, SLOT_BUCKET_ROWS // max(1, key_count)))
    width = (last - first) // buckets + 1

    def bucket(t: Column) -> Column:
        return F.least(F.greatest(F.floor((t - first) / width), F.lit(0)), F.lit(buckets - 1)).cast("int")

    return bucket


def last_record_before(
    queries: DataFrame,
    records: DataFrame,
    keys: list[str],
    at: str,
    inclusive: bool,
    alias: str,
    held: HeldFrames,
    search_dir: str | None = None,
) -> DataFrame:
    """For each query row, the latest `ts` among `records` with the same keys before the query's
    `at` (at or before it when `inclusive`), as column `alias` (null when there is none).

    The query times of a key cut its time line into slots; each record falls into one slot and
    one aggregate keeps each slot's latest record; a query's answer is the latest of the slots
    before it. With few times per key (losses per broker, failovers per controller) a record
    finds its slot in a broadcast join against its key's times cut into time buckets (so it
    meets the one or two slots of its bucket, not all of its key's), no sort of the records
    needed; with many, by one sort of records and queries together (`_sorted_last_record_before`).
    Joining every query with every record of its node and keeping the latest was quadratic:
    115 losses x 300k records per broker at 10M events.

    `search_dir`: record_search's tasks answer the queries instead (Arrow and numpy, working in
    this local directory, removed when `held` is released); Spark's search above when they fail.
    """
    # Few rows with a long lineage (elections, losses): computed once, for the choice below and the
    # answer. A cache, not a local checkpoint: an executor lost meanwhile (dynamic allocation on a
    # cluster) only costs a recomputation. Held until the caller releases it.
    queries = held.cache(queries)
    if search_dir is not None and record_search.searchable(queries, keys):
        held.remove(search_dir)
        try:
            answers = record_search.answers(
                queries.filter(F.col(at).isNotNull()).select(*keys, F.col(at).alias("_at")),
                records,
                keys,
                inclusive,
                alias,
                search_dir,
            )
            return _with_answers(queries, answers, keys, at, alias)
        except Py4JJavaError as e:
            # As for the timelines' scans (offline_intervals): a failed task is never a reason to
            # fail the job; Spark's search gives the same answers, slower.
            log.warning("the search for %s failed; Spark's search answers it: %s", alias, str(e).splitlines()[0])
    timed = queries.filter(F.col(at).isNotNull()).select(*keys, F.col(at).alias("_at")).distinct()
    shape = (
        timed.groupBy(*keys)
        .agg(F.count("*").alias("times"))
        .agg(F.max("times"), F.count("*"))
        .crossJoin(timed.agg(F.min("_at"), F.max("_at")))
        .first()
    )
    if shape is None or shape[0] is None:
        return queries.withColumn(alias, F.lit(None).cast("bigint"))
    most, key_count, first_at, last_at = (int(v) for v in shape)
    if most > JOINED_QUERY_TIMES:
        return _sorted_last_record_before(queries, records, keys, at, inclusive, alias)
    bucket = _time_buckets(first_at, last_at, key_count)
    in_key = Window.partitionBy(*keys).orderBy("_at")
    # Slot k of a key: after its (k-1)th query time (at or after it when inclusive), up to its
    # kth; one row per bucket it spans (the first slot spans every bucket before its end).
    slots = timed.select(*keys, "_at", F.lag("_at").over(in_key).alias("_after")).select(
        *keys,
        "_at",
        "_after",
        F.explode(F.sequence(F.coalesce(bucket(F.col("_after")), F.lit(0)), bucket(F.col("_at")))).alias("_bucket"),
    )
    ts = F.col("r.ts")
    in_slot = (ts <= F.col("s._at") if inclusive else ts < F.col("s._at")) & (
        F.col("s._after").isNull() | (ts > F.col("s._after") if inclusive else ts >= F.col("s._after"))
    )
    same_bucket = functools.reduce(lambda a, b: a & b, [F.col(f"r.{k}") == F.col(f"s.{k}") for k in [*keys, "_bucket"]])
    latest_per_slot = (
        records.select(*keys, "ts", bucket(F.col("ts")).alias("_bucket"))
        .alias("r")
        .join(F.broadcast(slots.alias("s")), same_bucket & in_slot)
        .groupBy(*[F.col(f"s.{k}").alias(k) for k in keys], F.col("s._at").alias("_slot"))
        .agg(F.max(ts).alias("_latest"))
    )
    answers = (
        timed.alias("q")
        .join(latest_per_slot.alias("l"), [F.col(f"q.{k}") == F.col(f"l.{k}") for k in keys], "left")
        .filter(F.col("l._slot").isNull() | (F.col("l._slot") <= F.col("q._at")))
        .groupBy(*[F.col(f"q.{k}").alias(k) for k in keys], F.col("q._at").alias("_at"))
        .agg(F.max("l._latest").alias(alias))
    )
    return _with_answers(queries, answers, keys, at, alias)


def _with_answers(queries: DataFrame, answers: DataFrame, keys: list[str], at: str, alias: str) -> DataFrame:
    """`queries` with `alias` from `answers` (keys, _at, alias: one row per distinct query time)."""
    renamed = answers.select(*[F.col(k).alias(f"_answer_{k}") for k in keys], "_at", alias)
    matches = [F.col(k).eqNullSafe(F.col(f"_answer_{k}")) for k in keys] + [F.col(at) == F.col("_at")]
    joined = queries.join(renamed, functools.reduce(lambda a, b: a & b, matches), "left")
    return joined.select(*queries.columns, alias)


def _sorted_last_record_before(
    queries: DataFrame, records: DataFrame, keys: list[str], at: str, inclusive: bool, alias: str
) -> DataFrame:
    """last_record_before as one sort: queries and records of each key in time order, a running
    max of the records' ts read off at each query."""
    query_row = F.struct(*[F.col(c) for c in queries.columns])
    marked = queries.select(*keys, F.col(at).alias("_t"), F.lit(1).alias("_q"), query_row.alias("_row"))
    row_type = marked.schema["_row"].dataType
    # Distinct times first (an aggregate before the shuffle): a broker writes its role changes
    # in bursts within one millisecond, so the sort gets a fraction of the records.
    times = records.select(*keys, "ts").distinct()
    both = marked.unionByName(
        times.select(*keys, F.col("ts").alias("_t"), F.lit(0).alias("_q"), F.lit(None).cast(row_type).alias("_row"))
    )
    # At the same ms a record counts for the query only when inclusive: it sorts first then.
    in_time = Window.partitionBy(*keys).orderBy(F.col("_t"), F.col("_q") if inclusive else F.col("_q").desc())
    so_far = in_time.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return (
        both.select("_q", "_row", F.max(F.when(F.col("_q") == 0, F.col("_t"))).over(so_far).alias(alias))
        .filter(F.col("_q") == 1)
        .select("_row.*", alias)
    )


def controller_tenures(events: DataFrame) -> DataFrame:
    """One row per election: epoch, controller, start, end and how the tenure ended.

    `ended` is `resigned` (the controller wrote controller.resigned, reason in `resign_reason`),
    `superseded` (a later epoch was elected with no resignation on record: kill -9, a paused
    process) or `active` (still in office when the log ends). `last_active_ts` is the last
    record the controller wrote under its epoch before its successor was elected.
    """
    elected = of_kind(events, "controller.elected").select(
        "cluster",
        "controller_epoch",
        "controller_id",
        "node",
        F.col("ts").alias("start_ts"),
        "vacancy_ts",
        position().alias("start_pos"),
    )
    in_cluster = Window.partitionBy("cluster").orderBy("start_pos", "controller_epoch")
    elected = elected.withColumn("next_start_ts", F.lead("start_ts").over(in_cluster))
    resigned = (
        of_kind(events, "controller.resigned")
        .groupBy("cluster", "node", "controller_epoch")
        .agg(
            F.min("ts").alias("resigned_ts"),
            F.min_by("reason", position()).alias("resign_reason"),
        )
    )
    # The last sign of life in office: the controller's records at its epoch, up to its successor's election.
    bounds = elected.select("cluster", "node", "controller_epoch", "next_start_ts")
    activity = (
        of_role(events, "controller")
        .filter(F.col("controller_epoch").isNotNull())
        .select("cluster", "node", "controller_epoch", "ts")
        .join(F.broadcast(bounds), ["cluster", "node", "controller_epoch"])
        .filter(F.col("next_start_ts").isNull() | (F.col("ts") <= F.col("next_start_ts")))
        .groupBy("cluster", "node", "controller_epoch")
        .agg(F.max("ts").alias("last_active_ts"))
    )
    tenures = elected.join(resigned, ["cluster", "node", "controller_epoch"], "left").join(
        activity, ["cluster", "node", "controller_epoch"], "left"
    )
    # A paused (zombie) controller resigns only after its successor was elected: superseded.
    resigned_in_office = F.col("resigned_ts").isNotNull() & (
        F.col("next_start_ts").isNull() | (F.col("resigned_ts") <= F.col("next_start_ts"))
    )
    end = F.least(F.col("resigned_ts"), F.col("next_start_ts"))
    return tenures.select(
        "cluster",
        "controller_epoch",
        "controller_id",
        "node",
        "vacancy_ts",
        "start_ts",
        end.alias("end_ts"),
        F.when(resigned_in_office, F.lit("resigned"))
        .when(F.col("next_start_ts").isNotNull(), F.lit("superseded"))
        .otherwise(F.lit("active"))
        .alias("ended"),
        "resign_reason",
        "last_active_ts",
        (end - F.col("start_ts")).alias("duration_ms"),
        "start_pos",
    )


def failover_incidents(
    events: DataFrame,
    tenures: DataFrame,
    held: HeldFrames,
    liveness: DataFrame | None = None,
    signs_of_life: DataFrame | None = None,
    search_dir: str | None = None,
) -> DataFrame:
    """Controller lost -> new controller elected -> every live broker applied the new epoch's
    UpdateMetadata, for every election that followed another in the same cluster.

    Lost is the earlier of the old controller's resignation (when it came before the election)
    and the moment the new controller saw /controller vacant (controller.elected's vacancy_ts);
    with neither on record, the old controller's last record in office. The live brokers are
    those the new controller sent UpdateMetadata to before it recorded
    controller.failover_completed (every broker it sent one to, if that record is missing).

    The clock starts at the fault, not at its detection: `fault_ts` is the old controller's last
    sign of life up to the loss (its last record of any kind, `node.alive` included, which every
    process writes at a fixed interval), so `detection_ms` (fault -> loss seen) is about the
    session timeout after a kill -9 and about zero after a SIGTERM, and `total_ms` runs from the
    fault to every live broker on the new epoch (detection + election + propagation).
    `liveness`: the nodes that write node.alive (writers_of_liveness), when known already;
    `signs_of_life`: every node's record times (node_records), when indexed already;
    `search_dir`: the old controller's last sign of life is searched by record_search's tasks,
    working there (last_record_before).
    """
    in_cluster = Window.partitionBy("cluster").orderBy("start_pos", "controller_epoch")
    chained = tenures.select(
        "cluster",
        "controller_epoch",
        "controller_id",
        "node",
        "start_ts",
        F.lag("controller_epoch").over(in_cluster).alias("previous_epoch"),
        F.lag("controller_id").over(in_cluster).alias("previous_controller"),
        F.lag("node").over(in_cluster).alias("previous_node"),
        F.lag("ended").over(in_cluster).alias("previous_ended"),
        F.lag("resign_reason").over(in_cluster).alias("previous_resign_reason"),
        F.lag("end_ts").over(in_cluster).alias("previous_end_ts"),
        F.lag("start_ts").over(in_cluster).alias("previous_start_ts"),
        F.lag("last_active_ts").over(in_cluster).alias("previous_last_active_ts"),
        "vacancy_ts",
    ).filter(F.col("previous_epoch").isNotNull())
    resigned_before = F.when(
        (F.col("previous_ended") == "resigned") & (F.col("previous_end_ts") <= F.col("start_ts")),
        F.col("previous_end_ts"),
    )
    # A vacancy seen before the previous tenure began is not this loss (an old log's leftover).
    vacancy = F.when(F.col("vacancy_ts") >= F.col("previous_start_ts"), F.col("vacancy_ts"))
    known_loss = F.least(resigned_before, vacancy)
    chained = chained.select(
        "*",
        F.coalesce(known_loss, F.col("previous_last_active_ts")).alias("lost_ts"),
        F.when(known_loss.isNull(), F.lit("last_record"))
        .when(resigned_before.isNotNull() & (resigned_before == known_loss), F.lit("resigned"))
        .otherwise(F.lit("vacancy_observed"))
        .alias("lost_evidence"),
    )

    completed = (
        of_kind(events, "controller.failover_completed")
        .groupBy("cluster", "node", "controller_epoch")
        .agg(F.min_by(F.struct("ts", "load_ms", "live_brokers"), position()).alias("c"))
        .select(
            "cluster", "node", "controller_epoch", "c.load_ms", F.col("c.ts").alias("completed_ts"), "c.live_brokers"
        )
    )
    # The live brokers: as the new controller recorded them, else those it sent UpdateMetadata to
    # before completing its failover (or at all, when it never recorded the completion).
    sent = (
        of_kind(events, "request.sent")
        .filter(F.col("api") == "UpdateMetadata")
        .select("cluster", "node", "controller_epoch", F.col("broker"), "ts")
        .join(
            completed.select("cluster", "node", "controller_epoch", "completed_ts"),
            ["cluster", "node", "controller_epoch"],
            "left",
        )
        .filter(F.col("completed_ts").isNull() | (F.col("ts") <= F.col("completed_ts")))
        .select("cluster", "node", "controller_epoch", "broker")
    )
    recorded = completed.filter(F.col("live_brokers").isNotNull()).select(
        "cluster", "node", "controller_epoch", F.explode("live_brokers").alias("broker")
    )
    targets = (
        sent.join(
            recorded.select("cluster", "node", "controller_epoch").distinct(),
            ["cluster", "node", "controller_epoch"],
            "left_anti",
        )
        .unionByName(recorded)
        .distinct()
    )
    applied = (
        of_role(of_kind(events, "request.received"), "broker")
        .filter((F.col("api") == "UpdateMetadata") & (F.col("result") == "applied"))
        .groupBy("cluster", "controller_epoch", F.col("node_id").alias("broker"))
        .agg(F.min("ts").alias("applied_ts"))
    )
    per_broker = (
        chained.select("cluster", "node", "controller_epoch")
        .join(targets, ["cluster", "node", "controller_epoch"])
        .join(applied, ["cluster", "controller_epoch", "broker"], "left")
        .groupBy("cluster", "node", "controller_epoch")
        .agg(
            F.count("*").alias("brokers"),
            F.count("applied_ts").alias("brokers_applied"),
            F.max("applied_ts").alias("last_applied_ts"),
            F.sort_array(F.collect_list(F.when(F.col("applied_ts").isNull(), F.col("broker")))).alias(
                "brokers_not_applied"
            ),
        )
        # Converged only when every live broker applied the new epoch's metadata.
        .withColumn("converged_ts", F.when(F.col("brokers_applied") == F.col("brokers"), F.col("last_applied_ts")))
    )
    # The old controller's last sign of life up to the loss (a zombie's records after it don't count).
    controller_records = node_records(events, "controller", signs_of_life).withColumnRenamed("node", "previous_node")
    writers = liveness if liveness is not None else writers_of_liveness(events)
    with_liveness = liveness_nodes(writers, "controller").select("cluster", F.col("node").alias("previous_node"))
    last_alive = (
        last_record_before(
            chained.select("cluster", "controller_epoch", "previous_node", "lost_ts").join(
                F.broadcast(with_liveness), ["cluster", "previous_node"]
            ),
            controller_records,
            ["cluster", "previous_node"],
            at="lost_ts",
            inclusive=True,
            alias="last_alive_ts",
            held=held,
            search_dir=search_dir,
        )
        .groupBy("cluster", "controller_epoch")
        .agg(F.max("last_alive_ts").alias("last_alive_ts"))
    )
    incidents = (
        chained.join(per_broker, ["cluster", "node", "controller_epoch"], "left")
        .join(
            completed.select("cluster", "node", "controller_epoch", "load_ms"),
            ["cluster", "node", "controller_epoch"],
            "left",
        )
        .join(last_alive, ["cluster", "controller_epoch"], "left")
        .withColumn("fault_ts", F.coalesce(F.col("last_alive_ts"), F.col("lost_ts")))
    )
    return incidents.select(
        "cluster",
        "controller_epoch",
        "controller_id",
        "previous_epoch",
        "previous_controller",
        "previous_ended",
        "previous_resign_reason",
        "previous_last_active_ts",
        "fault_ts",
        "lost_ts",
        "lost_evidence",
        F.col("start_ts").alias("elected_ts"),
        "converged_ts",
        (F.col("lost_ts") - F.col("fault_ts")).alias("detection_ms"),
        (F.col("start_ts") - F.col("lost_ts")).alias("election_ms"),
        (F.col("converged_ts") - F.col("start_ts")).alias("propagation_ms"),
        (F.col("converged_ts") - F.col("fault_ts")).alias("total_ms"),
        "load_ms",
        F.coalesce(F.col("brokers"), F.lit(0)).alias("brokers"),
        F.coalesce(F.col("brokers_applied"), F.lit(0)).alias("brokers_applied"),
        F.coalesce(F.col("brokers_not_applied"), F.array().cast("array<bigint>")).alias("brokers_not_applied"),
    )


# --- partitions ----------------------------------------------------------------------------


def leadership(events: DataFrame) -> DataFrame:
    """Every leader change the controllers recorded, with how long it lasted: elections and
    the controller's leader -1 (partition.offline). Spark's window; leadership_scan.py gives the
    same rows from the same changes with Arrow and numpy."""
    return leadership_by_window(leader_changes(events))


def leader_changes(events: DataFrame) -> DataFrame:
    """The controllers' leader changes: elections and leader -1, each with its record's position."""
    common = ["cluster", "topic", "partition", "ts", "file_id", "block", "mid", "controller_epoch"]
    elected = of_kind(events, "partition.leader_elected").select(
        *common,
        "leader",
        "leader_epoch",
        "isr",
        "prev_isr",
        "strategy",
        "unclean",
        F.lit("elected").alias("change"),
    )
    offline = of_kind(events, "partition.offline").select(
        *common,
        F.coalesce(F.col("leader"), F.lit(-1)).alias("leader"),
        "leader_epoch",
        "isr",
        F.lit(None).cast("array<bigint>").alias("prev_isr"),
        F.lit(None).cast("string").alias("strategy"),
        F.lit(None).cast("boolean").alias("unclean"),
        F.lit("offline").alias("change"),
    )
    return elected.unionByName(offline)


def leadership_by_window(changes: DataFrame) -> DataFrame:
    """leader_changes with the previous leader, the next change's time and position (until_ts,
    until_pos) and the change's own (from_pos), by one window per partition."""
    # The numeric key first: Spark's sort compares a prefix of the first key, and cluster is often constant.
    per_partition = Window.partitionBy("partition", "topic", "cluster").orderBy(
        "ts", "leader_epoch", "file_id", "block", "mid"
    )
    return changes.select(
        "*",
        F.lag("leader").over(per_partition).alias("prev_leader"),
        F.lead("ts").over(per_partition).alias("until_ts"),
        F.lead(position()).over(per_partition).alias("until_pos"),
        position().alias("from_pos"),
    )


# Up to this many losses in all (brokers deregistered or bounced, over the whole history),
# leaderships meet them in a broadcast join; beyond it, in one sort with them.
JOINED_LOSSES = 100_000


def first_loss_in_tenure(led: DataFrame, losses: DataFrame, held: HeldFrames) -> DataFrame:
    """Each leadership (cluster, broker, from_pos, until_pos, ...) whose broker was lost while it
    led, with that first loss's pos, ts, cause and alive_ts.

    Only the first loss counts: after it nothing but a new election (which ends the leadership)
    or the topic's deletion can close the interval it opens, and a loss after a deletion is not
    the deleted partition's. The losses of a broker (a few per broker, thousands in a history)
    cut its time line into slots; a leadership's first loss is the end of the slot its start
    falls into, which it finds in a broadcast join against the slots cut into time buckets (as
    last_record_before's records do), no shuffle or sort of the leaderships (827k at 10M
    events) needed. With more losses than a broadcast should hold, one sort per broker of its
    leaderships and losses together (`_sorted_first_loss_in_tenure`). Testing every loss of a
    broker against every leadership it held was 127M pairs at 10M events.
    """
    loss = F.struct("pos", "ts", "cause", "alive_ts")
    # One loss per broker and position (a record naming a broker twice): the least, as the sort's
    # min. Few rows with a long lineage (the last sign of life of each): computed once.
    firsts = held.cache(losses.groupBy("cluster", "broker", "pos").agg(F.min(loss).alias("_loss")))
    shape = firsts.agg(F.count("*"), F.count_distinct("cluster", "broker"), F.min("pos.ts"), F.max("pos.ts")).first()
    if shape is None or not shape[0]:
        return _with_loss(led.limit(0), F.lit(None).cast(firsts.schema["_loss"].dataType))
    total, key_count, first_ts, last_ts = (int(v) for v in shape)
    if total > JOINED_LOSSES:
        return _sorted_first_loss_in_tenure(led, firsts.select("cluster", "broker", "_loss.*"))
    bucket = _time_buckets(first_ts, last_ts, key_count)
    # Slot of a loss: after the broker's previous loss, up to and including this one; one row
    # per bucket it spans (the first slot spans every bucket before its end).
    in_broker = Window.partitionBy("cluster", "broker").orderBy("pos")
    slots = firsts.select("cluster", "broker", "pos", "_loss", F.lag("pos").over(in_broker).alias("_after")).select(
        "cluster",
        "broker",
        "pos",
        "_after",
        "_loss",
        F.explode(F.sequence(F.coalesce(bucket(F.col("_after.ts")), F.lit(0)), bucket(F.col("pos.ts")))).alias(
            "_bucket"
        ),
    )
    start = F.col("l.from_pos")
    in_slot = (F.col("s._after").isNull() | (start > F.col("s._after"))) & (start <= F.col("s.pos"))
    same_bucket = functools.reduce(
        lambda a, b: a & b, [F.col(f"l.{k}") == F.col(f"s.{k}") for k in ("cluster", "broker", "_bucket")]
    )
    found = (
        led.select("*", bucket(F.col("from_pos.ts")).alias("_bucket"))
        .alias("l")
        .join(F.broadcast(slots.alias("s")), same_bucket & in_slot)
        .filter(F.col("l.until_pos").isNull() | (F.col("s.pos") < F.col("l.until_pos")))
    )
    return _with_loss(found.select(*[F.col(f"l.{c}") for c in led.columns], F.col("s._loss")), F.col("_loss"))


def _with_loss(frame: DataFrame, loss: Column) -> DataFrame:
    columns = [c for c in frame.columns if c != "_loss"]
    with_loss = frame.select(*columns, loss.alias("_loss"))
    return with_loss.select(*columns, "_loss.pos", "_loss.ts", "_loss.cause", "_loss.alive_ts")


def _sorted_first_loss_in_tenure(led: DataFrame, losses: DataFrame) -> DataFrame:
    """first_loss_in_tenure as one sort per broker of its leaderships and losses (the earliest
    loss at or after each leadership's start)."""
    loss = F.struct("pos", "ts", "cause", "alive_ts")
    tenure = F.struct(*[F.col(c) for c in led.columns])
    marked = led.select("cluster", "broker", F.col("from_pos").alias("_p"), tenure.alias("_row"))
    both = marked.select("*", F.lit(None).cast(losses.select(loss).schema[0].dataType).alias("_loss")).unionByName(
        losses.select(
            "cluster",
            "broker",
            F.col("pos").alias("_p"),
            F.lit(None).cast(marked.schema["_row"].dataType).alias("_row"),
            loss.alias("_loss"),
        )
    )
    # Latest first with a running frame: Spark recomputes an unbounded-following frame per row.
    later = (
        Window.partitionBy("cluster", "broker")
        .orderBy(F.col("_p.ts").desc(), F.col("_p").desc())
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    found = both.select("_row", F.min("_loss").over(later).alias("_first")).filter(
        F.col("_row").isNotNull()
        & F.col("_first").isNotNull()
        & (F.col("_row.until_pos").isNull() | (F.col("_first.pos") < F.col("_row.until_pos")))
    )
    return found.select("_row.*", "_first.pos", "_first.ts", "_first.cause", "_first.alive_ts")


def offline_intervals(
    events: DataFrame,
    leaders: DataFrame,
    held: HeldFrames,
    liveness: DataFrame | None = None,
    signs_of_life: DataFrame | None = None,
    scan_dir: str | None = None,
    search_dir: str | None = None,
    leaders_dir: str | None = None,
) -> DataFrame:
    """From the moment a partition lost its leader to the moment the new leader's broker applied
    that role.

    Lost: the controller set leader -1 (partition.offline); the leader's broker deregistered or
    bounced (the controller's broker.change, matched to who led then); the leader's log dir
    failed (the broker stopped the replica). Regained: a broker applied the leader role at a
    leader epoch above every loss so far (partition.role_changed). An interval still open when
    the topic is deleted ends there; one open at the end of the log has no end.

    An interval starts at the fault, not at its detection: when the leader's broker died, at
    that broker's last sign of life (its last record of any kind, `node.alive` included, before
    the controller saw it go; for a bounce, before its new registration). `detected_ts` is when
    the loss was seen, and `detection_ms` the time in between. `liveness`: the nodes that write
    node.alive (writers_of_liveness), when known already; `signs_of_life`: every node's record
    times (node_records), when indexed already. `scan_dir`: each partition's timeline is read
    by offline_scan (Arrow and numpy in Python tasks, working in this local directory, removed
    when `held` is released) rather than by Spark's windows; the same rows. Its tasks also
    find each leadership's first broker loss and each deletion's partitions themselves, so
    that Spark joins neither. `search_dir`: the dead brokers' last signs of life are searched
    by record_search's tasks, working there (last_record_before). `leaders_dir`: the local
    Parquet files `leaders` is read from, if it is (leadership_scan's timeline), which the
    scan's tasks then read themselves.
    """
    keys = ["cluster", "topic", "partition"]
    set_to_none = of_kind(events, "partition.offline").select(
        *keys,
        position().alias("pos"),
        "ts",
        F.col("leader_epoch").alias("epoch"),
        F.lit("leader_set_to_none").alias("cause"),
    )
    lost_brokers = (
        of_kind(events, "broker.change")
        .select(
            "cluster",
            position().alias("pos"),
            "ts",
            F.explode(
                F.concat(
                    F.transform(
                        F.coalesce(F.col("dead"), F.array().cast("array<bigint>")),
                        lambda b: F.struct(b.alias("broker"), F.lit("broker_deregistered").alias("cause")),
                    ),
                    F.transform(
                        F.coalesce(F.col("bounced"), F.array().cast("array<bigint>")),
                        lambda b: F.struct(b.alias("broker"), F.lit("broker_bounced").alias("cause")),
                    ),
                )
            ).alias("lost"),
        )
        .select("cluster", "pos", "ts", "lost.broker", "lost.cause")
    )
    # The dead broker's last sign of life: before the loss was seen (deregistered), or before
    # the new incarnation registered (bounced).
    registrations = of_kind(events, "broker.registered").select(
        "cluster", F.col("node_id").alias("broker"), F.col("ts").alias("registered_ts")
    )
    bounds = (
        lost_brokers.join(registrations, ["cluster", "broker"], "left")
        .filter(F.col("registered_ts").isNull() | (F.col("registered_ts") <= F.col("ts")))
        .groupBy("cluster", "pos", "ts", "broker", "cause")
        .agg(F.max("registered_ts").alias("registered_ts"))
        .withColumn(
            "alive_before",
            F.when(F.col("cause") == "broker_bounced", F.col("registered_ts")).otherwise(F.col("ts") + 1),
        )
    )
    writers = liveness if liveness is not None else writers_of_liveness(events)
    with_liveness = liveness_nodes(writers, "broker").select("cluster", "node", F.col("node_id").alias("broker"))
    last_alive = (
        last_record_before(
            bounds.select("cluster", "pos", "broker", "alive_before").join(
                F.broadcast(with_liveness), ["cluster", "broker"]
            ),
            node_records(events, "broker", signs_of_life),
            ["cluster", "node"],
            at="alive_before",
            inclusive=False,
            alias="alive_ts",
            held=held,
            search_dir=search_dir,
        )
        .groupBy("cluster", "pos", "broker")
        .agg(F.max("alive_ts").alias("alive_ts"))
    )
    lost_brokers = lost_brokers.join(last_alive, ["cluster", "pos", "broker"], "left")
    role_changes = of_role(of_kind(events, "partition.role_changed"), "broker")
    log_dir_failed = role_changes.filter(
        (F.col("role") == "stopped") & (F.col("reason") == "log_dir_failure") & (F.col("leader") == F.col("node_id"))
    ).select(
        *keys,
        position().alias("pos"),
        "ts",
        F.col("leader_epoch").alias("epoch"),
        F.lit("leader_log_dir_failed").alias("cause"),
    )
    no_sign = F.lit(None).cast("bigint").alias("alive_ts")

    def as_lost(frame: DataFrame) -> DataFrame:
        return frame.select("*", F.lit("lost").alias("change"), F.lit(None).cast("bigint").alias("new_leader"))

    regained = role_changes.filter((F.col("role") == "leader") & (F.col("leader") == F.col("node_id"))).select(
        *keys,
        position().alias("pos"),
        "ts",
        F.col("leader_epoch").alias("epoch"),
        F.lit(None).cast("string").alias("cause"),
        F.lit("regained").alias("change"),
        F.col("leader").alias("new_leader"),
        no_sign,
    )
    deletions = of_kind(events, "topic.deleted").select("cluster", "topic", position().alias("pos"), "ts")
    # The rows every partition's timeline has whoever finds the leaderships' broker losses: the
    # log-dir failures and the regains in one scan of the role changes (the most records here).
    is_leader = F.col("role") == "leader"
    own_roles = role_changes.filter(
        (F.col("leader") == F.col("node_id"))
        & (is_leader | ((F.col("role") == "stopped") & (F.col("reason") == "log_dir_failure")))
    ).select(
        *keys,
        position().alias("pos"),
        "ts",
        F.col("leader_epoch").alias("epoch"),
        F.when(~is_leader, F.lit("leader_log_dir_failed")).alias("cause"),
        F.when(is_leader, F.lit("regained")).otherwise(F.lit("lost")).alias("change"),
        F.when(is_leader, F.col("leader")).alias("new_leader"),
        no_sign,
    )
    own_rows = (
        as_lost(set_to_none.select("*", no_sign))
        .unionByName(own_roles)
        .withColumn("regain_last", (F.col("change") == "regained").cast("int"))
    )
    if scan_dir is not None:
        held.remove(scan_dir)
        try:
            return offline_scan.intervals(
                own_rows, scan_dir, offline_scan.BrokerLosses(leaders, leaders_dir, lost_brokers, deletions)
            )
        except Py4JJavaError as e:
            # A task that failed (no numpy in the workers' Python, a full disk): Spark's joins and
            # windows then make the intervals, slower and the same. Never a reason to fail the job.
            log.warning(
                "the offline intervals' scan failed; Spark's windows read the timelines: %s", str(e).splitlines()[0]
            )
    led = leaders.filter(F.col("leader") >= 0).select(
        *keys, F.col("leader").alias("broker"), "leader_epoch", "from_pos", "until_pos"
    )
    broker_lost = first_loss_in_tenure(led, lost_brokers, held).select(
        *keys, "pos", "ts", F.col("leader_epoch").alias("epoch"), "cause", "alive_ts"
    )
    starts = (
        as_lost(set_to_none.select("*", no_sign))
        .unionByName(as_lost(broker_lost))
        .unionByName(as_lost(log_dir_failed.select("*", no_sign)))
    )
    # A deletion ends whatever is open and starts the partition over: a recreated topic's leader
    # epochs begin again at 0. Only partitions that ever lost a leader need the boundary.
    deleted = deletions.join(starts.select(*keys).distinct(), ["cluster", "topic"]).select(
        *keys,
        "pos",
        "ts",
        F.lit(None).cast("bigint").alias("epoch"),
        F.lit(None).cast("string").alias("cause"),
        F.lit("deleted").alias("change"),
        F.lit(None).cast("bigint").alias("new_leader"),
        no_sign,
    )
    # In one millisecond, a loss sorts before a regain (they come from different nodes' files).
    # Ties past the position (one record, two rows) break as the first loss's (pos, cause, epoch).
    # Every window orders by columns alone: an expression there becomes a new column per window,
    # and Spark then sorts the rows again for each (four sorts of 2M rows at 10M events).
    timeline_rows = (
        starts.unionByName(regained)
        .unionByName(deleted)
        .withColumn("regain_last", (F.col("change") == "regained").cast("int"))
    )
    return _intervals_by_window(timeline_rows)


def _intervals_by_window(timeline_rows: DataFrame) -> DataFrame:
    """offline_intervals' last step in Spark: each partition's timeline rows (offline_intervals'
    starts, regains and deletions) through four window operators."""
    keys = ["cluster", "topic", "partition"]
    is_lost, is_deleted = F.col("change") == "lost", F.col("change") == "deleted"
    timeline = Window.partitionBy("partition", "topic", "cluster").orderBy("ts", "regain_last", "pos", "cause", "epoch")
    so_far = timeline.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    before = timeline.rowsBetween(Window.unboundedPreceding, -1)
    changes = timeline_rows.withColumn("generation", F.sum(is_deleted.cast("int")).over(so_far))
    # A regain closes an interval when its leader epoch is above every loss of this generation.
    highest_loss = F.max(F.when(is_lost, F.struct("generation", "epoch"))).over(so_far)
    marked = (
        changes.withColumn("highest_loss", highest_loss)
        .withColumn(
            "closes",
            is_deleted
            | (
                (F.col("change") == "regained")
                & (
                    F.col("highest_loss").isNull()
                    | (F.col("highest_loss.generation") < F.col("generation"))
                    | (F.col("epoch") > F.col("highest_loss.epoch"))
                )
            ),
        )
        .filter(is_lost | F.col("closes"))
    )
    # A segment is the losses after a closing change, up to and including the next one. Each is
    # reduced in the timeline's own sorted stream and read off at its last row (the close, or the
    # partition's last row while still open): an aggregate per segment sorted every row again,
    # 2 of the step's 14 s at 10M events.
    closes = F.col("closes")
    after_close = F.coalesce(F.lag(closes).over(timeline), F.lit(True))
    segmented = marked.select(
        "*",
        F.coalesce(F.sum(closes.cast("int")).over(before), F.lit(0)).alias("segment"),
        (is_lost & after_close).alias("opens"),
        (is_lost | ~after_close).alias("has_loss"),
        (closes | F.lead(F.lit(True)).over(timeline).isNull()).alias("ends"),
    )
    # The segment's earliest fault: segments only grow along the timeline, so the greatest
    # (segment, -fault) of the losses so far is the current segment's least fault.
    least_fault = F.max(
        F.when(is_lost, F.struct("segment", (-F.coalesce(F.col("alive_ts"), F.col("ts"))).alias("neg")))
    )
    intervals = segmented.select(
        *keys,
        "has_loss",
        "ends",
        F.last(F.when(F.col("opens"), F.struct("pos", "cause", "epoch")), ignorenulls=True)
        .over(so_far)
        .alias("first_loss"),
        (-least_fault.over(so_far).getField("neg")).alias("fault_ts"),
        F.when(closes, F.struct("ts", "change", "new_leader", "epoch")).alias("end"),
    ).filter(F.col("ends") & F.col("has_loss"))
    start = F.least(F.col("fault_ts"), F.col("first_loss.pos.ts"))
    return intervals.select(
        *keys,
        start.alias("start_ts"),
        F.col("end.ts").alias("end_ts"),
        (F.col("end.ts") - start).alias("duration_ms"),
        F.col("first_loss.pos.ts").alias("detected_ts"),
        (F.col("first_loss.pos.ts") - start).alias("detection_ms"),
        F.col("first_loss.cause").alias("cause"),
        F.when(F.col("end.change") == "regained", F.lit("leader_applied"))
        .when(F.col("end.change") == "deleted", F.lit("topic_deleted"))
        .alias("end_cause"),
        F.col("first_loss.epoch").alias("lost_leader_epoch"),
        F.col("end.new_leader").alias("new_leader"),
        F.col("end.epoch").alias("new_leader_epoch"),
    )


# --- requests ------------------------------------------------------------------------------


def request_latency(events: DataFrame) -> DataFrame:
    """Per broker and API: how long control requests waited in the controller's queue for that
    broker and how long the broker took to answer (ms)."""
    completed = of_kind(events, "request.completed")
    return completed.groupBy("cluster", "broker", "api").agg(
        F.count("*").alias("requests"),
        F.sum(F.when(F.col("error") != 0, 1).otherwise(0)).alias("errors"),
        F.sum(F.coalesce(F.col("partitions"), F.lit(0))).alias("partitions"),
        F.percentile_approx("queue_ms", 0.5).alias("queue_p50_ms"),
        F.percentile_approx("queue_ms", 0.99).alias("queue_p99_ms"),
        F.max("queue_ms").alias("queue_max_ms"),
        F.percentile_approx("rtt_ms", 0.5).alias("rtt_p50_ms"),
        F.percentile_approx("rtt_ms", 0.99).alias("rtt_p99_ms"),
        F.max("rtt_ms").alias("rtt_max_ms"),
    )


def latency_histogram(events: DataFrame) -> DataFrame:
    """Counts of requests per API in power-of-two millisecond buckets, for the report's plots."""
    completed = of_kind(events, "request.completed")
    rows = completed.select(
        "api",
        F.posexplode(F.array(F.col("queue_ms"), F.col("rtt_ms"))).alias("which", "ms"),
    ).select(
        "api",
        F.when(F.col("which") == 0, F.lit("queue")).otherwise(F.lit("rtt")).alias("measure"),
        F.greatest(F.lit(-4), F.least(F.lit(16), F.ceil(F.log2(F.greatest(F.col("ms"), F.lit(1e-9))))))
        .cast("int")
        .alias("bucket"),
    )
    return rows.groupBy("api", "measure", "bucket").count()
