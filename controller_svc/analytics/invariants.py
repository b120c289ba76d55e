"""The safety invariants of contract 6, checked over a whole cluster's history.

Each check returns rows of (cluster, invariant, subject, detail, ts, records): `records` holds
the offending state-change lines with their file and line number, so an operator can go
straight to the evidence.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from controller_svc.analytics import leader_epochs, schema
from controller_svc.analytics.timelines import POSITION_COLUMNS, of_kind, of_role, position, ref

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
            "cluster", "controller_epoch", F.col("controller_id").alias("claimant"), "ts", "file_id", "block", "mid"
        )
        .unionByName(
            of_role(of_kind(events, "request.sent"), "controller").select(
                "cluster", "controller_epoch", F.col("node_id").alias("claimant"), "ts", "file_id", "block", "mid"
            )
        )
        .unionByName(
            of_kind(events, "request.received").select(
                "cluster", "controller_epoch", F.col("controller_id").alias("claimant"), "ts", "file_id", "block", "mid"
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
    applied = of_role(of_kind(events, "request.received"), "broker").filter(F.col("result") == "applied")
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


LEADER_EPOCH_KEYS = ("cluster", "node", "topic", "partition")
# The rows both ways of the check give (a record, and the earlier one at or above its epoch),
# flat: Spark 4.0's optimizer failed on fields of a struct read through the union of the two
# (INTERNAL_ERROR "Couldn't find _extract_leader_epoch").
REAPPLIED_OR_LOWER_COLUMNS = (
    *LEADER_EPOCH_KEYS,
    "ts",
    "role",
    "leader_epoch",
    "pos",
    "evidence",
    "prev_leader_epoch",
    "prev_pos",
    "prev_evidence",
)


@dataclass(frozen=True)
class CheckedInTasks:
    """The leader-epoch checks the ingest's tasks made (leader_epochs.py): which nodes, and the
    candidate rows they found (ingest.checked_candidates: with cluster and node columns)."""

    checks: leader_epochs.TaskChecks
    candidates: DataFrame


def leader_epoch_regression(events: DataFrame, checked: CheckedInTasks | None = None) -> DataFrame:
    """Per broker and partition, the leader epochs of applied leader/follower roles strictly
    increase. Deleting the replica (StopReplica with delete) starts over: a recreated topic's
    partitions begin again at epoch 0. A restarted broker process (broker.started) has lost its
    in-memory epochs, as a Kafka broker's Partition objects are, and may re-apply the epoch it
    last applied; it must never apply a lower one.

    One sort of the role changes per (broker, partition) finds, for each record, the highest
    epoch applied before it in the same generation and the latest record at that epoch. A lower
    epoch is a violation outright; the same epoch only when the broker did not start between
    that record and this one, which is asked of the few same-epoch re-applications alone (a
    join of every role change with its broker's process lifetimes was most of the check's time
    at 10M events).

    With `checked`, the sort is made only for the nodes the ingest's tasks did not check (seen
    in more than one chunk, or in a file Spark's readers read); the tasks' candidates, the same
    rows for the nodes they checked, take its place for the others.
    """
    roles = of_role(of_kind(events, "partition.role_changed"), "broker").filter(
        F.col("role").isin(*leader_epochs.CHECKED_ROLES)
    )
    if checked is None:
        reapplied_or_lower = _reapplied_or_lower(roles)
    else:
        checks = checked.checks
        in_tasks = checks.nodes
        left: DataFrame | None
        if checks.other_files:
            # A node with records in a file Spark's readers read was only partly seen by the tasks.
            elsewhere = roles.filter(~F.col("file_id").isin(*sorted(checks.fast_file_ids))).select("node").distinct()
            in_tasks = in_tasks - {row["node"] for row in elsewhere.collect()}
            left = roles.filter(~F.col("node").isin(*sorted(in_tasks))) if in_tasks else roles
        else:
            # Every record was seen by a task: only the nodes seen in several chunks are left.
            multi = sorted(checks.multi_chunk_nodes)
            left = roles.filter(F.col("node").isin(*multi)) if multi else None
        from_tasks = _from_tasks(checked.candidates.filter(F.col("node").isin(*sorted(in_tasks))))
        reapplied_or_lower = from_tasks if left is None else _reapplied_or_lower(left).unionByName(from_tasks)
    # A broker.started at or before a record begins the process lifetime the record belongs to.
    # One anti join keeps every lower epoch (the condition never holds for them) and the
    # re-applications without a start in between, so the window's sort runs once.
    starts = of_kind(events, "broker.started").select("cluster", "node", position().alias("started_pos"))
    allowed_by_restart = (
        (F.col("r.cluster") == F.col("s.cluster"))
        & (F.col("r.node") == F.col("s.node"))
        & (F.col("r.leader_epoch") == F.col("r.prev_leader_epoch"))
        & (F.col("s.started_pos") > F.col("r.prev_pos"))
        & (F.col("s.started_pos") <= F.col("r.pos"))
    )
    regressed = reapplied_or_lower.alias("r").join(starts.alias("s"), allowed_by_restart, "left_anti")
    return _violations(
        regressed,
        schema.LEADER_EPOCH_REGRESSION,
        F.format_string("%s %s-%d", F.col("node"), F.col("topic"), F.col("partition")),
        F.format_string(
            "%s applied %s at leader epoch %d after leader epoch %d",
            F.col("node"),
            F.col("role"),
            F.col("leader_epoch"),
            F.col("prev_leader_epoch"),
        ),
        F.array(F.col("prev_evidence"), F.col("evidence")),
    )


def _reapplied_or_lower(roles: DataFrame) -> DataFrame:
    """The role changes (leader, follower, deleted) at or below the highest epoch applied
    earlier in their (broker, partition)'s generation, with that earlier record as `prev`."""
    # The numeric key first: Spark's sort compares a prefix of the first key, and cluster is often constant.
    timeline = Window.partitionBy("partition", "node", "topic", "cluster").orderBy(*POSITION_COLUMNS)
    before = timeline.rowsBetween(Window.unboundedPreceding, -1)
    is_deleted = F.col("role") == "deleted"
    # Deletions count generations and contribute nothing to the highest epoch so far (both
    # windows share one sort). Among earlier records at the highest epoch, the latest (by
    # position) is the one a restart must separate this record from.
    generations = roles.withColumn("generation", F.coalesce(F.sum(is_deleted.cast("int")).over(before), F.lit(0)))
    candidates = generations.select(
        *LEADER_EPOCH_KEYS,
        "ts",
        "role",
        "leader_epoch",
        "generation",
        position().alias("pos"),
        evidence().alias("evidence"),
        F.max(
            F.when(
                ~is_deleted,
                F.struct("generation", "leader_epoch", position().alias("pos"), evidence().alias("evidence")),
            )
        )
        .over(before)
        .alias("prev"),
    ).filter(
        ~is_deleted
        & (F.col("prev.generation") == F.col("generation"))
        & (F.col("leader_epoch") <= F.col("prev.leader_epoch"))
    )
    return candidates.select(
        *REAPPLIED_OR_LOWER_COLUMNS[:-3],
        F.col("prev.leader_epoch").alias("prev_leader_epoch"),
        F.col("prev.pos").alias("prev_pos"),
        F.col("prev.evidence").alias("prev_evidence"),
    )


def _from_tasks(candidates: DataFrame) -> DataFrame:
    """The tasks' candidates (leader_epochs.CANDIDATE_COLUMNS) as _reapplied_or_lower gives its
    rows: the earlier record is in the same chunk, so it has the same file_id and block."""
    prev_mid = F.col("prev_mid").alias("mid")
    return of_role(candidates, "broker").select(
        *LEADER_EPOCH_KEYS,
        "ts",
        "role",
        "leader_epoch",
        position().alias("pos"),
        evidence().alias("evidence"),
        "prev_leader_epoch",
        F.struct(F.col("prev_ts").alias("ts"), "file_id", "block", prev_mid).alias("prev_pos"),
        F.struct("file_id", "block", prev_mid).alias("prev_evidence"),
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


def all_violations(events: DataFrame, checked: CheckedInTasks | None = None) -> DataFrame:
    """Every invariant's violations; `checked`: the leader-epoch checks the ingest's tasks made."""
    checks = (
        single_controller_per_epoch(events),
        stale_controller_epoch_applied(events),
        leader_epoch_regression(events, checked),
        unclean_election_without_permission(events),
    )
    return functools.reduce(DataFrame.unionByName, checks)
