"""Partition leader election (PartitionLeaderElectionAlgorithms): pure functions.

DESIGN.md contract 2: each returns the new leader id or None. Lists are in assignment
order; the other arguments are sets. `elect` wraps them with the new-ISR rules of the
reference (section 3) and the leader-epoch bump every election makes.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from typing import NamedTuple

from controller_svc.common.model import NO_LEADER, LeaderIsrAndControllerEpoch, ReplicaAssignment


def offline_partition_leader_election(
    assignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int], unclean_enabled: bool
) -> int | None:
    """First replica in assignment order that is live and in the ISR; failing that, and only
    when unclean election is enabled, the first live replica."""
    for replica in assignment:
        if replica in live_replicas and replica in isr:
            return replica
    if unclean_enabled:
        for replica in assignment:
            if replica in live_replicas:
                return replica
    return None


def reassign_partition_leader_election(
    reassignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int]
) -> int | None:
    """First replica of the *target* assignment that is live and in the ISR."""
    for replica in reassignment:
        if replica in live_replicas and replica in isr:
            return replica
    return None


def preferred_replica_partition_leader_election(
    assignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int]
) -> int | None:
    """The preferred (first) replica, only if it is live and in the ISR."""
    if assignment and assignment[0] in live_replicas and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_partition_leader_election(
    assignment: Sequence[int],
    isr: Collection[int],
    live_replicas: Collection[int],
    shutting_down_brokers: Collection[int],
) -> int | None:
    """First replica in assignment order that is live (shutting-down brokers count as live
    here), in the ISR, and not shutting down."""
    for replica in assignment:
        if replica in live_replicas and replica in isr and replica not in shutting_down_brokers:
            return replica
    return None


class ElectionStrategy(enum.Enum):
    OFFLINE = "offline"
    REASSIGN = "reassign"
    PREFERRED = "preferred"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"


class ElectionResult(NamedTuple):
    """The partition state an election chose (leader epoch bumped), or no leader. A NamedTuple
    like LeaderIsrAndControllerEpoch: one per partition of every election (10k at a controlled
    shutdown), where a frozen dataclass's __init__ runs as Python code."""

    leader: int | None
    leader_epoch: int
    isr: tuple[int, ...]
    unclean: bool

    def as_state(self, controller_epoch: int, zk_version: int) -> LeaderIsrAndControllerEpoch:
        return LeaderIsrAndControllerEpoch(
            self.leader if self.leader is not None else NO_LEADER,
            self.leader_epoch,
            self.isr,
            zk_version,
            controller_epoch,
        )


def elect(
    strategy: ElectionStrategy,
    assignment: ReplicaAssignment,
    current: LeaderIsrAndControllerEpoch,
    live_brokers: Collection[int],
    shutting_down_brokers: Collection[int],
    unclean_enabled: bool,
) -> ElectionResult:
    """Run `strategy` and compute the new ISR (reference section 3). `leader` is None when no
    replica is eligible; the caller then leaves the partition as it is (offline).

    `live_brokers` are the brokers on which a replica counts as online: registered, not
    shutting down, log dir healthy (ControllerContext.isReplicaOnline). Controlled shutdown
    also accepts shutting-down brokers as live, as Kafka does."""
    replicas = assignment.replicas
    isr = current.isr
    epoch = current.leader_epoch + 1
    # Sets are used as they are (the caller's, not copied per partition: an election runs once
    # per partition of a 10k-partition controlled shutdown or broker failure).
    live = live_brokers if isinstance(live_brokers, (set, frozenset)) else set(live_brokers)
    if strategy is ElectionStrategy.OFFLINE:
        leader = offline_partition_leader_election(replicas, isr, live, unclean_enabled)
        if leader is None:
            return ElectionResult(None, epoch, isr, False)
        if leader not in isr:
            return ElectionResult(leader, epoch, (leader,), True)
        # The ISR keeps its live replicas (`live` may name every live broker).
        return ElectionResult(leader, epoch, tuple([r for r in isr if r in live and r in replicas]), False)
    if strategy is ElectionStrategy.REASSIGN:
        leader = reassign_partition_leader_election(assignment.target_replicas, isr, live)
        return ElectionResult(leader, epoch, isr, False)
    if strategy is ElectionStrategy.PREFERRED:
        leader = preferred_replica_partition_leader_election(replicas, isr, live)
        return ElectionResult(leader, epoch, isr, False)
    shutting = (
        shutting_down_brokers if isinstance(shutting_down_brokers, (set, frozenset)) else set(shutting_down_brokers)
    )
    # A replica that is not shutting down counts as live only when it is live: the first
    # eligible replica is the same with or without the shutting-down brokers added to `live`.
    leader = controlled_shutdown_partition_leader_election(replicas, isr, live, shutting)
    return ElectionResult(leader, epoch, tuple([r for r in isr if r not in shutting]), False)
