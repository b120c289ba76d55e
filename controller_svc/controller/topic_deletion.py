"""Topic deletion (Kafka's TopicDeletionManager, seed 003).

A topic queued in /admin/delete_topics goes: partitions Offline -> NonExistent; replicas
OfflineReplica -> ReplicaDeletionStarted (StopReplica delete=true). StopReplica answers come
back as events: success -> ReplicaDeletionSuccessful, error -> ReplicaDeletionIneligible. A
topic with a dead replica or an ongoing reassignment is ineligible and resumes when that
clears. When every replica is deleted, the topic's znodes go: /brokers/topics/<t> (with its
partition states), /config/topics/<t> and /admin/delete_topics/<t>.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from controller_svc.adapters.zk import paths
from controller_svc.common import metrics
from controller_svc.common.model import PartitionAndReplica, TopicPartition
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.controller.partition_manager import PartitionManager
from controller_svc.controller.partition_state_machine import PartitionState
from controller_svc.controller.ports import ControllerStore
from controller_svc.controller.replica_state_machine import ReplicaState
from controller_svc.core.context import ControllerContext

log = logging.getLogger(__name__)


class TopicDeletionManager:
    def __init__(
        self,
        controller_id: int,
        ctx: ControllerContext,
        store: ControllerStore,
        partitions: PartitionManager,
        state_log: StateChangeLog,
        delete_enabled: bool,
    ) -> None:
        self.controller_id = controller_id
        self.ctx = ctx
        self.store = store
        self.partitions = partitions
        self.state_log = state_log
        self.delete_enabled = delete_enabled
        self.started: set[str] = set()

    def __repr__(self) -> str:
        return (
            f"TopicDeletionManager(queued={sorted(self.ctx.topics_to_be_deleted)}, "
            f"ineligible={sorted(self.ctx.topics_ineligible_for_deletion)})"
        )

    @property
    def rsm(self):  # type: ignore[no-untyped-def]
        return self.partitions.rsm

    def update_metrics(self) -> None:
        queued = self.ctx.topics_to_be_deleted
        ineligible = self.ctx.topics_ineligible_for_deletion
        metrics.TOPICS_TO_DELETE.set(len(queued))
        metrics.TOPICS_INELIGIBLE_TO_DELETE.set(len(ineligible & queued))
        # A scan of every replica's state (3M at 1M partitions, after every failover's resume):
        # only while some topic is queued.
        to_delete = [r for r, s in self.rsm.states.items() if r.tp.topic in queued] if queued else []
        metrics.REPLICAS_TO_DELETE.set(len(to_delete))
        metrics.REPLICAS_INELIGIBLE_TO_DELETE.set(
            sum(1 for r in to_delete if self.rsm.states[r] is ReplicaState.DELETION_INELIGIBLE)
        )

    # --- entry points (each runs inside a request batch of the caller) ---------------------------

    async def process_requests(self, requested: set[str]) -> None:
        """TopicDeletion event: the children of /admin/delete_topics."""
        unknown = requested - set(self.ctx.assignments)
        if unknown:
            log.warning("ignoring deletion of unknown topics %s", sorted(unknown))
            await self.store.fenced_delete([f"{paths.DELETE_TOPICS}/{t}" for t in sorted(unknown)])
        topics = requested - unknown
        if not topics:
            return
        if not self.delete_enabled:
            log.warning("delete.topic.enable is false: removing the deletion requests for %s", sorted(topics))
            await self.store.fenced_delete([f"{paths.DELETE_TOPICS}/{t}" for t in sorted(topics)])
            return
        fresh = topics - self.ctx.topics_to_be_deleted
        if not fresh:
            return
        for topic in sorted(fresh):
            self.state_log.record("topic.deletion_started", topic=topic, controller_epoch=self.ctx.epoch)
        reassigning = {tp.topic for tp in self.ctx.partitions_being_reassigned}
        self.ctx.topics_ineligible_for_deletion.update(fresh & reassigning)
        self.ctx.topics_to_be_deleted.update(fresh)
        await self.resume()

    def mark_ineligible(self, topics: Iterable[str]) -> None:
        queued = set(topics) & self.ctx.topics_to_be_deleted
        if queued - self.ctx.topics_ineligible_for_deletion:
            log.info("topics %s are ineligible for deletion for now", sorted(queued))
        self.ctx.topics_ineligible_for_deletion.update(queued)

    async def resume_for(self, topics: Iterable[str]) -> None:
        """A dead replica came back or a reassignment finished: retry those topics."""
        queued = set(topics) & self.ctx.topics_to_be_deleted
        if queued:
            self.ctx.topics_ineligible_for_deletion.difference_update(queued)
            await self.resume()

    async def on_stop_replica_response(
        self, broker_id: int, error_code: int, partition_errors: list[tuple[TopicPartition, int]]
    ) -> None:
        """TopicDeletionStopReplicaResponseReceived: the answers for the replicas a
        StopReplica(delete=true) deleted on `broker_id` (a request-level error is already in
        each partition's code). Errors -> ReplicaDeletionIneligible, the rest ->
        ReplicaDeletionSuccessful; replicas no longer in ReplicaDeletionStarted are left alone."""
        codes = {PartitionAndReplica(tp, broker_id): code for tp, code in partition_errors}
        started = {
            r
            for r in codes
            if self.rsm.state(r) is ReplicaState.DELETION_STARTED and r.tp.topic in self.ctx.topics_to_be_deleted
        }
        failed = {r for r in started if codes[r] != 0}
        succeeded = started - failed
        if failed:
            await self.fail_replica_deletion(failed)
        if succeeded:
            await self.rsm.handle_state_changes(succeeded, ReplicaState.DELETION_SUCCESSFUL)
            await self.resume()

    async def fail_replica_deletion(self, replicas: set[PartitionAndReplica]) -> None:
        queued = {r for r in replicas if r.tp.topic in self.ctx.topics_to_be_deleted}
        if not queued:
            return
        log.warning(
            "deletion of replicas %s failed; their topics are ineligible for now", sorted(str(r) for r in queued)[:20]
        )
        await self.rsm.handle_state_changes(
            [r for r in queued if self.rsm.state(r) is ReplicaState.DELETION_STARTED], ReplicaState.DELETION_INELIGIBLE
        )
        self.mark_ineligible({r.tp.topic for r in queued})
        await self.resume()

    # --- the state machine of deletions ----------------------------------------------------------

    def _all_deleted(self, topic: str) -> bool:
        replicas = self.rsm.replicas_in(topic, *ReplicaState)
        assigned = self.ctx.all_replicas(self.ctx.partitions_for_topic(topic))
        if not replicas:
            # No replica left to delete: none was ever assigned, or a completion that failed
            # half-way (its replicas already NonExistent and unassigned) is being finished.
            return not assigned
        # Every assigned replica, not only those the state machine tracks, must be deleted.
        return all(self.rsm.state(r) is ReplicaState.DELETION_SUCCESSFUL for r in set(replicas) | set(assigned))

    async def resume(self) -> None:
        """TopicDeletionManager.resumeDeletions."""
        eligible: set[str] = set()
        for topic in sorted(self.ctx.topics_to_be_deleted):
            if self._all_deleted(topic):
                await self._complete(topic)
                continue
            if self.rsm.replicas_in(topic, ReplicaState.DELETION_STARTED):
                continue  # in progress
            retry = self.rsm.replicas_in(topic, ReplicaState.DELETION_INELIGIBLE)
            if retry and topic not in self.ctx.topics_ineligible_for_deletion:
                await self.rsm.handle_state_changes(retry, ReplicaState.OFFLINE)
            if topic not in self.ctx.topics_ineligible_for_deletion:
                eligible.add(topic)
        if eligible:
            await self._on_topic_deletion(eligible)
        self.update_metrics()

    async def _on_topic_deletion(self, topics: set[str]) -> None:
        unseen = topics - self.started
        if unseen:
            partitions = [tp for t in sorted(unseen) for tp in self.ctx.partitions_for_topic(t)]
            psm = self.partitions.psm
            await psm.handle_state_changes(
                [tp for tp in partitions if psm.state(tp) is not PartitionState.OFFLINE], PartitionState.OFFLINE
            )
            await psm.handle_state_changes(partitions, PartitionState.NON_EXISTENT)
            self.started.update(unseen)
        # Brokers stop serving the topics (UpdateMetadata marks them with leader -2).
        self.partitions.batch.add_update_metadata(
            self.ctx.live_or_shutting_down_broker_ids,
            [tp for t in sorted(topics) for tp in self.ctx.partitions_for_topic(t)],
        )
        for topic in sorted(topics):
            replicas = self.ctx.all_replicas(self.ctx.partitions_for_topic(topic))
            # An assigned replica the state machine does not track must be deleted too.
            self.rsm.adopt(replicas)
            dead = {r for r in replicas if not self.ctx.is_replica_online(r.replica, r.tp, include_shutting_down=True)}
            alive = replicas - dead
            successful = {r for r in replicas if self.rsm.state(r) is ReplicaState.DELETION_SUCCESSFUL}
            alive -= successful
            if dead:
                await self.rsm.handle_state_changes(
                    [r for r in dead if self.rsm.state(r) is not ReplicaState.DELETION_INELIGIBLE],
                    ReplicaState.OFFLINE,
                )
                await self.rsm.handle_state_changes(dead, ReplicaState.DELETION_INELIGIBLE)
                self.mark_ineligible([topic])
            not_offline = [r for r in alive if self.rsm.state(r) is not ReplicaState.OFFLINE]
            await self.rsm.handle_state_changes(not_offline, ReplicaState.OFFLINE)
            await self.rsm.handle_state_changes(alive, ReplicaState.DELETION_STARTED)

    async def _complete(self, topic: str) -> None:
        """All replicas deleted: remove the topic from ZooKeeper and from memory."""
        replicas = self.rsm.replicas_in(topic, *ReplicaState)
        await self.rsm.handle_state_changes(replicas, ReplicaState.NON_EXISTENT)
        partitions = self.ctx.partitions_for_topic(topic)
        znodes: list[str] = []
        for tp in partitions:
            znodes.append(paths.partition_state_path(tp.topic, tp.partition))
            znodes.append(paths.partition_path(tp.topic, tp.partition))
        znodes += [paths.partitions_path(topic), paths.topic_path(topic), f"{paths.CONFIG_TOPICS}/{topic}"]
        # Children first; bounded multis behind the epoch check. Znodes already gone are skipped,
        # so a controller that dies half-way leaves work the next one can finish.
        await self.store.fenced_delete(znodes)
        await self.store.fenced_delete([f"{paths.DELETE_TOPICS}/{topic}"])
        self.partitions.psm.remove(partitions)
        self.rsm.remove(replicas)
        self.ctx.remove_topic(topic)
        self.started.discard(topic)
        log.info("controller %d: deletion of topic %s completed", self.controller_id, topic)
        self.state_log.record("topic.deleted", topic=topic, controller_epoch=self.ctx.epoch)
