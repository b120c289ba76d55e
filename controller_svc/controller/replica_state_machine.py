"""The replica state machine (Kafka's ZkReplicaStateMachine, reference section 2).

Going offline removes the replica from the ISR in ZooKeeper (the leader becomes -1 if it
was the leader; a one-member ISR is kept), bumps the leader epoch, and tells the other
replicas. Invalid transitions are logged and refused.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import itertools
import logging
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller_svc.common.errors import ControllerError, ControllerMovedError
from controller_svc.common.model import (
    NO_LEADER,
    LeaderIsrAndControllerEpoch,
    PartitionAndReplica,
    ReplicaAssignment,
    TopicPartition,
    sorted_partitions,
    sorted_replicas,
)
from controller_svc.common.pacing import Pacer
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.controller.partition_state_machine import MAX_WRITE_ATTEMPTS, PartitionStateStore, WriteOutcome
from controller_svc.core.context import ControllerContext, TopicReplicaKeys
from controller_svc.core.replica_epochs import ReplicaEpochs
from controller_svc.core.request_batch import RequestBatch

log = logging.getLogger(__name__)

# Partitions between two yields of the failover's start-up to the event loop (tens of ms of CPU).
INITIALIZE_CHUNK = 50_000
# Replicas of one broker taken out of their ISRs per slice (read, write, requests), between
# two yields to the event loop.
OFFLINE_SLICE = 20_000
# Replicas validated between yields to the loop.
VALIDATE_SLICE = 20_000
# Partitions per read and write of the ISR removal's pipeline (a multi's worth), and the reads
# and the writes each outstanding at most.
ISR_REMOVAL_CHUNK = 1000
ISR_REMOVAL_IN_FLIGHT = 8
_LEADER_EPOCH = operator.attrgetter("leader_epoch")
_NOT_ONLINE: TopicReplicaKeys | None = TopicReplicaKeys({}, (), frozenset())  # sentinel


class ReplicaState(enum.Enum):
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"

    # Members are compared by identity; Enum's own __hash__ hashes the name in Python code, once
    # per partition or replica of every state change (30k calls in a 10k-partition broker failure).
    __hash__ = object.__hash__


_S = ReplicaState
VALID_PREVIOUS_STATES: dict[ReplicaState, frozenset[ReplicaState]] = {
    _S.NEW: frozenset({_S.NON_EXISTENT}),
    _S.ONLINE: frozenset({_S.NEW, _S.ONLINE, _S.OFFLINE, _S.DELETION_INELIGIBLE}),
    _S.OFFLINE: frozenset({_S.NEW, _S.ONLINE, _S.OFFLINE, _S.DELETION_INELIGIBLE}),
    _S.DELETION_STARTED: frozenset({_S.OFFLINE}),
    _S.DELETION_SUCCESSFUL: frozenset({_S.DELETION_STARTED}),
    _S.DELETION_INELIGIBLE: frozenset({_S.OFFLINE, _S.DELETION_STARTED}),
    _S.NON_EXISTENT: frozenset({_S.DELETION_SUCCESSFUL}),
}


@dataclass
class ReplicaChangeResult:
    invalid: set[PartitionAndReplica] = field(default_factory=set)


class ReplicaStateMachine:
    def __init__(
        self,
        ctx: ControllerContext,
        store: PartitionStateStore,
        batch: RequestBatch,
        state_log: StateChangeLog,
        controller_id: int,
    ) -> None:
        self.ctx = ctx
        self.store = store
        self.batch = batch
        self.state_log = state_log
        self.controller_id = controller_id
        self.states: dict[PartitionAndReplica, ReplicaState] = {}
        # Topics whose every replica `initialize` made Online, with the standby's keys of the
        # topic when they were used, for `resend_online` right after it (no lookup of their
        # replicas' states); any other change forgets them.
        self._online_topics: dict[str, TopicReplicaKeys | None] = {}
        # The replicas `initialize` did not make Online, while nothing else changed a state.
        self._initially_offline: list[PartitionAndReplica] | None = None

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for state in self.states.values():
            counts[state.value] = counts.get(state.value, 0) + 1
        return f"ReplicaStateMachine({counts})"

    async def initialize(self, chunk: int = INITIALIZE_CHUNK) -> None:
        """On failover: online replicas -> Online, the others -> ReplicaDeletionIneligible.
        One pass over the assignments (300k replicas at 100k partitions, 3M at 1M), yielding to
        the loop every `chunk` partitions or PACE_BUDGET_S (common/pacing.py): at 1M it is
        seconds of CPU, and it runs while the brokers' answers to DescribeReplicaEpochs arrive,
        which must be taken in meanwhile."""
        ctx = self.ctx
        online_topics: dict[str, TopicReplicaKeys | None] = {}
        offline: list[PartitionAndReplica] = []
        self._online_topics = {}
        self._initially_offline = None
        online_state, offline_state = ReplicaState.ONLINE, ReplicaState.DELETION_INELIGIBLE
        # Without shutting-down brokers or failed log dirs, online is simply live.
        simple = not ctx.shutting_down_broker_ids and not any(ctx.replicas_on_offline_dirs.values())
        live = ctx.live_brokers
        # tuple.__new__ builds the NamedTuples without their Python-level __new__ (half the cost
        # of this loop, profiled at 100k partitions).
        new = tuple.__new__
        # A warm standby made the keys while it waited: a topic whose replicas are all live
        # needs no loop (the hint counts only for the very per-topic dict it was made from).
        hint, ctx.replica_keys_hint = ctx.replica_keys_hint, {}
        # And the states of every hinted replica, Online, built while it waited (3M at 1M
        # partitions): adopted, and corrected below for each topic whose hint does not count.
        ready, ctx.replica_states_hint = ctx.replica_states_hint, None
        if simple and ready is not None and ready[1] <= hint.keys():
            states = self.states = ready[0]
            unused = set(ready[1])  # topics whose keys are in `states`, not yet accounted for
        else:
            states = self.states
            states.clear()
            unused = set()
        live_ids = live.keys()
        pacer = Pacer(chunk)
        # A snapshot of the topics: the loop yields, and the dict must not change under it
        # (only the event consumer, which is running this, changes it; a copy costs nothing).
        for topic, parts in list(ctx.assignments.items()):
            await pacer.before(len(parts))
            made = hint.get(topic)
            if simple and made is not None and made.assignments is parts and made.brokers <= live_ids:
                if topic in unused:
                    unused.discard(topic)  # its states are in `ready` already
                else:
                    states.update(zip(made.keys, itertools.repeat(online_state)))
                online_topics[topic] = made
                continue
            if made is not None and topic in unused:
                unused.discard(topic)
                for key in made.keys:  # in `ready`, but not as this topic's states now
                    states.pop(key, None)
            all_online = True
            for partition, assignment in parts.items():
                tp = new(TopicPartition, (topic, partition))
                for broker_id in assignment.replicas:
                    online = broker_id in live if simple else ctx.is_replica_online(broker_id, tp)
                    replica = new(PartitionAndReplica, (tp, broker_id))
                    if online:
                        states[replica] = online_state
                    else:
                        states[replica] = offline_state
                        offline.append(replica)
                        all_online = False
            if all_online:
                online_topics[topic] = None
        for topic in unused:  # in `ready`, no longer assigned
            made = hint.get(topic)
            for key in made.keys if made is not None else ():
                states.pop(key, None)
        self._online_topics = online_topics
        self._initially_offline = offline

    def take_initially_offline(self) -> list[PartitionAndReplica]:
        """The replicas not Online after `initialize` (the failover takes them offline), as a
        scan of the states would find them: kept by `initialize` while nothing else changed."""
        offline, self._initially_offline = self._initially_offline, None
        if offline is None:
            offline = [r for r, s in self.states.items() if s is not ReplicaState.ONLINE]
        return offline

    async def resend_online(self, reported: ReplicaEpochs | None, chunk: int = INITIALIZE_CHUNK) -> tuple[int, int]:
        """Failover: OnlineReplica -> OnlineReplica for every online replica, i.e. a
        LeaderAndIsr to its broker, except where the broker reported holding the partition's
        leader epoch already (core/replica_epochs.py; None: no report, Kafka's full send).
        Returns (sent, skipped). Yields to the loop every `chunk` partitions or PACE_BUDGET_S."""
        # Per topic, with each broker's report of that topic looked up once: 3M replicas at 1M
        # partitions, where one generic pass over the state machine's keys took 2.7 s.
        new = tuple.__new__  # the NamedTuples without their Python-level __new__
        partition_states = self.ctx.partition_states
        states = self.states
        online = ReplicaState.ONLINE
        held_by_broker = reported if reported is not None else {}
        online_topics, self._online_topics = self._online_topics, {}
        add = self.batch.add_leader_and_isr
        sent = skipped = 0
        pacer = Pacer(chunk)
        for topic, parts in list(self.ctx.assignments.items()):
            await pacer.before(len(parts))
            # broker -> its reported epochs of this topic (None: none reported)
            held_of = {broker_id: held.get(topic) for broker_id, held in held_by_broker.items()}
            made = online_topics.get(topic, _NOT_ONLINE)
            if (
                made is not None
                and made is not _NOT_ONLINE
                and made.assignments is parts
                and any(e is not None for e in held_of.values())
            ):
                topic_sent, topic_skipped = self._resend_online_topic(topic, parts, made, held_of)
                if topic_sent >= 0:
                    sent += topic_sent
                    skipped += topic_skipped
                    continue
            every_replica_online = made is not _NOT_ONLINE
            for partition, assignment in parts.items():
                tp = new(TopicPartition, (topic, partition))
                partition_state = partition_states.get(tp)
                if partition_state is None:
                    continue
                leader_epoch = partition_state.leader_epoch
                for broker_id in assignment.replicas:
                    if not every_replica_online and states.get(new(PartitionAndReplica, (tp, broker_id))) is not online:
                        continue
                    # core/replica_epochs.already_held, inlined (3M calls at 1M partitions);
                    # tests/unit/test_replica_epochs.py pins the two to the same answers.
                    epochs = held_of.get(broker_id)
                    if epochs is not None:
                        epoch = epochs.get(partition)
                        if epoch is not None and epoch >= leader_epoch:
                            skipped += 1
                            continue
                    add([broker_id], tp, partition_state, assignment, is_new=False)
                    sent += 1
        return sent, skipped

    def _resend_online_topic(
        self,
        topic: str,
        parts: dict[int, ReplicaAssignment],
        made: TopicReplicaKeys,
        held_of: dict[int, Mapping[int, int] | None],
    ) -> tuple[int, int]:
        """`resend_online` for a topic whose every replica is Online, with the standby's keys
        of it: per broker, one comparison of its reported epochs with the leader epochs, made
        by C loops (map over the partitions it holds); the rule per replica only for a broker
        that lacks some. Returns (-1, 0) when some partition has no state (the generic loop
        skips those)."""
        partition_states = self.ctx.partition_states
        try:
            states_in_order = list(map(partition_states.__getitem__, made.partitions))
        except KeyError:
            return -1, 0
        # partition -> its leader epoch in ZooKeeper (`made` is in the order of `parts`)
        leader_epochs = dict(zip(parts, map(_LEADER_EPOCH, states_in_order), strict=True))
        sent = skipped = 0
        new = tuple.__new__
        add = self.batch.add_leader_and_isr
        for broker_id, partitions in made.partitions_by_broker.items():
            epochs = held_of.get(broker_id)
            if epochs is not None:
                try:
                    held = map(epochs.__getitem__, partitions)
                    if all(map(operator.ge, held, map(leader_epochs.__getitem__, partitions))):
                        skipped += len(partitions)
                        continue
                except KeyError:
                    pass  # some partition not reported: the rule per partition, below
            for partition in partitions:
                if epochs is not None:
                    epoch = epochs.get(partition)
                    if epoch is not None and epoch >= leader_epochs[partition]:
                        skipped += 1
                        continue
                tp = new(TopicPartition, (topic, partition))
                add([broker_id], tp, partition_states[tp], parts[partition], is_new=False)
                sent += 1
        return sent, skipped

    def _forget_start_up(self) -> None:
        """A state changed: what `initialize` remembered for the failover no longer holds."""
        self._online_topics = {}
        self._initially_offline = None

    def state(self, replica: PartitionAndReplica) -> ReplicaState:
        return self.states.get(replica, ReplicaState.NON_EXISTENT)

    def replicas_in(self, topic: str, *states: ReplicaState) -> set[PartitionAndReplica]:
        wanted = set(states)
        return {r for r, s in self.states.items() if r.tp.topic == topic and s in wanted}

    def remove(self, replicas: Iterable[PartitionAndReplica]) -> None:
        self._forget_start_up()
        for replica in replicas:
            self.states.pop(replica, None)

    async def handle_state_changes(
        self,
        replicas: Iterable[PartitionAndReplica],
        target: ReplicaState,
        written_this_event: Mapping[TopicPartition, LeaderIsrAndControllerEpoch] | None = None,
    ) -> ReplicaChangeResult:
        """`written_this_event`: states this controller wrote earlier in the same event (a broker
        failure's elections), which OfflineReplica need not read back (`_slice_to_offline`)."""
        self._forget_start_up()
        result = ReplicaChangeResult()
        valid: list[PartitionAndReplica] = []
        for i, replica in enumerate(sorted_replicas(replicas)):
            if i and not i % VALIDATE_SLICE:
                # 350k replicas to validate at 1M (a controlled shutdown) held the loop.
                await asyncio.sleep(0)
            current = self.state(replica)
            if current in VALID_PREVIOUS_STATES[target]:
                valid.append(replica)
            else:
                result.invalid.add(replica)
                log.error(
                    "controller %d epoch %d: refusing invalid replica state change of %s from %s to %s",
                    self.controller_id,
                    self.ctx.epoch,
                    replica,
                    current.value,
                    target.value,
                )
        if not valid:
            return result
        if target is ReplicaState.NEW:
            self._to_new(valid)
        elif target is ReplicaState.ONLINE:
            self._to_online(valid)
        elif target is ReplicaState.OFFLINE:
            await self._to_offline(valid, written_this_event or {})
        elif target is ReplicaState.DELETION_STARTED:
            for replica in valid:
                self.batch.add_stop_replica([replica.replica], replica.tp, delete=True)
                self.states[replica] = target
        elif target is ReplicaState.NON_EXISTENT:
            for replica in valid:
                assignment = self.ctx.assignment(replica.tp)
                if assignment is not None:
                    self.ctx.set_assignment(
                        replica.tp,
                        ReplicaAssignment(
                            tuple(r for r in assignment.replicas if r != replica.replica),
                            tuple(r for r in assignment.adding if r != replica.replica),
                            tuple(r for r in assignment.removing if r != replica.replica),
                        ),
                    )
                self.states.pop(replica, None)
        else:
            for replica in valid:
                self.states[replica] = target
        return result

    def adopt(self, replicas: Iterable[PartitionAndReplica]) -> None:
        """Replicas that are assigned but that this state machine never tracked (a replica added
        by a reassignment and elected leader before it was registered as NewReplica, which a
        leader cannot become): tracked as Online, the state their broker holds them in, so
        that every later transition (offline, deletion) includes them."""
        self._forget_start_up()
        for replica in replicas:
            if self.state(replica) is ReplicaState.NON_EXISTENT:
                self.states[replica] = ReplicaState.ONLINE

    def _to_new(self, replicas: list[PartitionAndReplica]) -> None:
        for replica in replicas:
            state = self.ctx.partition_states.get(replica.tp)
            assignment = self.ctx.assignment(replica.tp)
            if state is not None and assignment is not None:
                if state.leader == replica.replica:
                    log.error(
                        "controller %d: replica %s cannot become New: it is the leader", self.controller_id, replica
                    )
                    continue
                self.batch.add_leader_and_isr([replica.replica], replica.tp, state, assignment, is_new=True)
            self.states[replica] = ReplicaState.NEW

    def _to_online(self, replicas: list[PartitionAndReplica]) -> None:
        for replica in replicas:
            assignment = self.ctx.assignment(replica.tp)
            if self.state(replica) is ReplicaState.NEW:
                if assignment is not None and replica.replica not in assignment.replicas:
                    self.ctx.set_assignment(
                        replica.tp,
                        ReplicaAssignment(
                            (*assignment.replicas, replica.replica), assignment.adding, assignment.removing
                        ),
                    )
            else:
                state = self.ctx.partition_states.get(replica.tp)
                if state is not None and assignment is not None:
                    self.batch.add_leader_and_isr([replica.replica], replica.tp, state, assignment, is_new=False)
            self.states[replica] = ReplicaState.ONLINE

    async def _to_offline(
        self,
        replicas: list[PartitionAndReplica],
        written_this_event: Mapping[TopicPartition, LeaderIsrAndControllerEpoch],
    ) -> None:
        by_broker: dict[int, list[TopicPartition]] = {}
        for replica in replicas:
            by_broker.setdefault(replica.replica, []).append(replica.tp)
        for broker_id, partitions in sorted(by_broker.items()):
            # In slices, yielding between them: a broker failure at 1M partitions takes 400k
            # followers out of their ISRs, and one pass over them held the loop for 28 s.
            for start in range(0, len(partitions), OFFLINE_SLICE):
                if start:
                    await asyncio.sleep(0)
                error = await self._slice_to_offline(
                    broker_id, partitions[start : start + OFFLINE_SLICE], written_this_event
                )
                if error is not None:
                    # As if written in one pass: every replica is Offline in the state machine
                    # with its StopReplica in the batch, the committed writes' requests are in
                    # the batch too; the rest is not tried.
                    for tp in partitions[start + OFFLINE_SLICE :]:
                        self.batch.add_stop_replica([broker_id], tp, delete=False)
                        self.states[PartitionAndReplica(tp, broker_id)] = ReplicaState.OFFLINE
                    raise error

    async def _slice_to_offline(
        self,
        broker_id: int,
        partitions: list[TopicPartition],
        written_this_event: Mapping[TopicPartition, LeaderIsrAndControllerEpoch],
    ) -> ControllerError | None:
        ctx = self.ctx
        for tp in partitions:
            self.batch.add_stop_replica([broker_id], tp, delete=False)
        cached = ctx.partition_states
        # Not read back: a state this event's election wrote (conditionally, on its version),
        # still the one cached, without the broker, when the broker is not registered (a hard
        # failure; not a live broker's failed log dir). Since that write only the new leader,
        # a live broker, can have written it, and a leader adds to its ISR only a follower that
        # is registered (Kafka's: one that fetches), which this broker is not; were it back,
        # its registration is a later broker change, which brings its replicas online. The
        # read Kafka makes here could only find the broker absent (2k of a 10k-partition
        # failure's 6k reads, on the ZooKeeper that the other 4k wait for).
        ours = written_this_event if broker_id not in ctx.live_brokers else {}
        with_state = [
            tp
            for tp in partitions
            if (state := cached.get(tp)) is not None
            and not (ours.get(tp) is state and broker_id not in state.isr and state.leader != broker_id)
        ]
        without_state = [tp for tp in partitions if tp not in cached]
        without_state = [tp for tp in partitions if tp not in ctx.partition_states]
        updated, error = await self.remove_replica_from_isr(broker_id, with_state)
        deleting = ctx.topics_to_be_deleted
        # LeaderAndIsr to the partition's other replicas (the dead or stopped one gets none);
        # requests to brokers that are not live are never built.
        self.batch.add_leader_and_isr_to_replicas(
            {tp: state for tp, state in updated.items() if tp[0] not in deleting},
            ctx.live_or_shutting_down_broker_ids - {broker_id},
        )
        if without_state:
            self.batch.add_update_metadata(ctx.live_or_shutting_down_broker_ids, without_state)
        new, offline, states = tuple.__new__, ReplicaState.OFFLINE, self.states
        for tp in partitions:
            states[new(PartitionAndReplica, (tp, broker_id))] = offline
        return error  # raised by the caller, after the committed writes' requests are in the batch

    async def remove_replica_from_isr(
        self, broker_id: int, partitions: list[TopicPartition]
    ) -> tuple[dict[TopicPartition, LeaderIsrAndControllerEpoch], ControllerError | None]:
        """Write the partitions' states without `broker_id` in the ISR (ReplicaStateMachine.
        removeReplicasFromIsr): leader -1 if it led, a one-member ISR kept, leader epoch + 1.
        Returns the states written and, if ZooKeeper failed part-way, the error to raise once
        the caller has queued the requests of what was written."""
        updated: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
        sent, error = await self._remove_from_isr_pipelined(broker_id, partitions, updated)
        if error is not None:
            return updated, error
        for _attempt in range(MAX_WRITE_ATTEMPTS - 1):
            if not sent:
                break
            remaining = sorted_partitions(sent)
            fresh = await self.store.read(remaining)
            for tp, fresh_state in fresh.items():
                if fresh_state is None:
                    self.ctx.partition_states.pop(tp, None)
                    continue
                self.ctx.partition_states[tp] = fresh_state
                proposal = sent[tp]
                if (
                    fresh_state.controller_epoch == self.ctx.epoch
                    and fresh_state.leader == proposal.leader
                    and fresh_state.leader_epoch == proposal.leader_epoch
                    and fresh_state.isr == proposal.isr
                ):
                    # Our own write, applied with its reply lost (the retry met its version):
                    # nothing else announces it, so its requests go out as if just written.
                    # A leader's ISR change (same leader epoch) is not taken for it: its own
                    # notification announces it.
                    updated[tp] = fresh_state
            proposals = self._isr_removals(broker_id, remaining)
            if not proposals:
                break
            outcome = await self.store.update(proposals)
            self._apply_isr_removals(proposals, outcome, updated)
            if outcome.error is not None:
                return updated, outcome.error
            sent = {tp: proposals[tp] for tp in outcome.conflicts}
        return updated, None

    async def _remove_from_isr_pipelined(
        self,
        broker_id: int,
        partitions: list[TopicPartition],
        updated: dict[TopicPartition, LeaderIsrAndControllerEpoch],
    ) -> tuple[dict[TopicPartition, LeaderIsrAndControllerEpoch], ControllerError | None]:
        """The first attempt, a multi's worth of partitions at a time, up to
        ISR_REMOVAL_IN_FLIGHT writes outstanding, the outcomes acted on in order.

        A partition whose cached ISR holds `broker_id` is written straight from the cache, on
        the cached version: the write succeeds only if ZooKeeper still holds that very state,
        so the removal is the one a fresh read would have given; if anything wrote it since (a
        leader's ISR change whose notification is not processed yet), the version conflicts and
        it is read and tried again. Kafka's doRemoveReplicasFromIsr reads every state first: a
        broker failure's 4k followers at 10k partitions cost 4k reads, on the ZooKeeper and the
        cores the new leaders' requests were waiting for. A partition whose cached ISR lacks
        the broker is read first (chunks read up to ISR_REMOVAL_IN_FLIGHT ahead), as Kafka
        does: the cache can miss an ISR a leader just grew, and a replica missing from a stale
        ISR would stay in the real one (the simulation found that); nothing would be written to
        find out. Returns the partitions whose znode moved under us, with the state sent for
        each, and ZooKeeper's failure if any."""
        ctx = self.ctx
        states_get = ctx.partition_states.get
        from_cache: list[TopicPartition] = []
        to_read: list[TopicPartition] = []
        for tp in partitions:
            cached = states_get(tp)
            (from_cache if cached is not None and broker_id in cached.isr else to_read).append(tp)
        cache_chunks = iter(range(0, len(from_cache), ISR_REMOVAL_CHUNK))
        next_cache_chunk = next(cache_chunks, None)
        read_chunks = iter(range(0, len(to_read), ISR_REMOVAL_CHUNK))
        reads: collections.deque[tuple[list[TopicPartition], asyncio.Future[dict[TopicPartition, Any]]]]
        reads = collections.deque()
        writes: collections.deque[
            tuple[dict[TopicPartition, LeaderIsrAndControllerEpoch], asyncio.Future[WriteOutcome]]
        ] = collections.deque()
        conflicts: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
        error: ControllerError | None = None

        def read_next() -> None:
            start = next(read_chunks, None)
            if start is not None:
                chunk = to_read[start : start + ISR_REMOVAL_CHUNK]
                reads.append((chunk, asyncio.ensure_future(self.store.read(chunk))))

        def write(proposals: dict[TopicPartition, LeaderIsrAndControllerEpoch]) -> None:
            if proposals:
                writes.append((proposals, asyncio.ensure_future(self.store.update(proposals))))

        try:
            for _ in range(ISR_REMOVAL_IN_FLIGHT):
                read_next()
            while True:
                if error is None and len(writes) < ISR_REMOVAL_IN_FLIGHT:
                    # A read that is in (or the only thing left to wait for) first, then the
                    # cache's next chunk.
                    if reads and (reads[0][1].done() or next_cache_chunk is None):
                        chunk, read = reads.popleft()
                        fresh = await read
                        read_next()
                        ctx.set_partition_states({tp: state for tp, state in fresh.items() if state is not None})
                        write(self._isr_removals(broker_id, chunk))
                        continue
                    if next_cache_chunk is not None:
                        chunk = from_cache[next_cache_chunk : next_cache_chunk + ISR_REMOVAL_CHUNK]
                        next_cache_chunk = next(cache_chunks, None)
                        write(self._isr_removals(broker_id, chunk))
                        # Let the write reach the wire before the next chunk is decided.
                        await asyncio.sleep(0)
                        continue
                if not writes:
                    break
                proposals, pending = writes.popleft()
                try:
                    outcome = await pending
                except ControllerMovedError:
                    raise
                except Exception:
                    # What the other writes committed is acted on before this is raised, so
                    # their requests go out with the batch (a committed write is never dropped).
                    while writes:
                        later_proposals, later = writes.popleft()
                        try:
                            self._apply_isr_removals(later_proposals, await later, updated)
                        except Exception:
                            continue
                    raise
                self._apply_isr_removals(proposals, outcome, updated)
                for tp in outcome.conflicts:
                    conflicts[tp] = proposals[tp]
                if outcome.error is not None and error is None:
                    # ZooKeeper stopped answering: no more is sent, what is out is acted on.
                    error = outcome.error
        except BaseException:
            # A moved controller, a cancelled operation, a failed read: nothing is left running.
            futures: list[asyncio.Future[Any]] = [*(r for _, r in reads), *(w for _, w in writes)]
            for future in futures:
                future.cancel()
            await asyncio.gather(*futures, return_exceptions=True)
            raise
        for _, read in reads:  # reads ahead of a ZooKeeper failure
            read.cancel()
        await asyncio.gather(*(read for _, read in reads), return_exceptions=True)
        return conflicts, error

    def _isr_removals(
        self, broker_id: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, LeaderIsrAndControllerEpoch]:
        """The states to write for the partitions whose cached ISR holds `broker_id`."""
        ctx = self.ctx
        epoch = ctx.epoch
        new = tuple.__new__  # the NamedTuple without its Python-level __new__ (per partition)
        states_get = ctx.partition_states.get
        proposals: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
        for tp in partitions:
            current = states_get(tp)
            if current is None or broker_id not in current.isr:
                continue
            if current.controller_epoch > epoch:
                raise ControllerMovedError(
                    f"{tp} was written by controller epoch {current.controller_epoch} > ours {epoch}"
                )
            leader = NO_LEADER if current.leader == broker_id else current.leader
            isr = current.isr if len(current.isr) == 1 else tuple([r for r in current.isr if r != broker_id])
            proposals[tp] = new(
                LeaderIsrAndControllerEpoch, (leader, current.leader_epoch + 1, isr, current.zk_version, epoch)
            )
        return proposals

    def _apply_isr_removals(
        self,
        proposals: dict[TopicPartition, LeaderIsrAndControllerEpoch],
        outcome: WriteOutcome,
        updated: dict[TopicPartition, LeaderIsrAndControllerEpoch],
    ) -> None:
        ctx = self.ctx
        new = tuple.__new__
        written = {
            tp: new(LeaderIsrAndControllerEpoch, (*proposals[tp][:3], version, proposals[tp][4]))
            for tp, version in outcome.written.items()
        }
        previous_states = {tp: ctx.partition_states[tp] for tp in written}
        ctx.set_partition_states(written)
        updated.update(written)
        for tp, state in written.items():
            previous = previous_states[tp]
            if state.leader == NO_LEADER and previous.leader != NO_LEADER:
                self.state_log.record(
                    "partition.offline",
                    topic=tp.topic,
                    partition=tp.partition,
                    leader=NO_LEADER,
                    leader_epoch=state.leader_epoch,
                    isr=list(state.isr),
                    prev_leader=previous.leader,
                    controller_epoch=ctx.epoch,
                )
