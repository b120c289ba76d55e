"""Partition reassignment with cancel (KIP-455, seed 003).

The ongoing reassignment lives in the topic znode (`adding_replicas` / `removing_replicas`), so
it survives controller failover. Started from /admin/reassign_partitions (legacy JSON) or the
AlterPartitionReassignments RPC (which overrides a ZooKeeper one). Steps:

A (not complete): AR = OAR + RAR in the topic znode; leader epoch bumped and LeaderAndIsr to
   every replica; new replicas -> NewReplica. They catch up and join the ISR (a broker write and
   an ISR change notification), which brings us back here.
B (ISR holds every target replica): target replicas -> OnlineReplica; AR = RAR; the leader is
   moved if it is not in RAR (else its epoch bumped); removed replicas -> Offline -> deleted;
   znode written with AR = RAR; partition removed from /admin/reassign_partitions;
   UpdateMetadata to every broker; topic deletion resumed if it waited on this.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from controller_svc.adapters.zk import codecs, paths
from controller_svc.adapters.zk.client import SetDataOp
from controller_svc.common import metrics
from controller_svc.common.errors import ControllerMovedError, ErrorCode
from controller_svc.common.model import (
    NO_LEADER,
    LeaderIsrAndControllerEpoch,
    PartitionAndReplica,
    ReplicaAssignment,
    TopicPartition,
)
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.controller.partition_manager import PartitionManager
from controller_svc.controller.partition_state_machine import PartitionState
from controller_svc.controller.ports import ControllerStore
from controller_svc.controller.replica_state_machine import ReplicaState
from controller_svc.controller.topic_deletion import TopicDeletionManager
from controller_svc.core.context import ControllerContext
from controller_svc.core.election import ElectionStrategy

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReassignmentResult:
    tp: TopicPartition
    error_code: int
    message: str = ""


def reassign_to(current: ReplicaAssignment, target: Sequence[int]) -> ReplicaAssignment:
    """ReplicaAssignment.reassignTo: full set = target + origin, adding = full - origin,
    removing = origin - target."""
    origin = current.origin_replicas
    full = tuple(dict.fromkeys((*target, *origin)))
    return ReplicaAssignment(
        full,
        tuple(r for r in full if r not in origin),
        tuple(r for r in origin if r not in target),
    )


class ReassignmentManager:
    def __init__(
        self,
        controller_id: int,
        ctx: ControllerContext,
        store: ControllerStore,
        partitions: PartitionManager,
        deletion: TopicDeletionManager,
        state_log: StateChangeLog,
    ) -> None:
        self.controller_id = controller_id
        self.ctx = ctx
        self.store = store
        self.partitions = partitions
        self.deletion = deletion
        self.state_log = state_log
        # Partitions whose reassignment came from /admin/reassign_partitions (to remove from it).
        self.zk_triggered: dict[TopicPartition, tuple[int, ...]] = {}

    def __repr__(self) -> str:
        return f"ReassignmentManager(ongoing={len(self.ctx.partitions_being_reassigned)})"

    def update_metrics(self) -> None:
        metrics.REASSIGNING_PARTITIONS.set(len(self.ctx.partitions_being_reassigned))

    # --- validation ------------------------------------------------------------------------------

    def _validate(self, tp: TopicPartition, target: Sequence[int] | None) -> ReassignmentResult | None:
        if self.ctx.assignment(tp) is None:
            return ReassignmentResult(tp, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp} does not exist")
        if self.ctx.is_topic_queued_for_deletion(tp.topic):
            return ReassignmentResult(tp, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {tp.topic} is being deleted")
        if target is None:
            return None
        if not target:
            return ReassignmentResult(tp, ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{tp}: empty replica list")
        if len(set(target)) != len(target):
            return ReassignmentResult(
                tp, ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{tp}: duplicate replicas {list(target)}"
            )
        unknown = sorted(r for r in target if r < 0 or not self.ctx.is_known_broker(r))
        if unknown:
            return ReassignmentResult(tp, ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{tp}: unknown brokers {unknown}")
        return None

    async def _cancel_would_strand(self, tp: TopicPartition, current: ReplicaAssignment) -> str | None:
        """A cancel reverts to the original replicas and removes the ones being added. If none
        of the original replicas is in the ISR ZooKeeper holds now (they fell behind or died
        while the new ones caught up), the partition would be left with no in-sync replica:
        leaderless, its data only on replicas just removed, waiting for an unclean election.
        Kafka carries such a cancel out; we refuse it with the reason (the simulation found
        partitions stranded that way)."""
        fresh = (await self.partitions.psm.store.read([tp])).get(tp)
        if fresh is None or set(fresh.isr) & set(current.origin_replicas):
            return None
        return (
            f"cancelling would leave {tp} without an in-sync replica: none of its original replicas "
            f"{list(current.origin_replicas)} is in the ISR {list(fresh.isr)}; let the reassignment "
            "complete, or reassign to replicas that include an in-sync one"
        )

    # --- entry points ----------------------------------------------------------------------------

    async def alter(
        self, requests: Sequence[tuple[TopicPartition, tuple[int, ...] | None]]
    ) -> list[ReassignmentResult]:
        """AlterPartitionReassignments: target None cancels (reverts to the original replicas)."""
        results: list[ReassignmentResult] = []
        for tp, target in requests:
            problem = self._validate(tp, target)
            if problem is not None:
                metrics.ADMIN_REQUEST_ERRORS.labels(
                    "AlterPartitionReassignments", ErrorCode(problem.error_code).name
                ).inc()
                log.warning("reassignment of %s refused: %s", tp, problem.message)
                results.append(problem)
                continue
            current = self.ctx.assignment(tp)
            assert current is not None
            if target is not None:
                # Kafka's validateReplicas (API path only; a ZooKeeper plan may name a broker
                # that is down and waits for it): the replicas to add must be live brokers.
                live = self.ctx.live_or_shutting_down_broker_ids - self.ctx.shutting_down_broker_ids
                not_live = sorted(r for r in reassign_to(current, target).adding if r not in live)
                if not_live:
                    problem = ReassignmentResult(
                        tp,
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"{tp}: replicas to add {not_live} are not live brokers (live: {sorted(live)})",
                    )
                    metrics.ADMIN_REQUEST_ERRORS.labels(
                        "AlterPartitionReassignments", ErrorCode.INVALID_REPLICA_ASSIGNMENT.name
                    ).inc()
                    log.warning("reassignment of %s refused: %s", tp, problem.message)
                    results.append(problem)
                    continue
            if target is None:
                if not current.is_being_reassigned:
                    results.append(
                        ReassignmentResult(
                            tp, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {tp} in progress"
                        )
                    )
                    continue
                stranding = await self._cancel_would_strand(tp, current)
                if stranding is not None:
                    metrics.ADMIN_REQUEST_ERRORS.labels(
                        "AlterPartitionReassignments", ErrorCode.INVALID_REPLICA_ASSIGNMENT.name
                    ).inc()
                    log.warning("cancel of %s refused: %s", tp, stranding)
                    results.append(ReassignmentResult(tp, ErrorCode.INVALID_REPLICA_ASSIGNMENT, stranding))
                    continue
                reassignment = reassign_to(current, current.origin_replicas)
                self.state_log.record(
                    "reassignment.cancelled",
                    topic=tp.topic,
                    partition=tp.partition,
                    replicas=list(current.origin_replicas),
                    controller_epoch=self.ctx.epoch,
                )
            else:
                reassignment = reassign_to(current, target)
                self.state_log.record(
                    "reassignment.started",
                    topic=tp.topic,
                    partition=tp.partition,
                    replicas=list(target),
                    source="api",
                    controller_epoch=self.ctx.epoch,
                )
            if tp in self.zk_triggered:
                # KIP-455: an API reassignment overrides the ZooKeeper one.
                await self._remove_from_zk_plan([tp])
            await self.on_partition_reassignment(tp, reassignment)
            results.append(ReassignmentResult(tp, ErrorCode.NONE))
        self.update_metrics()
        return results

    async def process_zk_plan(self) -> None:
        """ZkPartitionReassignment: /admin/reassign_partitions was created or changed."""
        got = await self.store.get_or_none(paths.REASSIGN_PARTITIONS, watch=True)
        if got is None:
            return
        entries, malformed = codecs.decode_reassignment_plan(got[0])
        for description in malformed:
            metrics.ADMIN_REQUEST_ERRORS.labels("ZkPartitionReassignment", "INVALID_REQUEST").inc()
            log.error("%s: ignoring a malformed entry: %s", paths.REASSIGN_PARTITIONS, description)
        valid: list[tuple[TopicPartition, tuple[int, ...]]] = []
        for tp, target in entries:
            if tp in self.zk_triggered and self.zk_triggered[tp] == target:
                valid.append((tp, target))  # already under way
                continue
            # The latest reassignment wins, API or ZooKeeper (KIP-455): an entry for a partition
            # an API reassignment moves overrides it, as processZkPartitionReassignment does.
            problem = self._validate(tp, target)
            if problem is not None:
                metrics.ADMIN_REQUEST_ERRORS.labels("ZkPartitionReassignment", ErrorCode(problem.error_code).name).inc()
                log.error("%s: rejecting the entry for %s: %s", paths.REASSIGN_PARTITIONS, tp, problem.message)
                continue
            valid.append((tp, target))
        if len(valid) != len(entries) or malformed:
            await self._write_zk_plan(dict(valid))  # invalid entries are removed from the znode
        for tp, target in valid:
            if self.zk_triggered.get(tp) == target:
                continue
            current = self.ctx.assignment(tp)
            assert current is not None
            self.zk_triggered[tp] = target
            self.state_log.record(
                "reassignment.started",
                topic=tp.topic,
                partition=tp.partition,
                replicas=list(target),
                source="zookeeper",
                controller_epoch=self.ctx.epoch,
            )
            await self.on_partition_reassignment(tp, reassign_to(current, target))
        self.update_metrics()

    async def start_up(self) -> None:
        """Failover (Kafka's initializePartitionReassignments): first every entry of
        /admin/reassign_partitions is started, as processZkPartitionReassignment does: entries
        written while no controller ran, and entries whose target differs from the reassignment
        a topic znode records, included (re-starting one already under way with the same target
        changes nothing). Then the reassignments recorded in topic znodes that the plan does not
        name (API ones) are resumed."""
        self.zk_triggered = {}
        await self.process_zk_plan()
        for tp in sorted(self.ctx.partitions_being_reassigned):
            if tp in self.zk_triggered:
                continue
            assignment = self.ctx.assignment(tp)
            assert assignment is not None
            log.info("resuming the reassignment of %s: %s", tp, assignment)
            await self.on_partition_reassignment(tp, assignment)
        self.update_metrics()  # reassignments resumed at failover count too

    async def abandon(self, topics: set[str]) -> None:
        """Topics about to be deleted: their reassignments have nothing left to move. Each
        reverts to its original replicas (ZooKeeper and memory), the replicas it was adding are
        stopped and deleted, and it leaves /admin/reassign_partitions; the deletion removes the
        rest. Kafka instead keeps such a topic ineligible for deletion until the reassignment
        completes, which never happens when the reassignment needs a leader that a topic being
        deleted will not get: the deletion and the reassignment then wait for each other
        forever (the folk remedy was deleting /controller). The simulation found that cycle."""
        abandoned = sorted(tp for tp in self.ctx.partitions_being_reassigned if tp.topic in topics)
        for tp in abandoned:
            current = self.ctx.assignment(tp)
            assert current is not None
            # The replicas revert to the original ones, plus any added replica already in the
            # ISR: the ISR must stay within the replicas, and those replicas hold the topic's
            # data, which the deletion then removes like the rest (the simulation found an
            # abandoned reassignment leaving an ISR of added replicas outside the reverted set).
            state = (await self.partitions.psm.store.read([tp])).get(tp)
            in_sync = [r for r in (state.isr if state is not None else ()) if r in current.replicas]
            reverted = ReplicaAssignment(
                tuple(current.origin_replicas) + tuple(r for r in in_sync if r not in current.origin_replicas)
            )
            unneeded = [r for r in current.replicas if r not in reverted.replicas]
            await self._stop_removed_replicas(tp, unneeded, reverted)
            log.info("reassignment of %s abandoned: its topic is being deleted", tp)
            self.state_log.record(
                "reassignment.cancelled",
                topic=tp.topic,
                partition=tp.partition,
                replicas=list(reverted.replicas),
                reason="topic deleted",
                controller_epoch=self.ctx.epoch,
            )
        await self._remove_from_zk_plan(abandoned)
        self.update_metrics()

    async def resume_for_brokers(self, brokers: set[int]) -> None:
        """Brokers started (onBrokerStartup's maybeResumeReassignments): the reassignments whose
        target includes one of them go on, with LeaderAndIsr to their replicas."""
        for tp in sorted(self.ctx.partitions_being_reassigned):
            assignment = self.ctx.assignment(tp)
            if assignment is None:
                continue
            if brokers & set(assignment.target_replicas):
                await self.on_partition_reassignment(tp, assignment)
            elif await self._is_complete(tp, assignment):
                # A partition that had no state when its reassignment started (no live replica)
                # can come online with every target in its first ISR: no ISR change will ever
                # announce that (the simulation found such a reassignment waiting forever).
                await self.on_partition_reassignment(tp, assignment)
        self.update_metrics()

    async def on_isr_change(self, partitions: Sequence[TopicPartition]) -> None:
        """An ISR grew: maybe a reassignment is complete (PartitionReassignmentIsrChange)."""
        for tp in partitions:
            assignment = self.ctx.assignment(tp)
            if assignment is not None and assignment.is_being_reassigned and await self._is_complete(tp, assignment):
                await self.on_partition_reassignment(tp, assignment)
        self.update_metrics()

    def list(self, partitions: Sequence[TopicPartition] = ()) -> list[tuple[TopicPartition, ReplicaAssignment, Any]]:
        ongoing = sorted(self.ctx.partitions_being_reassigned)
        wanted = set(partitions)
        result = []
        for tp in ongoing:
            if wanted and tp not in wanted:
                continue
            assignment = self.ctx.assignment(tp)
            assert assignment is not None
            result.append((tp, assignment, self.ctx.partition_states.get(tp)))
        return result

    # --- the algorithm ---------------------------------------------------------------------------

    async def _is_complete(self, tp: TopicPartition, assignment: ReplicaAssignment) -> bool:
        """Kafka's isReassignmentComplete: nothing left to reassign (a cancel, or a target equal
        to the origin) is complete; otherwise every target replica must be in the ISR that
        ZooKeeper holds now. The cache can lag: a broker's ISR change reaches the controller
        only through its notification, so the state is read and the cache refreshed with it."""
        if not assignment.is_being_reassigned:
            return True
        fresh = (await self.partitions.psm.store.read([tp])).get(tp)
        if fresh is None:
            return False
        if fresh.controller_epoch > self.ctx.epoch:
            raise ControllerMovedError(f"{tp} was written by controller epoch {fresh.controller_epoch}")
        self.ctx.partition_states[tp] = fresh
        return set(assignment.target_replicas) <= set(fresh.isr)

    async def on_partition_reassignment(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
        current = self.ctx.assignment(tp)
        assert current is not None
        if current != reassignment:
            # Replicas a previous, overridden reassignment was adding that this one does not want.
            unneeded = [r for r in current.replicas if r not in reassignment.replicas]
            await self._stop_removed_replicas(tp, unneeded, reassignment)
        # A cancel (or a target equal to the origin) leaves nothing reassigning: it is complete
        # and runs phase B like any completion (Kafka's onPartitionReassignment): the leader
        # moves if it was one of the replicas taken away, the remaining replicas get
        # LeaderAndIsr with the reverted replica set, and every broker gets UpdateMetadata.
        if not await self._is_complete(tp, reassignment):
            # A1: LeaderAndIsr with a bumped leader epoch to every replica of OAR + RAR.
            await self._bump_leader_epoch_and_send(tp, reassignment)
            # A2: new replicas start.
            new = [
                PartitionAndReplica(tp, r)
                for r in reassignment.adding
                if self.partitions.rsm.state(PartitionAndReplica(tp, r)) is ReplicaState.NON_EXISTENT
            ]
            await self.partitions.rsm.handle_state_changes(new, ReplicaState.NEW)
            return
        completed = ReplicaAssignment(reassignment.target_replicas)
        rsm = self.partitions.rsm
        # B1: target replicas online. One the replica state machine never saw (elected leader
        # before phase A registered it) is adopted: otherwise it stays untracked, and a later
        # deletion of the topic would leave it on its broker (the simulation found that).
        rsm.adopt(PartitionAndReplica(tp, r) for r in completed.replicas if self.ctx.is_replica_online(r, tp))
        await rsm.handle_state_changes(
            [
                PartitionAndReplica(tp, r)
                for r in completed.replicas
                if rsm.state(PartitionAndReplica(tp, r)) is not ReplicaState.ONLINE
                and self.ctx.is_replica_online(r, tp)
            ],
            ReplicaState.ONLINE,
        )
        # B2: RS = TRS in memory. B3: move the leader if it is not in TRS, else bump its epoch.
        self.ctx.set_assignment(tp, completed)
        state = self.ctx.partition_states.get(tp)
        if state is None or state.leader not in completed.replicas or not self.ctx.is_replica_online(state.leader, tp):
            await self.partitions.psm.handle_state_changes([tp], PartitionState.ONLINE, ElectionStrategy.REASSIGN)
        else:
            await self._bump_leader_epoch_and_send(tp, completed)
        # B4/B5: removed replicas out of the ISR and deleted.
        if reassignment.removing:
            await self._stop_removed_replicas(tp, list(reassignment.removing))
        # B6: ZooKeeper: RS = TRS, no adding/removing. B7: out of /admin/reassign_partitions.
        await self._write_assignment(tp, completed)
        await self._remove_from_zk_plan([tp])
        # B8: everyone learns the new replicas and ISR.
        self.partitions.batch.add_update_metadata(self.ctx.live_or_shutting_down_broker_ids, [tp])
        log.info(
            "controller %d: reassignment of %s completed: replicas %s", self.controller_id, tp, list(completed.replicas)
        )
        self.state_log.record(
            "reassignment.completed",
            topic=tp.topic,
            partition=tp.partition,
            replicas=list(completed.replicas),
            controller_epoch=self.ctx.epoch,
        )
        await self.deletion.resume_for([tp.topic])

    async def _bump_leader_epoch_and_send(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        """KafkaController.updateLeaderEpochAndSendRequest: same leader and ISR, epoch + 1."""
        for _attempt in range(10):
            current = self.ctx.partition_states.get(tp)
            if current is None:
                fresh = await self.partitions.psm.store.read([tp])
                current = fresh.get(tp)
                if current is None:
                    log.warning("reassignment of %s: the partition has no state yet", tp)
                    return
            if current.controller_epoch > self.ctx.epoch:
                raise ControllerMovedError(f"{tp} was written by controller epoch {current.controller_epoch}")
            if await self._write_state_and_send(tp, current, current.leader, current.isr, assignment):
                return
            fresh = await self.partitions.psm.store.read([tp])
            if fresh.get(tp) is not None:
                self.ctx.partition_states[tp] = fresh[tp]  # type: ignore[assignment]
        log.error("reassignment of %s: could not bump the leader epoch (znode kept changing)", tp)

    async def _stop_removed_replicas(
        self, tp: TopicPartition, replicas: Sequence[int], assignment: ReplicaAssignment | None = None
    ) -> None:
        """B4/B5: the replicas go offline (out of the ISR, StopReplica), then are deleted. With
        `assignment`, the topic znode is rewritten between the two: the ISR loses them before
        the replica set does, so ZooKeeper never holds an ISR outside the replicas."""
        rsm = self.partitions.rsm
        targets = [PartitionAndReplica(tp, r) for r in replicas]
        # Offline again even if offline already: a replica that went offline can have re-entered
        # the ISR since (a follower that caught up just before it died), and it must leave the
        # ISR before it leaves the replica set (the simulation found such an ISR left behind).
        await rsm.handle_state_changes(
            [r for r in targets if rsm.state(r) is not ReplicaState.NON_EXISTENT], ReplicaState.OFFLINE
        )
        if assignment is not None:
            await self._fence_and_shrink(tp, assignment)
            await self._write_assignment(tp, assignment)
            # Elect only now that the context holds the new replica set: an election before
            # would pick among the replicas being removed (the simulation found one elected
            # unclean there, and the ISR it led left outside the reverted replicas).
            state = self.ctx.partition_states.get(tp)
            if state is not None and state.leader == NO_LEADER:
                await self._leaderless_after_shrink(tp)
        else:
            # Phase B (the context already holds the target replicas): a removed replica that
            # still led (B3 found no live target replica to move the leadership to) left the
            # partition leaderless as it went out of the ISR.
            state = self.ctx.partition_states.get(tp)
            if state is not None and state.leader == NO_LEADER:
                await self._leaderless_after_shrink(tp)
        offline = [r for r in targets if rsm.state(r) is ReplicaState.OFFLINE]
        await rsm.handle_state_changes(offline, ReplicaState.DELETION_STARTED)
        await rsm.handle_state_changes(offline, ReplicaState.DELETION_SUCCESSFUL)
        await rsm.handle_state_changes(offline, ReplicaState.NON_EXISTENT)
        if assignment is not None:
            self.ctx.set_assignment(tp, assignment)

    async def _fence_and_shrink(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        """Before the replica set shrinks in ZooKeeper: one conditional write of the partition
        state with the ISR cut to the new replicas (a leader outside them gives way: -1) and the
        leader epoch bumped, sent to the remaining replicas. The leader, which may still add a
        removed follower to the ISR with the state version it holds, is fenced by the version
        move, and learns the new replica set (the simulation found a leader re-adding a removed
        replica between the ISR cut and the topic znode write)."""
        for _attempt in range(10):
            current = (await self.partitions.psm.store.read([tp])).get(tp)
            if current is None:
                return
            if current.controller_epoch > self.ctx.epoch:
                raise ControllerMovedError(f"{tp} was written by controller epoch {current.controller_epoch}")
            isr = tuple(r for r in current.isr if r in assignment.replicas) or current.isr
            leader = current.leader if current.leader in assignment.replicas and current.leader in isr else NO_LEADER
            if await self._write_state_and_send(tp, current, leader, isr, assignment):
                return
        log.error("reassignment of %s: could not cut the ISR to the new replicas (state kept changing)", tp)

    async def _leaderless_after_shrink(self, tp: TopicPartition) -> None:
        """The cut left no leader (the old one is not among the new replicas and none of them
        was live to take over): the partition is Offline, not Online, so that the start of a
        new replica's broker elects it (onBrokerStartup retries offline partitions), and an
        election runs now in case a new replica is live. The simulation found such a partition
        leaderless for good while the state machine called it Online."""
        psm = self.partitions.psm
        if psm.state(tp) is PartitionState.ONLINE:
            await psm.handle_state_changes([tp], PartitionState.OFFLINE)
        if not self.ctx.is_topic_queued_for_deletion(tp.topic):
            await psm.handle_state_changes([tp], PartitionState.ONLINE)

    async def _write_state_and_send(
        self,
        tp: TopicPartition,
        current: LeaderIsrAndControllerEpoch,
        leader: int,
        isr: tuple[int, ...],
        assignment: ReplicaAssignment,
    ) -> bool:
        """Write leader and ISR with the leader epoch bumped, conditionally on `current`'s
        version; on success queue LeaderAndIsr to the assignment's live replicas. False on a
        version conflict (the caller re-reads and retries)."""
        proposal = LeaderIsrAndControllerEpoch(
            leader, current.leader_epoch + 1, isr, current.zk_version, self.ctx.epoch
        )
        outcome = await self.partitions.psm.store.update({tp: proposal})
        if tp not in outcome.written:
            outcome.raise_error()
            return False
        state = LeaderIsrAndControllerEpoch(leader, proposal.leader_epoch, isr, outcome.written[tp], self.ctx.epoch)
        self.ctx.partition_states[tp] = state
        self.partitions.batch.add_leader_and_isr(
            [r for r in assignment.replicas if r in self.ctx.live_or_shutting_down_broker_ids],
            tp,
            state,
            assignment,
            is_new=False,
        )
        return True

    async def _write_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        """Rewrite the topic znode with this partition's assignment (and the others unchanged)."""
        self.ctx.set_assignment(tp, assignment)
        parts = self.ctx.assignments[tp.topic]
        znode = codecs.TopicZnode(
            {p: a.replicas for p, a in parts.items()},
            {p: a.adding for p, a in parts.items() if a.adding},
            {p: a.removing for p, a in parts.items() if a.removing},
            self.ctx.topic_ids.get(tp.topic),
        )
        await self.store.fenced_multi([SetDataOp(paths.topic_path(tp.topic), codecs.encode_topic(znode))])

    async def _remove_from_zk_plan(self, partitions: Sequence[TopicPartition]) -> None:
        removed = [tp for tp in partitions if tp in self.zk_triggered]
        if not removed:
            return
        for tp in removed:
            del self.zk_triggered[tp]
        await self._write_zk_plan(dict(self.zk_triggered))

    async def _write_zk_plan(self, entries: dict[TopicPartition, tuple[int, ...]]) -> None:
        if not entries:
            await self.store.fenced_delete([paths.REASSIGN_PARTITIONS])
            return
        data = codecs.encode_reassignment_plan(entries)
        if await self.store.exists(paths.REASSIGN_PARTITIONS):
            await self.store.fenced_multi([SetDataOp(paths.REASSIGN_PARTITIONS, data)])
