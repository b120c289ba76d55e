"""Contract 2 of DESIGN.md: the four leader-election functions, importable from here.

They live in the pure core (`controller_svc.core.election`); this module is the contract's
stable path for tests and tools outside the package.
"""

from controller_svc.core.election import (
    controlled_shutdown_partition_leader_election,
    offline_partition_leader_election,
    preferred_replica_partition_leader_election,
    reassign_partition_leader_election,
)

__all__ = [
    "controlled_shutdown_partition_leader_election",
    "offline_partition_leader_election",
    "preferred_replica_partition_leader_election",
    "reassign_partition_leader_election",
]
