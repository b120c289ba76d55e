"""Topics: creation from ZooKeeper (any tool writing /brokers/topics/<t>, Kafka's own
included) and from the CreateTopics RPC, partition expansion by rewriting the topic znode,
and topics disappearing (KafkaController's TopicChange and PartitionModifications)."""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from controller_svc.adapters.zk import codecs, paths
from controller_svc.adapters.zk.client import CreateOp, SetDataOp, WatchCallback, ZkOp
from controller_svc.common import metrics
from controller_svc.common.errors import ControllerError, ControllerMovedError, ErrorCode, ZkNodeExistsError
from controller_svc.common.model import ReplicaAssignment, TopicPartition
from controller_svc.controller.events import NewTopic
from controller_svc.controller.partition_manager import PartitionManager
from controller_svc.controller.ports import ControllerStore
from controller_svc.core.context import ControllerContext
from controller_svc.core.topics import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidTopicError,
    assign_replicas_to_brokers,
    colliding_topic,
    validate_assignment,
    validate_topic_name,
)

log = logging.getLogger(__name__)

BOOLEAN_TOPIC_CONFIGS = frozenset({"unclean.leader.election.enable"})


class TopicExistsError(ControllerError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidConfigError(ControllerError):
    code = ErrorCode.INVALID_CONFIG


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    error_code: int
    error_message: str = ""
    assignment: dict[int, tuple[int, ...]] = field(default_factory=dict)
    topic_id: str = ""


def new_topic_id() -> str:
    """Kafka's Uuid.toString: URL-safe base64 of 16 random bytes, without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


class TopicAdmin:
    def __init__(
        self,
        controller_id: int,
        ctx: ControllerContext,
        store: ControllerStore,
        partitions: PartitionManager,
        on_topic_data: WatchCallback,
    ) -> None:
        self.controller_id = controller_id
        self.ctx = ctx
        self.store = store
        self.partitions = partitions
        self._on_topic_data = on_topic_data
        self._watched: set[str] = set()

    def __repr__(self) -> str:
        return f"TopicAdmin(watched={len(self._watched)})"

    def watch_topics(self, topics: set[str]) -> None:
        """PartitionModifications handlers: one data watch per topic znode."""
        for topic in topics - self._watched:
            self.store.watch_data(paths.topic_path(topic), self._on_topic_data)
        for topic in self._watched - topics:
            self.store.unwatch(paths.topic_path(topic))
        self._watched = set(topics)

    def _warn_unknown_brokers(self, topic: str, assignments: dict[int, ReplicaAssignment]) -> None:
        known = set(self.ctx.live_brokers)
        unknown = sorted({r for a in assignments.values() for r in a.replicas} - known)
        if unknown:
            metrics.CORRUPT_ZNODES.labels("topic_unknown_broker").inc()
            log.warning(
                "topic %s has replicas on brokers %s that are not registered; they stay offline until those "
                "brokers register",
                topic,
                unknown,
            )

    async def process_topic_change(self) -> None:
        names = set(await self.store.load_topic_names(watch=True))
        deleted = set(self.ctx.assignments) - names
        for topic in sorted(deleted):
            log.info("controller %d: topic %s disappeared from ZooKeeper", self.controller_id, topic)
            partitions = self.ctx.partitions_for_topic(topic)
            self.partitions.psm.remove(partitions)
            self.partitions.rsm.remove(self.ctx.all_replicas(partitions))
            self.ctx.remove_topic(topic)
        for topic in set(self.ctx.malformed_topics) - names:
            del self.ctx.malformed_topics[topic]
        new = sorted(names - set(self.ctx.assignments))
        if new:
            await self._add_topics(new)
        self.watch_topics(set(self.ctx.assignments) | set(self.ctx.malformed_topics))
        self.partitions.update_metrics()

    async def _add_topics(self, topics: Sequence[str]) -> None:
        loaded = await self.store.load_topics(topics, watch=True, known_bad=self.ctx.malformed_topics)
        configs = await self.store.load_topic_configs(sorted(loaded))
        new_partitions: list[TopicPartition] = []
        for topic in sorted(loaded):
            if topic in self.ctx.assignments:
                continue
            entry = loaded[topic]
            self._warn_unknown_brokers(topic, entry.assignments)
            self.ctx.assignments[topic] = dict(entry.assignments)
            if entry.topic_id:
                self.ctx.topic_ids[topic] = entry.topic_id
            if topic in configs:
                self.ctx.topic_configs[topic] = configs[topic]
            new_partitions.extend(self.ctx.partitions_for_topic(topic))
            log.info(
                "controller %d: new topic %s with %d partitions", self.controller_id, topic, len(entry.assignments)
            )
        await self.partitions.on_new_partitions(new_partitions)

    async def process_partition_modifications(self, topic: str) -> None:
        if topic in self.ctx.malformed_topics:
            # A malformed topic znode was rewritten: try it again as a new topic.
            await self._add_topics([topic])
            self.watch_topics(set(self.ctx.assignments) | set(self.ctx.malformed_topics))
            return
        if topic not in self.ctx.assignments:
            return
        loaded = await self.store.load_topics([topic], watch=True, known_bad=self.ctx.malformed_topics)
        if topic not in loaded:
            return  # deleted (TopicChange follows) or malformed (already logged and counted)
        current = self.ctx.assignments[topic]
        fresh = loaded[topic].assignments
        removed = sorted(set(current) - set(fresh))
        if removed:
            metrics.CORRUPT_ZNODES.labels("topic").inc()
            log.error(
                "topic %s: partitions %s vanished from its znode; partitions cannot be removed, ignoring",
                topic,
                removed,
            )
        added = sorted(set(fresh) - set(current))
        if not added:
            return
        if self.ctx.is_topic_queued_for_deletion(topic):
            log.warning("topic %s is being deleted; not adding partitions %s", topic, added)
            return
        self._warn_unknown_brokers(topic, {p: fresh[p] for p in added})
        for partition in added:
            self.ctx.set_assignment(TopicPartition(topic, partition), fresh[partition])
        log.info("controller %d: topic %s gains partitions %s", self.controller_id, topic, added)
        await self.partitions.on_new_partitions([TopicPartition(topic, p) for p in added])

    # --- CreateTopics --------------------------------------------------------------------------

    def _plan(self, request: NewTopic, planned: set[str]) -> tuple[dict[int, tuple[int, ...]], dict[str, str]]:
        validate_topic_name(request.name)
        if request.name in self.ctx.assignments or request.name in planned:
            raise TopicExistsError(f"topic {request.name!r} already exists")
        other = colliding_topic(request.name, set(self.ctx.assignments) | planned)
        if other is not None:
            raise InvalidTopicError(f"topic {request.name!r} collides with existing topic {other!r} ('.' vs '_')")
        configs = dict(request.configs)
        for key, value in configs.items():
            if key in BOOLEAN_TOPIC_CONFIGS and value.strip().lower() not in ("true", "false"):
                raise InvalidConfigError(f"config {key}={value!r} must be true or false")
        if request.assignment:
            if request.partitions not in (-1, 0) or request.replication_factor not in (-1, 0):
                raise ControllerError("give either an assignment or partitions and replication factor, not both")
            assignment = {p: tuple(r) for p, r in request.assignment}
            validate_assignment(assignment, set(self.ctx.live_brokers), same_replication_factor=True)
            return assignment, configs
        if request.partitions <= 0:
            raise InvalidPartitionsError(f"number of partitions must be larger than 0, got {request.partitions}")
        live = sorted(self.ctx.live_broker_ids)
        return assign_replicas_to_brokers(live, request.partitions, request.replication_factor), configs

    async def create_topics(self, requests: Sequence[NewTopic], validate_only: bool) -> list[CreateTopicResult]:
        results: list[CreateTopicResult] = []
        planned: set[str] = set()
        to_create: list[tuple[int, str, dict[int, tuple[int, ...]], dict[str, str], str]] = []
        for request in requests:
            try:
                assignment, configs = self._plan(request, planned)
                if await self.store.exists(paths.topic_path(request.name)):
                    raise TopicExistsError(f"topic {request.name!r} already exists in ZooKeeper")
            except (ControllerError, InvalidReplicaAssignmentError) as e:
                metrics.ADMIN_REQUEST_ERRORS.labels("CreateTopics", e.code.name).inc()
                log.warning("CreateTopics %s refused: %s: %s", request.name, e.code.name, e)
                results.append(CreateTopicResult(request.name, int(e.code), str(e)))
                continue
            planned.add(request.name)
            topic_id = new_topic_id()
            to_create.append((len(results), request.name, assignment, configs, topic_id))
            results.append(CreateTopicResult(request.name, 0, "", assignment, topic_id))
        if validate_only or not to_create:
            return results
        written: list[str] = []
        for index, name, assignment, configs, topic_id in to_create:
            # Each topic is its own fenced multi: one that fails (a racing creator, a znode we
            # may not write) fails alone, and the topics written before and after it are
            # brought online (Kafka finds new topics by diffing ZooKeeper against its context,
            # so a written topic is never left behind). A controller that moved stops here: the
            # next one finds the written topics in ZooKeeper.
            try:
                await self._write_topic(name, assignment, configs, topic_id)
            except ControllerMovedError:
                raise
            except ControllerError as e:
                code = ErrorCode.TOPIC_ALREADY_EXISTS if isinstance(e, ZkNodeExistsError) else e.code
                metrics.ADMIN_REQUEST_ERRORS.labels("CreateTopics", code.name).inc()
                log.error("CreateTopics %s failed while writing it: %s", name, e)
                results[index] = CreateTopicResult(name, int(code), f"writing the topic failed: {e}")
                continue
            written.append(name)
            self.ctx.assignments[name] = {p: ReplicaAssignment(r) for p, r in assignment.items()}
            self.ctx.topic_ids[name] = topic_id
            if configs:
                self.ctx.topic_configs[name] = configs
            log.info("controller %d: created topic %s (%d partitions)", self.controller_id, name, len(assignment))
        if not written:
            return results
        self.watch_topics(set(self.ctx.assignments) | set(self.ctx.malformed_topics))
        # Arm the data watches of the new topic znodes (a read with watch=True does).
        await self.store.arm_exists_watches([paths.topic_path(name) for name in written])
        new_partitions = [tp for name in written for tp in self.ctx.partitions_for_topic(name)]
        await self.partitions.on_new_partitions(new_partitions)
        return results

    async def _write_topic(
        self, name: str, assignment: dict[int, tuple[int, ...]], configs: dict[str, str], topic_id: str
    ) -> None:
        """The topic znode (version 3, as Kafka 2.8 writes it) and its config znode, in one
        fenced multi (AdminZkClient.createTopicWithAssignment)."""
        config_path = f"{paths.CONFIG_TOPICS}/{name}"
        config_data = codecs.encode_topic_config(configs)
        ops: list[ZkOp] = []
        if not await self.store.exists(config_path):
            ops.append(CreateOp(config_path, config_data))
        else:
            ops.append(SetDataOp(config_path, config_data))
        ops.append(
            CreateOp(paths.topic_path(name), codecs.encode_topic(codecs.TopicZnode(assignment, topic_id=topic_id)))
        )
        await self.store.fenced_multi(ops)
