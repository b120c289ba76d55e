"""The safety invariants of contract 6, checked over a whole cluster's history.

Each check returns rows of (cluster, invariant, subject, detail, ts, records): `records` holds
the offending state-change lines with their file and line number, so an operator can go
straight to the evidence.
"""

from __future__ import annotations

import functools

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from controller_svc.analytics import schema
from controller_svc.analytics.timelines import POSITION_COLUMNS, of_kind, position, ref

LIFETIME_BUCKETS = 1024
VIOLATION_COLUMNS = ("cluster", "invariant", "subject", "detail", "ts", "records")


def evidence() -> Column:
    """The offending record's identity; job.resolve_evidence turns it into file, line and text."""
    return ref()


def _violations(frame: DataFrame, invariant: str, subject: Column, detail: Column, records: Column) -> DataFrame:
    return frame.select(
        "cluster",
        F.lit(invariant).alias("invariant"),
        subject.alias("subject"),
        detail.alias("detail"),
        "ts",
        records.alias("records"),
    )


def single_controller_per_epoch(events: DataFrame) -> DataFrame:
    """One controller per epoch, and elections' epochs increase with time.

    A claim to an epoch is a controller.elected record, a request.sent written by a controller
    node, or a request.received naming its sender; two claimants of one epoch is one violation.
    An election whose epoch is below one elected earlier is another.
    """
    elected = of_kind(events, "controller.elected")
    claims = (
        elected.select(
            "cluster", "controller_epoch", F.col("controller_id").alias("claimant"), "ts", "file", "block", "mid"
        )
        .unionByName(
            of_kind(events, "request.sent")
            .filter(F.col("node_role") == "controller")
            .select("cluster", "controller_epoch", F.col("node_id").alias("claimant"), "ts", "file", "block", "mid")
        )
        .unionByName(
            of_kind(events, "request.received").select(
                "cluster", "controller_epoch", F.col("controller_id").alias("claimant"), "ts", "file", "block", "mid"
            )
        )
    )
    per_claimant = claims.groupBy("cluster", "controller_epoch", "claimant").agg(
        F.min(F.struct(position().alias("pos"), evidence().alias("evidence"))).alias("first")
    )
    shared = (
        per_claimant.groupBy("cluster", "controller_epoch")
        .agg(
            F.count("*").alias("claimants"),
            F.sort_array(F.collect_list("claimant")).alias("ids"),
            F.min("first.pos.ts").alias("ts"),
            F.transform(F.sort_array(F.collect_list("first")), lambda c: c["evidence"]).alias("records"),
        )
        .filter(F.col("claimants") > 1)
    )
    epoch_shared = _violations(
        shared,
        schema.SINGLE_CONTROLLER_PER_EPOCH,
        F.format_string("controller epoch %d", F.col("controller_epoch")),
        F.format_string(
            "epoch %d claimed by controllers %s", F.col("controller_epoch"), F.array_join(F.col("ids"), ", ")
        ),
        F.col("records"),
    )
    earlier = Window.partitionBy("cluster").orderBy(position()).rowsBetween(Window.unboundedPreceding, -1)
    ordered = elected.select(
        "cluster",
        "ts",
        "controller_epoch",
        "controller_id",
        evidence().alias("evidence"),
        F.max(F.struct("controller_epoch", "controller_id", evidence().alias("evidence"))).over(earlier).alias("prev"),
    ).filter(F.col("controller_epoch") < F.col("prev.controller_epoch"))
    backwards = _violations(
        ordered,
        schema.SINGLE_CONTROLLER_PER_EPOCH,
        F.format_string("controller epoch %d", F.col("controller_epoch")),
        F.format_string(
            "controller %d elected with epoch %d after controller %d had been elected with epoch %d",
            F.col("controller_id"),
            F.col("controller_epoch"),
            F.col("prev.controller_id"),
            F.col("prev.controller_epoch"),
        ),
        F.array(F.col("prev.evidence"), F.col("evidence")),
    )
    return epoch_shared.unionByName(backwards)


def stale_controller_epoch_applied(events: DataFrame) -> DataFrame:
    """No broker applies a request whose controller epoch is below one it already applied
    (KafkaController's epoch fencing, KAFKA-1120 and friends)."""
    applied = of_kind(events, "request.received").filter(
        (F.col("result") == "applied") & (F.col("node_role") == "broker")
    )
    earlier = Window.partitionBy("node", "cluster").orderBy(position()).rowsBetween(Window.unboundedPreceding, -1)
    stale = applied.select(
        "cluster",
        "node",
        "ts",
        "api",
        "controller_id",
        "controller_epoch",
        evidence().alias("evidence"),
        F.max(F.struct("controller_epoch", "controller_id", evidence().alias("evidence"))).over(earlier).alias("prev"),
    ).filter(F.col("controller_epoch") < F.col("prev.controller_epoch"))
    return _violations(
        stale,
        schema.STALE_CONTROLLER_EPOCH_APPLIED,
        F.col("node"),
        F.format_string(
            "%s applied %s from controller %d at epoch %d after applying epoch %d (controller %d)",
            F.col("node"),
            F.col("api"),
            F.col("controller_id"),
            F.col("controller_epoch"),
            F.col("prev.controller_epoch"),
            F.col("prev.controller_id"),
        ),
        F.array(F.col("prev.evidence"), F.col("evidence")),
    )


def _not_after(pos: Column, ts: Column) -> Column:
    """pos <= position() of the row at `ts`, comparing the full positions only within one
    millisecond: evaluated for every (row, candidate) pair of a range join, where building the
    row's position struct for each pair was most of the cost."""
    return (pos["ts"] < ts) | ((pos["ts"] == ts) & (pos <= position()))


def _with_incarnation(rows: DataFrame, starts: DataFrame) -> DataFrame:
    """Adds `incarnation` to a broker's rows: how many times its process had started (its
    broker.started records) at the row's position, 0 before the first.

    Each process lifetime, [a broker.started, the next one), is a row of a small broadcast table,
    repeated for every time bucket (1/LIFETIME_BUCKETS of the starts' span) it overlaps, so a
    row meets the one or two lifetimes of its node and bucket instead of all of them (a
    per-row filter over every start was most of leader_epoch_regression's time at 10M events).
    """
    in_node = Window.partitionBy("cluster", "node").orderBy(*POSITION_COLUMNS)
    lifetimes = starts.select(
        "cluster",
        "node",
        position().alias("started_pos"),
        F.row_number().over(in_node).alias("incarnation"),
        F.lead(position()).over(in_node).alias("next_started_pos"),
    )
    span = lifetimes.agg(F.min("started_pos.ts").alias("lo"), F.max("started_pos.ts").alias("hi")).first()
    if span is None or span["lo"] is None:
        return rows.withColumn("incarnation", F.lit(0))
    lo, hi = int(span["lo"]), int(span["hi"])
    width = max(1, (hi - lo) // LIFETIME_BUCKETS + 1)
    last_bucket = (hi - lo) // width

    def bucket(ts: Column) -> Column:
        return F.least(F.greatest(F.floor((ts - lo) / width), F.lit(0)), F.lit(last_bucket)).cast("long")

    bucketed = lifetimes.select(
        "*",
        F.explode(
            F.sequence(
                bucket(F.col("started_pos.ts")),
                bucket(F.coalesce(F.col("next_started_pos.ts"), F.lit(hi))),
            )
        ).alias("bucket"),
    )
    joined = (
        rows.withColumn("bucket", bucket(F.col("ts")))
        .alias("r")
        .join(
            F.broadcast(bucketed.alias("l")),
            (F.col("r.cluster") == F.col("l.cluster"))
            & (F.col("r.node") == F.col("l.node"))
            & (F.col("r.bucket") == F.col("l.bucket"))
            & _not_after(F.col("l.started_pos"), F.col("r.ts"))
            & (F.col("l.next_started_pos").isNull() | ~_not_after(F.col("l.next_started_pos"), F.col("r.ts"))),
            "left",
        )
        .select("r.*", F.coalesce(F.col("l.incarnation"), F.lit(0)).alias("incarnation"))
        .drop("bucket")
    )
    return joined


def leader_epoch_regression(events: DataFrame) -> DataFrame:
    """Per broker and partition, the leader epochs of applied leader/follower roles strictly
    increase. Deleting the replica (StopReplica with delete) starts over: a recreated topic's
    partitions begin again at epoch 0. A restarted broker process (broker.started) has lost its
    in-memory epochs, as a Kafka broker's Partition objects are, and may re-apply the epoch it
    last applied; it must never apply a lower one."""
    keys = ["cluster", "node", "topic", "partition"]
    roles = of_kind(events, "partition.role_changed").filter(
        (F.col("node_role") == "broker") & F.col("role").isin("leader", "follower", "deleted")
    )
    with_incarnation = _with_incarnation(roles, of_kind(events, "broker.started"))
    # The numeric key first: Spark's sort compares a prefix of the first key, and cluster is often constant.
    timeline = Window.partitionBy("partition", "node", "topic", "cluster").orderBy(*POSITION_COLUMNS)
    before = timeline.rowsBetween(Window.unboundedPreceding, -1)
    is_deleted = F.col("role") == "deleted"
    # Deletions count generations and contribute nothing to the highest epoch so far (both
    # windows share one sort).
    generations = with_incarnation.withColumn(
        "generation", F.coalesce(F.sum(is_deleted.cast("int")).over(before), F.lit(0))
    )
    regressed = generations.select(
        *keys,
        "ts",
        "role",
        "leader_epoch",
        "generation",
        "incarnation",
        evidence().alias("evidence"),
        F.max(F.when(~is_deleted, F.struct("generation", "leader_epoch", "incarnation", evidence().alias("evidence"))))
        .over(before)
        .alias("prev"),
    ).filter(
        ~is_deleted
        & (F.col("prev.generation") == F.col("generation"))
        & (
            (F.col("leader_epoch") < F.col("prev.leader_epoch"))
            | (
                (F.col("leader_epoch") == F.col("prev.leader_epoch"))
                & (F.col("incarnation") == F.col("prev.incarnation"))
            )
        )
    )
    return _violations(
        regressed,
        schema.LEADER_EPOCH_REGRESSION,
        F.format_string("%s %s-%d", F.col("node"), F.col("topic"), F.col("partition")),
        F.format_string(
            "%s applied %s at leader epoch %d after leader epoch %d",
            F.col("node"),
            F.col("role"),
            F.col("leader_epoch"),
            F.col("prev.leader_epoch"),
        ),
        F.array(F.col("prev.evidence"), F.col("evidence")),
    )


def unclean_election_without_permission(events: DataFrame) -> DataFrame:
    """An election flagged clean picks its leader from the previous ISR (new partitions, which
    have no previous ISR, excepted)."""
    elections = of_kind(events, "partition.leader_elected").filter(
        ~F.col("unclean")
        & (F.col("strategy") != "new")
        & (F.col("leader") >= 0)
        & ~F.array_contains(F.col("prev_isr"), F.col("leader"))
    )
    return _violations(
        elections,
        schema.UNCLEAN_ELECTION_WITHOUT_PERMISSION,
        F.format_string("%s-%d", F.col("topic"), F.col("partition")),
        F.format_string(
            "%s election flagged clean chose %d (leader epoch %d, controller epoch %d), not in the previous ISR [%s]",
            F.col("strategy"),
            F.col("leader"),
            F.col("leader_epoch"),
            F.col("controller_epoch"),
            F.array_join(F.col("prev_isr"), ", "),
        ),
        F.array(evidence()),
    )


def all_violations(events: DataFrame) -> DataFrame:
    checks = (
        single_controller_per_epoch(events),
        stale_controller_epoch_applied(events),
        leader_epoch_regression(events),
        unclean_election_without_permission(events),
    )
    return functools.reduce(DataFrame.unionByName, checks)
