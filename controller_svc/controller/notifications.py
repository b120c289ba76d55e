"""Notifications brokers and tools leave in ZooKeeper for the controller:
ISR changes (/isr_change_notification), log-dir failures (/log_dir_event_notification) and
config changes (/config/changes). Handlers re-read ZooKeeper when they run (watches carry
no data, KAFKA-5502) and delete what they processed (behind the epoch check)."""

from __future__ import annotations

import logging

from controller_svc.adapters.zk import paths
from controller_svc.common import metrics
from controller_svc.common.model import TopicPartition
from controller_svc.controller.partition_manager import PartitionManager
from controller_svc.controller.ports import ControllerStore
from controller_svc.core.context import ControllerContext

log = logging.getLogger(__name__)


async def clear_before_load(store: ControllerStore) -> str:
    """Failover, before the metadata is loaded (Kafka's onControllerFailover deletes the ISR-change
    and log-dir notifications before initializeControllerContext): what they announce is in the
    state the load reads next, and a notification written during the load is new and gets
    processed afterwards. Deleted after the load, such a notification would be lost with its
    change (the controller keeping a stale ISR). Replicas on failed log dirs show up again as
    KAFKA_STORAGE_ERROR answers to the start-up LeaderAndIsr. Returns the config-change
    high-water mark, taken now for the same reason: a change made during the load is either
    in what it read or above the mark."""
    for parent in (paths.ISR_CHANGE_NOTIFICATION, paths.LOG_DIR_EVENT_NOTIFICATION):
        children = await store.children(parent, watch=True)
        if children:
            await store.fenced_delete([f"{parent}/{c}" for c in children])
    changes = await store.children(paths.CONFIG_CHANGES, watch=True)
    return max(changes, default="")


class NotificationProcessor:
    def __init__(
        self,
        controller_id: int,
        ctx: ControllerContext,
        store: ControllerStore,
        partitions: PartitionManager,
        last_config_change: str = "",
    ) -> None:
        self.controller_id = controller_id
        self.ctx = ctx
        self.store = store
        self.partitions = partitions
        self.last_config_change = last_config_change

    def __repr__(self) -> str:
        return f"NotificationProcessor(last_config_change={self.last_config_change!r})"

    async def process_isr_changes(self) -> list[TopicPartition]:
        """Reload the partitions named by ISR change notifications; returns them."""
        notes = await self.store.read_notifications(paths.ISR_CHANGE_NOTIFICATION)
        if not notes:
            return []
        changed: set[TopicPartition] = set()
        for name, obj in notes:
            entries = obj.get("partitions") if obj is not None else None
            if not isinstance(entries, list):
                metrics.CORRUPT_ZNODES.labels("isr_change_notification").inc()
                log.error("ignoring malformed ISR change notification %s: %r", name, obj)
                continue
            for entry in entries:
                if (
                    isinstance(entry, dict)
                    and isinstance(entry.get("topic"), str)
                    and isinstance(entry.get("partition"), int)
                ):
                    changed.add(TopicPartition(entry["topic"], entry["partition"]))
        known = sorted(tp for tp in changed if self.ctx.assignment(tp) is not None)
        if known:
            await self.store.load_partition_states(self.ctx, known)
            log.info("controller %d: ISR changed for %d partitions", self.controller_id, len(known))
            await self.partitions.send_update_metadata(self.ctx.live_or_shutting_down_broker_ids, known)
        await self.store.fenced_delete([f"{paths.ISR_CHANGE_NOTIFICATION}/{name}" for name, _ in notes])
        return known

    async def process_log_dir_events(self) -> None:
        notes = await self.store.read_notifications(paths.LOG_DIR_EVENT_NOTIFICATION)
        if not notes:
            return
        brokers: set[int] = set()
        for name, obj in notes:
            broker = obj.get("broker") if obj is not None else None
            if isinstance(broker, int) and not isinstance(broker, bool):
                brokers.add(broker)
            else:
                metrics.CORRUPT_ZNODES.labels("log_dir_event_notification").inc()
                log.error("ignoring malformed log dir event notification %s: %r", name, obj)
        if brokers:
            log.warning("controller %d: log dir failures reported by brokers %s", self.controller_id, sorted(brokers))
            await self.partitions.on_log_dir_failure(brokers)
        await self.store.fenced_delete([f"{paths.LOG_DIR_EVENT_NOTIFICATION}/{name}" for name, _ in notes])

    async def process_config_changes(self) -> None:
        notes = await self.store.read_notifications(paths.CONFIG_CHANGES)
        fresh = [(name, obj) for name, obj in notes if name > self.last_config_change]
        if not fresh:
            return
        topics: set[str] = set()
        for name, obj in fresh:
            topic = _topic_of_config_change(obj)
            if topic is None:
                if obj is None:
                    metrics.CORRUPT_ZNODES.labels("config_change").inc()
                    log.error("ignoring malformed config change notification %s", name)
                continue
            topics.add(topic)
        self.last_config_change = max(name for name, _ in fresh)
        known = sorted(t for t in topics if t in self.ctx.assignments)
        if not known:
            return
        configs = await self.store.load_topic_configs(known)
        enabled: set[str] = set()
        for topic in known:
            if topic in configs:
                self.ctx.topic_configs[topic] = configs[topic]
            else:
                self.ctx.topic_configs.pop(topic, None)
            # Kafka's TopicConfigHandler: every change that leaves unclean election enabled
            # retries the topic's offline partitions, whatever the cache said before (an
            # election may have refreshed it from ZooKeeper already, for other partitions).
            if self.ctx.unclean_election_enabled(topic, False):
                enabled.add(topic)
        if enabled:
            # TopicUncleanLeaderElectionEnable: offline partitions of these topics get another chance.
            log.warning("controller %d: unclean leader election enabled for %s", self.controller_id, sorted(enabled))
            await self.partitions.retry_offline_partitions(enabled)


def _topic_of_config_change(obj: dict[str, object] | None) -> str | None:
    if obj is None:
        return None
    entity_path = obj.get("entity_path")
    if isinstance(entity_path, str) and entity_path.startswith("topics/"):
        return entity_path[len("topics/") :]
    if obj.get("entity_type") == "topics" and isinstance(obj.get("entity_name"), str):
        return str(obj["entity_name"])
    return None
