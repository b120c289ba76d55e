"""Controller metrics, named as the Prometheus JMX exporter names Kafka's MBeans
(kafka.controller:type=KafkaController,name=ActiveControllerCount ->
kafka_controller_kafkacontroller_activecontrollercount), so Kafka dashboards work unchanged.
Metrics that Kafka does not have are prefixed `kcontroller_`.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from controller_svc.common.histogram import KafkaHistogram

ACTIVE_CONTROLLER_COUNT = Gauge(
    "kafka_controller_kafkacontroller_activecontrollercount", "1 on the active controller, 0 elsewhere"
)
CONTROLLER_STATE = Gauge(
    "kafka_controller_kafkacontroller_controllerstate", "Kafka ControllerState value of the event in progress"
)
GLOBAL_TOPIC_COUNT = Gauge("kafka_controller_kafkacontroller_globaltopiccount", "Topics (active controller)")
GLOBAL_PARTITION_COUNT = Gauge(
    "kafka_controller_kafkacontroller_globalpartitioncount", "Partitions (active controller)"
)
EVENT_QUEUE_SIZE = Gauge(
    "kafka_controller_controllereventmanager_eventqueuesize", "Events waiting in the controller event queue"
)
# Kafka's histograms and timers: `_count` plus quantiles, as the JMX exporter shows them.
EVENT_QUEUE_TIME_MS = KafkaHistogram(
    "kafka_controller_controllereventmanager_eventqueuetimems", "Time events wait in the queue (ms)"
)
CHANNEL_QUEUE_SIZE = Gauge(
    "kafka_controller_controllerchannelmanager_queuesize",
    "Requests waiting to be sent to a broker",
    ["broker_id"],
)
CHANNEL_TOTAL_QUEUE_SIZE = Gauge(
    "kafka_controller_controllerchannelmanager_totalqueuesize", "Requests waiting for all brokers"
)
CHANNEL_QUEUE_TIME_MS = KafkaHistogram(
    "kafka_controller_controllerchannelmanager_requestrateandqueuetimems",
    "Time control requests wait before being sent (ms)",
    ["broker_id"],
)
CONTROLLER_EPOCH = Gauge("kcontroller_controller_epoch", "Controller epoch of the active controller, else 0")
ELECTIONS_WON = Counter("kcontroller_controller_elections_won_total", "Times this process became controller")
RESIGNATIONS = Counter("kcontroller_controller_resignations_total", "Times this process resigned")
EVENT_HANDLER_ERRORS = Counter(
    "kcontroller_event_handler_errors_total", "Controller events whose processing failed", ["event"]
)
CORRUPT_ZNODES = Counter("kcontroller_corrupt_znodes_total", "Znodes found with data that does not parse", ["kind"])
ZK_WRITE_RETRIES = Counter(
    "kcontroller_zookeeper_write_retries", "Fenced writes sent again after ZooKeeper gave no answer (same session)"
)
ELECTION_BLOCKED = Gauge(
    "kcontroller_controller_election_blocked", "1 while elections are refused (e.g. corrupt /controller_epoch)"
)
REQUEST_ERRORS = Counter(
    "kcontroller_control_request_errors_total",
    "Control requests answered with an error or failed in transport",
    ["broker_id", "api", "error"],
)


OFFLINE_PARTITIONS = Gauge(
    "kafka_controller_kafkacontroller_offlinepartitionscount", "Partitions without a leader (not being deleted)"
)
PREFERRED_REPLICA_IMBALANCE = Gauge(
    "kafka_controller_kafkacontroller_preferredreplicaimbalancecount", "Partitions not led by their preferred replica"
)
# A Yammer Meter: the JMX exporter's rule `name=(.+)PerSec\w*><>Count -> kafka_$1_$2_$3_total`
# drops the PerSec (kafka_controller_controllerstats_uncleanleaderelections_total).
UNCLEAN_LEADER_ELECTIONS = Counter(
    "kafka_controller_controllerstats_uncleanleaderelections", "Unclean leader elections"
)
# Kafka's ZooKeeperClient meters (kafka.server:type=SessionExpireListener,name=ZooKeeper*PerSec),
# marked as the session's state changes; every process with a ZooKeeper session has them. A
# disconnect that the session survives still loses what the connection held (a standby's tree
# watch, and so its copy: kcontroller_standby_reloads_total follows these).
ZK_DISCONNECTS = Counter(
    "kafka_server_sessionexpirelistener_zookeeperdisconnects",
    "Connections to ZooKeeper lost (a server stalled past the ping timeout, or closed the connection)",
)
ZK_SYNC_CONNECTS = Counter(
    "kafka_server_sessionexpirelistener_zookeepersyncconnects", "Connections to ZooKeeper (re)established"
)
ZK_READ_ONLY_CONNECTS = Counter(
    "kafka_server_sessionexpirelistener_zookeeperreadonlyconnects", "Connections to a read-only ZooKeeper server"
)
ZK_EXPIRES = Counter(
    "kafka_server_sessionexpirelistener_zookeeperexpires",
    "ZooKeeper sessions lost: expired, or refused on reconnection (not closed by this process)",
)
# Kafka's ControllerState.rateAndTimeMetricName: one timer per state (Idle has none), e.g.
# kafka.controller:type=ControllerStats,name=LeaderElectionRateAndTimeMs for BrokerChange.
STATE_TIMER_NAMES = {
    1: "ControllerChangeRateAndTimeMs",
    2: "LeaderElectionRateAndTimeMs",
    3: "TopicChangeRateAndTimeMs",
    4: "TopicDeletionRateAndTimeMs",
    5: "PartitionReassignmentRateAndTimeMs",
    6: "AutoLeaderBalanceRateAndTimeMs",
    7: "ManualLeaderBalanceRateAndTimeMs",
    8: "ControlledShutdownRateAndTimeMs",
    9: "IsrChangeRateAndTimeMs",
    10: "LeaderAndIsrResponseReceivedRateAndTimeMs",
    11: "LogDirChangeRateAndTimeMs",
    12: "ControllerShutdownRateAndTimeMs",
    13: "UncleanLeaderElectionEnableRateAndTimeMs",
    14: "TopicUncleanLeaderElectionEnableRateAndTimeMs",
    15: "ListPartitionReassignmentRateAndTimeMs",
    16: "UpdateMetadataResponseReceivedRateAndTimeMs",
}
STATE_RATE_AND_TIME_MS = {
    state: KafkaHistogram(
        f"kafka_controller_controllerstats_{name.lower()}", f"Time spent handling events in {name[:-13]} (ms)"
    )
    for state, name in STATE_TIMER_NAMES.items()
}


def observe_state_time(state: int, millis: float) -> None:
    timer = STATE_RATE_AND_TIME_MS.get(state)
    if timer is not None:
        timer.observe(millis)


ADMIN_REQUEST_ERRORS = Counter(
    "kcontroller_admin_request_errors_total", "Admin requests refused, by API and Kafka error", ["api", "error"]
)
TOPICS_TO_DELETE = Gauge("kafka_controller_kafkacontroller_topicstodeletecount", "Topics queued for deletion")
REPLICAS_TO_DELETE = Gauge("kafka_controller_kafkacontroller_replicastodeletecount", "Replicas of topics being deleted")
TOPICS_INELIGIBLE_TO_DELETE = Gauge(
    "kafka_controller_kafkacontroller_topicsineligibletodeletecount", "Topics whose deletion waits"
)
REPLICAS_INELIGIBLE_TO_DELETE = Gauge(
    "kafka_controller_kafkacontroller_replicasineligibletodeletecount", "Replicas whose deletion waits"
)
REASSIGNING_PARTITIONS = Gauge(
    "kafka_controller_kafkacontroller_reassigningpartitions", "Partitions being reassigned (KIP-503)"
)


# Gauges of the active controller: Kafka's read 0 on any other controller (`if (!isActive) 0`),
# so sums across controllers (OfflinePartitionsCount on a dashboard) count each partition once.
STANDBY_READY = Gauge(
    "kcontroller_standby_ready", "1 while this standby controller holds a complete copy of the metadata (warm)"
)
STANDBY_PENDING = Gauge(
    "kcontroller_standby_pending",
    "Work the standby copy has left before a takeover adopts all of it: changed znodes heard and not yet "
    "re-read, partition states not yet encoded, topics not yet digested (0 when idle)",
)
STANDBY_RELOADS = Counter("kcontroller_standby_reloads_total", "Complete reads of the standby copy")
STANDBY_STATES_KEPT = Counter(
    "kcontroller_standby_states_kept_total",
    "Partition states a reload of the standby copy found unchanged and kept (not decoded, encoded or digested again)",
)
STANDBY_ZNODES_READ = Counter("kcontroller_standby_znodes_read_total", "Znodes the standby copy read")
STANDBY_ERRORS = Counter(
    "kcontroller_standby_errors_total", "Errors of the standby copy: failed reads (the copy is read again) and faults"
)
FAILOVER_LOADS = Counter(
    "kcontroller_failover_loads_total", "Failover metadata loads, by mode (warm: from the standby copy)", ["mode"]
)
ACTIVE_ONLY_GAUGES = (
    ACTIVE_CONTROLLER_COUNT,
    CONTROLLER_EPOCH,
    GLOBAL_TOPIC_COUNT,
    GLOBAL_PARTITION_COUNT,
    OFFLINE_PARTITIONS,
    PREFERRED_REPLICA_IMBALANCE,
    TOPICS_TO_DELETE,
    REPLICAS_TO_DELETE,
    TOPICS_INELIGIBLE_TO_DELETE,
    REPLICAS_INELIGIBLE_TO_DELETE,
    REASSIGNING_PARTITIONS,
)


def reset_active_controller_gauges() -> None:
    for gauge in ACTIVE_ONLY_GAUGES:
        gauge.set(0)
