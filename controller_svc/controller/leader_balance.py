"""Preferred and unclean leader elections on request (/admin/preferred_replica_election, the
ElectLeaders RPC) and the automatic preferred-leader rebalance
(KafkaController.onReplicaElection / checkAndTriggerAutoLeaderRebalance)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from controller_svc.adapters.zk import codecs, paths
from controller_svc.common import metrics
from controller_svc.common.errors import CorruptZnodeError, ErrorCode
from controller_svc.common.model import TopicPartition
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.controller.partition_manager import PartitionManager
from controller_svc.controller.partition_state_machine import PartitionState
from controller_svc.controller.ports import ControllerStore
from controller_svc.controller.slices import SCAN_SLICE, keep_in_slices
from controller_svc.core.context import ControllerContext
from controller_svc.core.election import ElectionStrategy

log = logging.getLogger(__name__)

PREFERRED = "preferred"
UNCLEAN = "unclean"


@dataclass(frozen=True, slots=True)
class ElectionOutcome:
    tp: TopicPartition
    error_code: int
    message: str = ""
    leader: int = -1


class LeaderBalancer:
    def __init__(
        self,
        controller_id: int,
        ctx: ControllerContext,
        store: ControllerStore,
        partitions: PartitionManager,
        state_log: StateChangeLog,
        imbalance_percentage: int,
    ) -> None:
        self.controller_id = controller_id
        self.ctx = ctx
        self.store = store
        self.partitions = partitions
        self.state_log = state_log
        self.imbalance_percentage = imbalance_percentage

    def __repr__(self) -> str:
        return f"LeaderBalancer(imbalance={self.imbalance_percentage}%)"

    async def elect(self, requested: Sequence[TopicPartition] | None, election_type: str) -> list[ElectionOutcome]:
        """ReplicaLeaderElection: per partition ELECTION_NOT_NEEDED, UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_TOPIC_EXCEPTION (being deleted), PREFERRED_LEADER_NOT_AVAILABLE /
        ELIGIBLE_LEADERS_NOT_AVAILABLE, or NONE with the new leader."""
        partitions = list(requested) if requested else sorted(self.ctx.all_partitions())
        outcomes: dict[TopicPartition, ElectionOutcome] = {}
        candidates: list[TopicPartition] = []
        for tp in partitions:
            assignment = self.ctx.assignment(tp)
            state = self.ctx.partition_states.get(tp)
            if assignment is None:
                outcomes[tp] = ElectionOutcome(tp, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp} does not exist")
            elif self.ctx.is_topic_queued_for_deletion(tp.topic):
                outcomes[tp] = ElectionOutcome(
                    tp, ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic {tp.topic} is being deleted"
                )
            elif self._not_needed(tp, election_type):
                outcomes[tp] = ElectionOutcome(tp, ErrorCode.ELECTION_NOT_NEEDED, "", state.leader if state else -1)
            else:
                candidates.append(tp)
        if candidates:
            strategy = ElectionStrategy.PREFERRED if election_type == PREFERRED else ElectionStrategy.OFFLINE
            psm = self.partitions.psm
            if election_type == UNCLEAN:
                # Online -> Offline first so the unclean (offline) election may run.
                online = [tp for tp in candidates if psm.state(tp) is PartitionState.ONLINE]
                await psm.handle_state_changes(online, PartitionState.OFFLINE)
            result = await psm.handle_state_changes(
                candidates, PartitionState.ONLINE, strategy, allow_unclean=election_type == UNCLEAN
            )
            failure = (
                ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                if election_type == PREFERRED
                else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
            )
            for tp in candidates:
                if tp in result.failed or tp in result.invalid:
                    outcomes[tp] = ElectionOutcome(tp, failure, result.failed.get(tp, "invalid state change"))
                else:
                    state = self.ctx.partition_states.get(tp)
                    outcomes[tp] = ElectionOutcome(tp, ErrorCode.NONE, "", state.leader if state else -1)
        return [outcomes[tp] for tp in partitions]

    def _not_needed(self, tp: TopicPartition, election_type: str) -> bool:
        state = self.ctx.partition_states.get(tp)
        assignment = self.ctx.assignment(tp)
        if state is None or assignment is None:
            return False
        if election_type == PREFERRED:
            return state.leader == assignment.replicas[0]
        return self.ctx.is_replica_online(state.leader, tp)

    async def process_zk_request(self) -> list[ElectionOutcome]:
        """/admin/preferred_replica_election (kafka-preferred-replica-election.sh --zookeeper):
        elect, then delete the znode whatever the outcome, as Kafka does."""
        got = await self.store.get_or_none(paths.PREFERRED_REPLICA_ELECTION, watch=True)
        if got is None:
            return []
        partitions: list[TopicPartition] = []
        try:
            partitions = codecs.decode_preferred_election(paths.PREFERRED_REPLICA_ELECTION, got[0])
        except CorruptZnodeError as e:
            metrics.ADMIN_REQUEST_ERRORS.labels("PreferredReplicaElection", "INVALID_REQUEST").inc()
            log.error("%s is malformed (%s); removing it", paths.PREFERRED_REPLICA_ELECTION, e)
            partitions = []
        outcomes = await self.elect(partitions, PREFERRED) if partitions else []
        for outcome in outcomes:
            if outcome.error_code not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED):
                log.warning(
                    "preferred election of %s: %s %s", outcome.tp, ErrorCode(outcome.error_code).name, outcome.message
                )
        await self.store.fenced_delete([paths.PREFERRED_REPLICA_ELECTION])
        return outcomes

    async def imbalanced_partitions(self) -> list[TopicPartition]:
        """Kafka's checkAndTriggerAutoLeaderRebalance. Per preferred broker: the share of its
        preferred partitions it does not lead, over partitions of topics not queued for
        deletion; above leader.imbalance.per.broker.percentage, those partitions are candidates
        if the preferred replica is live and in the ISR. While any reassignment runs there is
        no candidate at all (a rebalance would fight the reassignment's own leader moves).

        One pass over the assignments, a topic at a time, yielding every SCAN_SLICE partitions
        (the event's handler owns the context: nothing changes it between slices). Two passes
        made with a call per partition held the loop 2.0 s at 1M partitions, every
        leader.imbalance.check.interval.seconds (found by the loop monitor's `held_in`)."""
        ctx = self.ctx
        if ctx.partitions_being_reassigned:
            return []
        states_get = ctx.partition_states.get
        deleting = ctx.topics_to_be_deleted
        preferred: dict[int, int] = {}
        not_led: dict[int, list[TopicPartition]] = {}
        new = tuple.__new__  # the NamedTuple without its Python-level __new__ (per partition)
        scanned = 0
        for topic, partitions in ctx.assignments.items():
            if topic in deleting:
                continue
            for partition, assignment in partitions.items():
                scanned += 1
                if scanned >= SCAN_SLICE:
                    scanned = 0
                    await asyncio.sleep(0)
                if not assignment.replicas:
                    continue
                broker = assignment.replicas[0]
                preferred[broker] = preferred.get(broker, 0) + 1
                tp = new(TopicPartition, (topic, partition))
                state = states_get(tp)
                if state is not None and state.leader != broker:
                    not_led.setdefault(broker, []).append(tp)
        result: list[TopicPartition] = []
        for broker, count in sorted(preferred.items()):
            tps = not_led.get(broker, [])
            ratio = 100.0 * len(tps) / count
            if ratio <= self.imbalance_percentage:
                continue
            log.info(
                "broker %d leads %d of its %d preferred partitions (imbalance %.0f%% > %d%%)",
                broker,
                count - len(tps),
                count,
                ratio,
                self.imbalance_percentage,
            )

            def can_lead(tp: TopicPartition, broker: int = broker) -> bool:
                return ctx.is_replica_online(broker, tp) and broker in ctx.partition_states[tp].isr

            result.extend(await keep_in_slices(tps, can_lead))
        return result

    async def auto_rebalance(self) -> list[ElectionOutcome]:
        candidates = await self.imbalanced_partitions()
        if not candidates:
            return []
        log.info("auto leader rebalance: preferred election for %d partitions", len(candidates))
        return await self.elect(candidates, PREFERRED)
