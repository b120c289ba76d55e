"""The settings a controller runs with (from the `controller.*` config keys)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    controller_id: int
    grpc_endpoint: str
    metrics_endpoint: str
    request_timeout_s: float = 30.0
    retry_backoff_s: float = 0.1
    election_retry_s: float = 2.0
    unclean_leader_election_enable: bool = False
    delete_topic_enable: bool = True
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_s: float = 300.0
    # Kafka runs the first automatic rebalance 5 s after failover.
    first_rebalance_delay_s: float = 5.0
    # At failover, ask brokers which leader epochs they hold and send LeaderAndIsr only where
    # they are behind (core/replica_epochs.py); a broker that has not answered within the
    # timeout gets every LeaderAndIsr, as Kafka sends them.
    failover_replica_epochs_enable: bool = True
    failover_replica_epochs_timeout_s: float = 3.0
    # With the replica epochs, ask for each topic's metadata digest and send a broker only the
    # UpdateMetadata of the topics where its cache differs (core/replica_epochs.topics_lacking).
    failover_metadata_digests_enable: bool = True
    # While not active, keep a copy of topics, partition states and topic configs current and
    # take it over at failover after verifying it (adapters/zk/standby.py); off: load cold.
    standby_warm_enable: bool = True
    standby_refresh_interval_s: float = 0.1
    # Fault injection: hold the event loop this long after the failover's load (0: off).
    debug_failover_hold_loop_s: float = 0.0
    # Fault injection: the directory of arm files for stopping this process at a named point
    # (common/self_stop.py; empty: off).
    debug_self_stop_dir: str = ""
