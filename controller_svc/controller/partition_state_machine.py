"""The partition state machine (Kafka's ZkPartitionStateMachine, reference section 2).

Transitions are validated against the table of valid previous states; an invalid one is
logged and refused. Elections are the pure functions of `election`; the state znodes are
written through the `PartitionStateStore` port (ZooKeeper in production, a fake in unit
tests); requests go into the `RequestBatch`.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import itertools
import logging
import operator
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from controller_svc.common import metrics
from controller_svc.common.errors import ControllerError, ControllerMovedError
from controller_svc.common.model import (
    LeaderIsrAndControllerEpoch,
    ReplicaAssignment,
    TopicPartition,
    sorted_partitions,
)
from controller_svc.common.pacing import Pacer
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.controller.slices import keep_in_slices
from controller_svc.core.context import ControllerContext
from controller_svc.core.election import ElectionResult, ElectionStrategy, elect
from controller_svc.core.request_batch import RequestBatch
from controller_svc.core.tracked import CountedStates

log = logging.getLogger(__name__)

MAX_WRITE_ATTEMPTS = 10
_LEADER = operator.attrgetter("leader")
# Elections are decided and written this many partitions at a time (a multi's worth), with up
# to WRITES_IN_FLIGHT slices' writes outstanding while the next ones are decided.
ELECTION_SLICE = 1000
# Partitions validated between yields to the loop.
VALIDATE_SLICE = 20_000
WRITES_IN_FLIGHT = 8


class PartitionState(enum.Enum):
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"
    NON_EXISTENT = "NonExistentPartition"

    # Members are compared by identity; Enum's own __hash__ hashes the name in Python code, once
    # per partition or replica of every state change (30k calls in a 10k-partition broker failure).
    __hash__ = object.__hash__


VALID_PREVIOUS_STATES: dict[PartitionState, frozenset[PartitionState]] = {
    PartitionState.NEW: frozenset({PartitionState.NON_EXISTENT}),
    PartitionState.ONLINE: frozenset({PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}),
    PartitionState.OFFLINE: frozenset({PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}),
    PartitionState.NON_EXISTENT: frozenset({PartitionState.OFFLINE}),
}


class WriteOutcome(Protocol):
    written: dict[TopicPartition, int]
    conflicts: set[TopicPartition]
    # Set when the store failed part-way: `written` is committed all the same.
    error: ControllerError | None

    def raise_error(self) -> None: ...


class PartitionStateStore(Protocol):
    """Where partition states live (ZooKeeper's .../partitions/<p>/state)."""

    async def read(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, LeaderIsrAndControllerEpoch | None]: ...

    async def read_topic_configs(self, topics: Sequence[str]) -> dict[str, dict[str, str]]: ...

    async def create(self, states: Mapping[TopicPartition, LeaderIsrAndControllerEpoch]) -> WriteOutcome: ...

    async def update(self, states: Mapping[TopicPartition, LeaderIsrAndControllerEpoch]) -> WriteOutcome: ...


@dataclass(slots=True)
class _Slice:
    """Elections decided for one slice of partitions, waiting for their write."""

    proposals: dict[TopicPartition, LeaderIsrAndControllerEpoch] = field(default_factory=dict)
    previous: dict[TopicPartition, LeaderIsrAndControllerEpoch] = field(default_factory=dict)
    unclean: set[TopicPartition] = field(default_factory=set)


@dataclass
class StateChangeResult:
    """Per partition: None when the change succeeded, else why it failed."""

    failed: dict[TopicPartition, str] = field(default_factory=dict)
    invalid: set[TopicPartition] = field(default_factory=set)

    @property
    def succeeded_all(self) -> bool:
        return not self.failed and not self.invalid


async def _cancel_all(in_flight: collections.deque[tuple[_Slice, asyncio.Future[WriteOutcome]]]) -> None:
    for _, write in in_flight:
        write.cancel()
    await asyncio.gather(*(w for _, w in in_flight), return_exceptions=True)
    in_flight.clear()


class PartitionStateMachine:
    def __init__(
        self,
        ctx: ControllerContext,
        store: PartitionStateStore,
        batch: RequestBatch,
        state_log: StateChangeLog,
        controller_id: int,
        unclean_default: Callable[[], bool],
    ) -> None:
        self.ctx = ctx
        self.store = store
        self.batch = batch
        self.state_log = state_log
        self.controller_id = controller_id
        self.unclean_default = unclean_default
        # Offline partitions counted per topic as they are written (the gauge's count).
        self.states: CountedStates[PartitionState] = CountedStates(PartitionState.OFFLINE)
        self.unclean_elections = 0
        # When a caller sets it (a dict), every state an election writes is also put here: a
        # broker failure's ISR clean-up then knows which states it need not read back.
        self.written_log: dict[TopicPartition, LeaderIsrAndControllerEpoch] | None = None

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for state in self.states.values():
            counts[state.value] = counts.get(state.value, 0) + 1
        return f"PartitionStateMachine({counts})"

    # --- bookkeeping ---------------------------------------------------------------------------

    async def initialize(self, chunk: int = 100_000) -> None:
        """On failover: live leader -> Online, dead leader -> Offline, no state -> New; yielding
        to the loop every `chunk` partitions or PACE_BUDGET_S (seconds of CPU at 1M partitions)."""
        ctx = self.ctx
        partition_states = ctx.partition_states
        new, online, offline = PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE
        # Without failed log dirs, a leader is online when its broker is live (shutting down
        # included); the per-partition method call was most of this loop at 100k partitions.
        simple = not any(ctx.replicas_on_offline_dirs.values())
        live = ctx.live_brokers
        live_ids = live.keys()
        # Into a plain dict, then into the counted states at once (a Python call per write was
        # 1.5 s at 1M partitions).
        states: dict[TopicPartition, PartitionState] = {}
        make = tuple.__new__  # the NamedTuple without its Python-level __new__
        pacer = Pacer(chunk)
        # A warm standby's keys (left for the replica state machine, which starts after this).
        hint = ctx.replica_keys_hint
        for topic, parts in list(ctx.assignments.items()):
            await pacer.before(len(parts))
            made = hint.get(topic)
            if made is not None and made.assignments is parts:
                tps: Sequence[TopicPartition] = made.partitions
            else:
                tps = [make(TopicPartition, (topic, p)) for p in parts]
            if simple:
                # Per topic in C loops: every partition with a state whose leader is live.
                found = list(map(partition_states.get, tps))
                if None not in found and set(map(_LEADER, found)) <= live_ids:
                    states.update(zip(tps, itertools.repeat(online)))
                    continue
            for tp in tps:
                state = partition_states.get(tp)
                if state is None:
                    states[tp] = new
                elif (
                    state.leader in live
                    if simple
                    else ctx.is_replica_online(state.leader, tp, include_shutting_down=True)
                ):
                    states[tp] = online
                else:
                    states[tp] = offline
        self.states.replace_all(states)

    def state(self, tp: TopicPartition) -> PartitionState:
        return self.states.get(tp, PartitionState.NON_EXISTENT)

    def offline_partition_count(self) -> int:
        # Counted per topic as the states are written (core/tracked.py): O(topics), not a scan
        # of every partition after every operation.
        deleting = self.ctx.topics_to_be_deleted
        return sum(count for topic, count in self.states.per_topic.items() if topic not in deleting)

    def remove(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.states.pop(tp, None)

    # --- transitions ---------------------------------------------------------------------------

    async def trigger_online_partition_state_change(self, topics: set[str] | None = None) -> StateChangeResult:
        """New and Offline partitions (not being deleted) -> Online with the offline strategy."""
        states = self.states
        wanted = (PartitionState.NEW, PartitionState.OFFLINE)
        deleting = self.ctx.topics_to_be_deleted

        def candidate(tp: TopicPartition) -> bool:
            return states[tp] in wanted and tp[0] not in deleting and (topics is None or tp[0] in topics)

        # A scan of every partition's state (1M after a broker failure), in slices.
        candidates = sorted_partitions(await keep_in_slices(list(states), candidate))
        return await self.handle_state_changes(candidates, PartitionState.ONLINE, ElectionStrategy.OFFLINE)

    async def handle_state_changes(
        self,
        partitions: Sequence[TopicPartition],
        target: PartitionState,
        strategy: ElectionStrategy | None = None,
        allow_unclean: bool = False,
    ) -> StateChangeResult:
        """Validate, apply, and add the resulting requests to the (caller's) request batch."""
        result = StateChangeResult()
        valid: list[TopicPartition] = []
        valid_new: list[TopicPartition] = []
        allowed = VALID_PREVIOUS_STATES[target]
        for i, tp in enumerate(partitions):
            if i and not i % VALIDATE_SLICE:
                # 250k partitions to validate at 1M (a controlled shutdown) held the loop.
                await asyncio.sleep(0)
            current = self.state(tp)
            if current in allowed:
                valid.append(tp)
                if current is PartitionState.NEW:
                    valid_new.append(tp)
            else:
                result.invalid.add(tp)
                log.error(
                    "controller %d epoch %d: refusing invalid partition state change of %s from %s to %s",
                    self.controller_id,
                    self.ctx.epoch,
                    tp,
                    current.value,
                    target.value,
                )
        if not valid:
            return result
        if target is PartitionState.NEW:
            for tp in valid:
                self.states[tp] = PartitionState.NEW
        elif target is PartitionState.OFFLINE:
            for tp in valid:
                self.states[tp] = PartitionState.OFFLINE
        elif target is PartitionState.NON_EXISTENT:
            for tp in valid:
                self.states.pop(tp, None)
        else:
            existing = [tp for tp in valid if self.state(tp) is not PartitionState.NEW] if valid_new else valid
            if valid_new:
                await self._initialize_leader_and_isr(valid_new, result)
            if existing:
                await self._elect_leaders(existing, strategy or ElectionStrategy.OFFLINE, result, allow_unclean)
        metrics.OFFLINE_PARTITIONS.set(self.offline_partition_count())
        return result

    async def _initialize_leader_and_isr(self, partitions: list[TopicPartition], result: StateChangeResult) -> None:
        """New -> Online: leader = first live replica, ISR = live replicas, leader epoch 0."""
        initial: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
        for tp in partitions:
            live = [r for r in self.ctx.replicas(tp) if self.ctx.is_replica_online(r, tp)]
            if not live:
                result.failed[tp] = "no live replica"
                log.warning("controller %d: new partition %s has no live replica; it stays New", self.controller_id, tp)
                continue
            initial[tp] = LeaderIsrAndControllerEpoch(live[0], 0, tuple(live), 0, self.ctx.epoch)
        if not initial:
            return
        outcome = await self.store.create(initial)
        written = dict(outcome.written)
        if outcome.conflicts:
            # A state znode that exists already is ours when it holds exactly what we proposed
            # under our epoch: a create applied with its reply lost, met again by the retry.
            existing = await self.store.read(sorted(outcome.conflicts))
            for tp in sorted(outcome.conflicts):
                found = existing.get(tp)
                chosen = initial[tp]
                if (
                    found is not None
                    and found.controller_epoch == self.ctx.epoch
                    and (found.leader, found.leader_epoch, found.isr) == (chosen.leader, 0, chosen.isr)
                ):
                    written[tp] = found.zk_version
                    continue
                result.failed[tp] = "partition state znode already exists"
                log.error(
                    "controller %d: state of new partition %s already exists in ZooKeeper", self.controller_id, tp
                )
        for tp, version in written.items():
            chosen = initial[tp]
            state = LeaderIsrAndControllerEpoch(chosen.leader, 0, chosen.isr, version, self.ctx.epoch)
            self.ctx.partition_states[tp] = state
            self.states[tp] = PartitionState.ONLINE
            assignment = self.ctx.assignment(tp)
            assert assignment is not None
            self.batch.add_leader_and_isr(state.isr, tp, state, assignment, is_new=True)
            self.state_log.record_many("partition.leader_elected", [self._election_fields(tp, state, (), "new", False)])
        outcome.raise_error()

    async def _refresh_unclean_permission(self, partitions: list[TopicPartition]) -> None:
        """Kafka's collectUncleanLeaderElectionState: whether a partition with no live ISR
        member may elect outside the ISR is decided on the topic config ZooKeeper holds now,
        read at this election, never on a cache a config change may not have reached yet."""
        ctx = self.ctx
        # Without failed log dirs a replica is online when its broker is live and not shutting
        # down: one set, instead of the partition's online replicas computed per ISR member.
        online_brokers = None if any(ctx.replicas_on_offline_dirs.values()) else ctx.live_broker_ids

        def without_online_isr_member(tp: TopicPartition) -> bool:
            state = ctx.partition_states.get(tp)
            if state is None:
                return False
            if online_brokers is None:
                return ctx.online_replicas(tp).isdisjoint(state.isr)
            replicas = ctx.replicas(tp)
            return not any(r in online_brokers and r in replicas for r in state.isr)

        topics = sorted({tp.topic for tp in await keep_in_slices(partitions, without_online_isr_member)})
        if not topics:
            return
        fresh = await self.store.read_topic_configs(topics)
        for topic in topics:
            if topic in fresh:
                self.ctx.topic_configs[topic] = fresh[topic]
            else:
                self.ctx.topic_configs.pop(topic, None)

    async def _elect_leaders(
        self,
        partitions: list[TopicPartition],
        strategy: ElectionStrategy,
        result: StateChangeResult,
        allow_unclean: bool = False,
    ) -> None:
        remaining = list(partitions)
        for _attempt in range(MAX_WRITE_ATTEMPTS):
            if not remaining:
                return
            missing = [tp for tp in remaining if tp not in self.ctx.partition_states]
            if missing:
                await self._refresh(missing)
            if strategy is ElectionStrategy.OFFLINE and not allow_unclean:
                await self._refresh_unclean_permission(remaining)
            remaining = await self._elect_and_write(remaining, strategy, result, allow_unclean)
            if remaining:
                log.info(
                    "controller %d: %d partition states changed under us; re-reading",
                    self.controller_id,
                    len(remaining),
                )
                await self._refresh(remaining)
        for tp in remaining:
            result.failed[tp] = "partition state kept changing in ZooKeeper"

    async def _elect_and_write(
        self,
        partitions: list[TopicPartition],
        strategy: ElectionStrategy,
        result: StateChangeResult,
        allow_unclean: bool,
    ) -> list[TopicPartition]:
        """Elect and write in slices: a slice's write goes out as soon as it is decided, the next
        slice is decided while ZooKeeper commits it, and each outcome is acted on as it lands,
        up to WRITES_IN_FLIGHT slices outstanding. Computing every election before the first
        write, then every outcome after the last, left the loop held for seconds at 100k
        partitions and ZooKeeper idle meanwhile. Returns the partitions whose znode version
        moved under us (to re-read and try again)."""
        in_flight: collections.deque[tuple[_Slice, asyncio.Future[WriteOutcome]]] = collections.deque()
        conflicts: list[TopicPartition] = []
        error: ControllerError | None = None
        start = 0
        try:
            while start < len(partitions) or in_flight:
                # Once ZooKeeper has left a write unanswered, no further slice is sent (as a
                # single update stops at its first unanswered multi); the ones out are awaited.
                if start < len(partitions) and error is None and len(in_flight) < WRITES_IN_FLIGHT:
                    decided = self._decide(partitions[start : start + ELECTION_SLICE], strategy, result, allow_unclean)
                    start += ELECTION_SLICE
                    if decided.proposals:
                        in_flight.append((decided, asyncio.ensure_future(self.store.update(decided.proposals))))
                        # Let the write reach the wire before the next slice is decided.
                        await asyncio.sleep(0)
                    continue
                if not in_flight:
                    break
                done, write = in_flight.popleft()
                outcome = await write
                self._apply_outcome(done, outcome, strategy)
                conflicts.extend(outcome.conflicts)
                if outcome.error is not None and error is None:
                    error = outcome.error
        except (ControllerMovedError, asyncio.CancelledError):
            # A moved controller (its batch is dropped) or a cancelled operation: nothing more is
            # acted on, and no write is left running behind the caller's back.
            await _cancel_all(in_flight)
            raise
        except Exception as failure:
            # Any other failure of one write (ZooKeeper refusing a multi, say): what the others
            # committed is acted on before it is raised, so its requests go out with the batch
            # (a committed write's effect is never dropped).
            moved = await self._settle(in_flight, strategy)
            if moved is not None:
                raise moved from failure
            raise
        if error is not None:
            raise error  # after every committed write's requests are in the batch
        return sorted(conflicts)

    async def _settle(
        self, in_flight: collections.deque[tuple[_Slice, asyncio.Future[WriteOutcome]]], strategy: ElectionStrategy
    ) -> ControllerMovedError | None:
        """Await the writes still out and act on every one that succeeded; a moved controller
        among them is returned (it outranks the failure being raised)."""
        moved: ControllerMovedError | None = None
        try:
            while in_flight:
                decided, write = in_flight.popleft()
                try:
                    outcome = await write
                except ControllerMovedError as e:
                    moved = moved or e
                    continue
                except Exception:
                    continue
                if moved is None:
                    self._apply_outcome(decided, outcome, strategy)
        except asyncio.CancelledError:
            await _cancel_all(in_flight)
            raise
        return moved

    def _decide(
        self,
        partitions: Sequence[TopicPartition],
        strategy: ElectionStrategy,
        result: StateChangeResult,
        allow_unclean: bool,
    ) -> _Slice:
        decided = _Slice()
        proposals, previous = decided.proposals, decided.previous
        ctx = self.ctx
        epoch = ctx.epoch
        states_get = ctx.partition_states.get
        assignments = ctx.assignments
        shutting = ctx.shutting_down_broker_ids
        unclean_default = self.unclean_default()
        # Without failed log dirs a replica is online when its broker is live and not shutting
        # down: one set for every partition (`elect` takes the brokers on which a replica
        # counts as online), instead of one per partition.
        online_brokers = None if any(ctx.replicas_on_offline_dirs.values()) else ctx.live_broker_ids
        new = tuple.__new__  # the NamedTuple without its Python-level __new__ (per partition)
        topic: str | None = None
        parts: dict[int, ReplicaAssignment] = {}
        unclean_enabled = allow_unclean
        # An election's outcome depends on the replicas, the ISR and the unclean permission once
        # the strategy and the brokers are fixed (the leader epoch aside, bumped per partition):
        # a slice's partitions share a handful of those, so each is elected once per slice. Not
        # for reassignments (their target replicas come from the sets being moved) or with failed
        # log dirs (which replicas are online is then per partition).
        memo: dict[tuple[tuple[int, ...], tuple[int, ...], bool], ElectionResult] | None = (
            {} if online_brokers is not None and strategy is not ElectionStrategy.REASSIGN else None
        )
        for tp in partitions:
            if tp[0] != topic:  # per topic, not per partition (a slice is mostly one topic)
                topic = tp[0]
                parts = assignments.get(topic) or {}
                unclean_enabled = allow_unclean or ctx.unclean_election_enabled(topic, unclean_default)
            current = states_get(tp)
            assignment = parts.get(tp[1])
            if current is None or assignment is None:
                result.failed[tp] = "no partition state in ZooKeeper"
                continue
            if current.controller_epoch > epoch:
                raise ControllerMovedError(
                    f"{tp} was written by controller epoch {current.controller_epoch} > ours {epoch}"
                )
            if memo is not None and online_brokers is not None:
                online: Collection[int] = online_brokers
                key = (assignment.replicas, current.isr, unclean_enabled)
                cached = memo.get(key)
                if cached is None:
                    cached = memo[key] = elect(strategy, assignment, current, online, shutting, unclean_enabled)
                election = cached
            else:
                online = ctx.online_replicas(tp) if online_brokers is None else online_brokers
                election = elect(strategy, assignment, current, online, shutting, unclean_enabled)
            leader = election.leader
            if leader is None:
                result.failed[tp] = f"no eligible leader ({strategy.value})"
                log.warning(
                    "controller %d epoch %d: no eligible leader for %s by %s election: replicas %s, isr %s, online %s",
                    self.controller_id,
                    epoch,
                    tp,
                    strategy.value,
                    list(assignment.replicas),
                    list(current.isr),
                    sorted(r for r in assignment.replicas if r in online),
                )
                continue
            proposals[tp] = new(
                LeaderIsrAndControllerEpoch, (leader, current.leader_epoch + 1, election.isr, current.zk_version, epoch)
            )
            previous[tp] = current
            if election.unclean:
                decided.unclean.add(tp)
        return decided

    def _apply_outcome(self, decided: _Slice, outcome: WriteOutcome, strategy: ElectionStrategy) -> None:
        ctx = self.ctx
        proposals = decided.proposals
        new = tuple.__new__  # the NamedTuple without its Python-level __new__ (per partition)
        written = {
            tp: new(LeaderIsrAndControllerEpoch, (*proposals[tp][:3], version, proposals[tp][4]))
            for tp, version in outcome.written.items()
        }
        # Written a slice at a time: each dict marks a topic once, not once per partition.
        ctx.set_partition_states(written)
        if self.written_log is not None:
            self.written_log.update(written)
        self.states.set_many(written, PartitionState.ONLINE)
        self.batch.add_leader_and_isr_to_replicas(written, ctx.live_or_shutting_down_broker_ids)
        for tp in decided.unclean.intersection(written):
            self.unclean_elections += 1
            metrics.UNCLEAN_LEADER_ELECTIONS.inc()
            log.warning(
                "controller %d: UNCLEAN leader election for %s: %d was not in the ISR %s",
                self.controller_id,
                tp,
                written[tp].leader,
                list(decided.previous[tp].isr),
            )
        previous, unclean, fields, name = decided.previous, decided.unclean, self._election_fields, strategy.value
        self.state_log.record_many(
            "partition.leader_elected",
            [fields(tp, state, previous[tp].isr, name, tp in unclean) for tp, state in written.items()],
        )

    async def _refresh(self, partitions: list[TopicPartition]) -> None:
        states = await self.store.read(partitions)
        for tp, state in states.items():
            if state is None:
                self.ctx.partition_states.pop(tp, None)
                continue
            if state.controller_epoch > self.ctx.epoch:
                raise ControllerMovedError(
                    f"{tp} was written by controller epoch {state.controller_epoch} > ours {self.ctx.epoch}"
                )
            self.ctx.partition_states[tp] = state

    def _election_fields(
        self,
        tp: TopicPartition,
        state: LeaderIsrAndControllerEpoch,
        prev_isr: Sequence[int],
        strategy: str,
        unclean: bool,
    ) -> dict[str, Any]:
        return {
            "topic": tp.topic,
            "partition": tp.partition,
            "leader": state.leader,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
            "prev_isr": list(prev_isr),
            "strategy": strategy,
            "unclean": unclean,
            "controller_epoch": self.ctx.epoch,
        }
