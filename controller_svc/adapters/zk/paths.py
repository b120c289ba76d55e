"""Kafka 2.x znode paths (kafka.zk.ZkData), plus the one path of our own (controller endpoints)."""

from __future__ import annotations

CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
CONFIG = "/config"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
CLUSTER_ID = "/cluster/id"

# Not part of Kafka's layout: where controllers publish their gRPC endpoint, so that
# brokers and the CLI can find the active controller from ZooKeeper alone.
CONTROLLER_ENDPOINTS = "/kcontroller/controllers"

# Persistent paths a Kafka broker creates at start-up (KafkaZkClient.createTopLevelPaths).
PERSISTENT_PATHS = (
    BROKER_IDS,
    BROKER_TOPICS,
    BROKER_SEQID,
    DELETE_TOPICS,
    ISR_CHANGE_NOTIFICATION,
    LOG_DIR_EVENT_NOTIFICATION,
    CONFIG_TOPICS,
    CONFIG_CHANGES,
    "/config/brokers",
    "/latest_producer_id_block",
    CONTROLLER_ENDPOINTS,
)


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def controller_endpoint_path(controller_id: int) -> str:
    return f"{CONTROLLER_ENDPOINTS}/{controller_id}"
