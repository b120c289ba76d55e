"""Broker stub metrics on its own Prometheus endpoint (`metrics.listen`). Where Kafka has the
metric, its JMX-exporter name (kafka.server:type=ReplicaManager,name=LeaderCount ->
kafka_server_replicamanager_leadercount); the rest are prefixed `kcontroller_broker_`."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

CONTROLLER_EPOCH = Gauge("kcontroller_broker_controller_epoch", "Highest controller epoch this broker has accepted")
CONTROLLER_ID = Gauge("kcontroller_broker_controller_id", "Controller whose requests this broker last accepted")
BROKER_EPOCH = Gauge("kcontroller_broker_epoch", "This broker's epoch (its registration's czxid); -1 unregistered")
REGISTERED = Gauge("kcontroller_broker_registered", "1 while registered in /brokers/ids")
LEADER_COUNT = Gauge("kafka_server_replicamanager_leadercount", "Partitions this broker leads")
PARTITION_COUNT = Gauge("kafka_server_replicamanager_partitioncount", "Partitions with a replica on this broker")
REQUESTS = Counter(
    "kcontroller_broker_control_requests_total", "Control requests received, by API and result", ["api", "result"]
)
REJECTED = Counter(
    "kcontroller_broker_rejected_requests_total",
    "Control requests rejected by fencing, by API and Kafka error (name and numeric code)",
    ["api", "error", "code"],
)
