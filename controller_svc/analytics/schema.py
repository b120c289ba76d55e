"""What the analytics read: the state-change records of DESIGN.md contract 5.

Pure data, no Spark import, so the report and the CLI can name invariants and kinds without a JVM.
"""

from __future__ import annotations

import functools
from typing import Any, Final

# Contract 6: the invariant names are part of summary.json.
SINGLE_CONTROLLER_PER_EPOCH: Final = "single_controller_per_epoch"
STALE_CONTROLLER_EPOCH_APPLIED: Final = "stale_controller_epoch_applied"
LEADER_EPOCH_REGRESSION: Final = "leader_epoch_regression"
UNCLEAN_ELECTION_WITHOUT_PERMISSION: Final = "unclean_election_without_permission"
INVARIANTS: Final = (
    SINGLE_CONTROLLER_PER_EPOCH,
    STALE_CONTROLLER_EPOCH_APPLIED,
    LEADER_EPOCH_REGRESSION,
    UNCLEAN_ELECTION_WITHOUT_PERMISSION,
)

# Every field any analysis reads, with its JSON type. Records may carry more; those are kept
# in the raw line only. A known field with the wrong type makes a record of a known kind malformed.
# Control requests a controller sends (contract 5's three, and the failover's question).
CONTROL_APIS: Final = ("LeaderAndIsr", "UpdateMetadata", "StopReplica", "DescribeReplicaEpochs")

LONG: Final = "long"
DOUBLE: Final = "double"
STRING: Final = "string"
BOOLEAN: Final = "boolean"
LONG_ARRAY: Final = "array<long>"
FIELDS: Final[tuple[tuple[str, str], ...]] = (
    ("ts", LONG),
    ("node", STRING),
    ("kind", STRING),
    ("controller_epoch", LONG),
    ("controller_id", LONG),
    ("broker", LONG),
    ("broker_id", LONG),
    ("broker_epoch", LONG),
    ("api", STRING),
    ("correlation_id", LONG),
    ("partitions", LONG),
    ("queue_ms", DOUBLE),
    ("rtt_ms", DOUBLE),
    ("error", LONG),
    ("result", STRING),
    ("topic", STRING),
    ("partition", LONG),
    ("leader", LONG),
    ("leader_epoch", LONG),
    ("isr", LONG_ARRAY),
    ("prev_isr", LONG_ARRAY),
    ("strategy", STRING),
    ("unclean", BOOLEAN),
    ("role", STRING),
    ("reason", STRING),
    ("dead", LONG_ARRAY),
    ("bounced", LONG_ARRAY),
    ("load_ms", DOUBLE),
    ("vacancy_ts", LONG),
    ("live_brokers", LONG_ARRAY),
)
ENVELOPE: Final = ("ts", "node", "kind")

# The kinds the analyses use, with the fields each must carry (beyond ts, node, kind).
REQUIRED: Final[dict[str, tuple[str, ...]]] = {
    "controller.elected": ("controller_id", "controller_epoch"),
    "controller.resigned": ("controller_id", "controller_epoch"),
    "controller.failover_completed": ("controller_epoch",),
    "broker.change": ("controller_epoch",),
    "broker.registered": ("broker_id", "broker_epoch"),
    "broker.shutdown": ("broker_id", "broker_epoch"),
    "partition.leader_elected": (
        "topic",
        "partition",
        "leader",
        "leader_epoch",
        "isr",
        "prev_isr",
        "strategy",
        "unclean",
        "controller_epoch",
    ),
    "partition.offline": ("topic", "partition", "leader_epoch", "controller_epoch"),
    "partition.role_changed": ("topic", "partition", "role", "leader", "leader_epoch"),
    "request.sent": ("broker", "api", "correlation_id", "controller_epoch"),
    "request.completed": ("broker", "api", "correlation_id", "controller_epoch", "queue_ms", "rtt_ms", "error"),
    "request.received": ("api", "controller_id", "controller_epoch", "broker_epoch", "result", "error"),
    "topic.deleted": ("topic",),
}

# Kinds kept as their own partition of the events table; any other kind is filed under OTHER_KINDS.
KNOWN_KINDS: Final = frozenset(
    {
        *REQUIRED,
        "broker.started",
        "broker.log_dir_failed",
        "broker.controlled_shutdown",
        "partition.isr_changed",
        "topic.deletion_started",
        "reassignment.started",
        "reassignment.completed",
        "reassignment.cancelled",
        # Every process's periodic sign of life (contract 5): the analysis bounds when a process
        # stopped by its last record, for the processes that write these.
        "node.alive",
    }
)
OTHER_KINDS: Final = "_other"

# Fields whose values come from a closed set (contract 5).
ALLOWED_VALUES: Final[dict[str, dict[str, tuple[str, ...]]]] = {
    "partition.leader_elected": {"strategy": ("offline", "reassign", "preferred", "controlled_shutdown", "new")},
    "partition.role_changed": {"role": ("leader", "follower", "stopped", "deleted")},
    "request.received": {"result": ("applied", "rejected"), "api": CONTROL_APIS},
    "request.sent": {"api": CONTROL_APIS},
    "request.completed": {"api": CONTROL_APIS},
}

# Node names of contract 5: controller-N and broker-N.
NODE_PATTERN: Final = r"^(controller|broker)-(\d+)$"


# The side files the fast path's tasks write beside the events table (leader_epochs.py's
# candidates, node_index.py's node times) name their columns as (name, type), each type one
# of string, long and int.


def task_columns_ddl(columns: tuple[tuple[str, str], ...]) -> str:
    """Such a file's schema as Spark reads it (DDL)."""
    types = {"string": "string", "long": "bigint", "int": "int"}
    return ", ".join(f"`{name}` {types[kind]}" for name, kind in columns)


@functools.cache
def task_columns_arrow(columns: tuple[tuple[str, str], ...]) -> Any:
    """Such a file's schema as the tasks write it (Arrow's; pyarrow is imported only here)."""
    import pyarrow as pa

    types = {"string": pa.string(), "long": pa.int64(), "int": pa.int32()}
    return pa.schema([(name, types[kind]) for name, kind in columns])
