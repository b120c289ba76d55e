"""A standby controller's copy of the cluster metadata, kept current while it waits, and handed to
its term of office at takeover after verification (issue 13's warm standby; KRaft's standbys
hold the metadata log for the same reason).

What it follows: every topic znode (assignment, topic id), every partition state znode and every
topic config znode, through two persistent recursive watches (`/brokers/topics`,
`/config/topics`). Events only mark znodes dirty; a background task re-reads them in batches.
Brokers, deletion requests and notifications are small and the term reads them at takeover as
always.

Why the copy can be trusted at takeover (`take`), under the new epoch:
- ZooKeeper delivers every watch event of a change before its reply to any request it answers
  after that change, on the same connection. The election's multi is such a request: when its
  reply has arrived, every change up to the election has marked its znode dirty here.
- The watches are armed per connection and a reconnect loses events, so the copy counts only if
  the connection that armed them (and on which the initial read ran) is still the session's
  connection at takeover (`ZkClient.tree_watch_intact`). Otherwise the term loads cold.
- `take` first arms the term's own watches (the topic list and each topic znode, as the cold
  load's reads do), then re-reads every dirty znode: a change before the arming is re-read here,
  a change after it fires the term's watch as well.
So what the term receives is, znode by znode, what ZooKeeper held at the election or later:
what a cold load gives, without reading the znodes that did not change.
Until then the copy is only a hint: nothing is decided from it while standing by.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from controller_svc.adapters.zk import loads, paths
from controller_svc.adapters.zk.client import TreeWatchArming, WatchCallback, WatchKind, ZnodeStat
from controller_svc.adapters.zk.wire import MULTI_READ_BATCH
from controller_svc.common import gc_policy, metrics
from controller_svc.common.errors import ControllerError, ZkUnimplementedError
from controller_svc.common.metadata_digest import topic_digest
from controller_svc.common.model import (
    LeaderIsrAndControllerEpoch,
    PartitionAndReplica,
    ReplicaAssignment,
    TopicPartition,
)
from controller_svc.common.pacing import Pacer
from controller_svc.common.tasks import cancel_and_wait, spawn
from controller_svc.core.context import ControllerContext, TopicReplicaKeys, topic_replica_keys
from controller_svc.core.metadata_encoding import EncodedStates, remember

log = logging.getLogger(__name__)

# Bound on re-read rounds at takeover: after the first, only changes made after the election
# are left, which the term's watches and notifications cover as after a cold load.
TAKE_ROUNDS = 3
# Partition states encoded per slice while standing by (about 10 ms of the standby's loop).
ENCODE_SLICE = 2000
# Partition states decoded per slice of a refresh (and handed over per slice at takeover),
# yielding between slices: a reload's 1M states decoded in one step held the standby's loop
# 5.2 s in a slow hour, with /controller deleted meanwhile (the election waited for the
# decode: 4.6 s after the deletion).
DECODE_SLICE = 50_000
# Partition states per read handed to the decode, as they come in (loads.ReadAhead).
READ_BATCH = MULTI_READ_BATCH


def _mzxid(got: tuple[bytes, ZnodeStat]) -> int:
    return got[1].mzxid


class StandbyZk(Protocol):
    """The session reads a standby needs (ZkClient, and the simulation's client)."""

    async def watch_tree(self, path: str, callback: WatchCallback) -> TreeWatchArming: ...
    def tree_watch_intact(self, arming: TreeWatchArming) -> bool: ...
    def unwatch_tree(self, path: str) -> None: ...
    async def remove_watches(self, path: str) -> None: ...
    async def get_children_or_empty(self, path: str, watch: bool = False) -> list[str]: ...
    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, ZnodeStat] | None]: ...
    async def exists(self, path: str, watch: bool = False) -> ZnodeStat | None: ...
    async def pipelined(self, calls: Iterable[Callable[[], Any]]) -> list[Any]: ...


@dataclass(frozen=True, slots=True)
class WarmLoad:
    """What a takeover got from the standby copy."""

    reread: int  # znodes re-read at takeover (their watches had fired)
    rounds: int
    topics: int
    partitions: int
    age_s: float  # since the copy was first complete
    # Znodes still marked after the last round: changed after the election (the term's watches
    # and notifications cover them, as after a cold load).
    left_dirty: int = 0


def classify(path: str) -> tuple[str, str, int]:
    """(kind, topic, partition) of a watched path: kind is "topic", "state", "config", "root"
    (one of the watched roots itself: reload everything) or "" (structure: ignored)."""
    if path in (paths.BROKER_TOPICS, paths.CONFIG_TOPICS):
        return "root", "", -1
    if path.startswith(paths.CONFIG_TOPICS + "/"):
        rest = path[len(paths.CONFIG_TOPICS) + 1 :]
        return ("config", rest, -1) if "/" not in rest else ("", "", -1)
    if path.startswith(paths.BROKER_TOPICS + "/"):
        parts = path[len(paths.BROKER_TOPICS) + 1 :].split("/")
        if len(parts) == 1:
            return "topic", parts[0], -1
        if len(parts) == 4 and parts[1] == "partitions" and parts[3] == "state" and parts[2].isdigit():
            return "state", parts[0], int(parts[2])
    return "", "", -1


class StandbyMetadata:
    """Owned by the Controller; runs while the controller is not active (`follow`), is emptied
    into the context by `take` at takeover."""

    def __init__(
        self, zk: StandbyZk, refresh_interval_s: float = 0.1, controller_id: int = -1, online_replica: object = None
    ) -> None:
        self._zk = zk
        # The replica state machine's value for an online replica: with it, the standby keeps
        # that machine's start-up states ready (every replica online), see `_set_replica_keys`.
        self._online_replica = online_replica
        self._refresh_interval_s = refresh_interval_s
        self._id = controller_id
        self._lock = asyncio.Lock()
        self._following = asyncio.Event()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.unsupported: str | None = None
        self.reloads = 0  # complete reads of the copy
        # Partition states the last reload found unchanged in the copy it re-read (not decoded,
        # encoded or digested again)
        self.kept_on_reload = 0
        # True while a reload re-reads a copy it keeps (`_reload`)
        self._reconciling = False
        self._armings: list[TreeWatchArming] = []
        self._ready_at: float | None = None
        # Events mark znodes dirty from the arming of a reload until the end of a takeover.
        self._listening = False
        self._reset()
        # Read by the metrics page's thread: len() of a set or dict is one step under the GIL.
        metrics.STANDBY_PENDING.set_function(self.pending_count)

    def __repr__(self) -> str:
        return (
            f"StandbyMetadata(controller={self._id}, ready={self.ready}, topics={len(self._topics)}, "
            f"states={len(self._states)}, dirty={self.dirty_count})"
        )

    def _reset(self) -> None:
        self._topics: dict[str, loads.LoadedTopic] = {}
        # Per topic of `_topics`: its znode's mzxid as read (unique to each write, a creation
        # included: the same mzxid is the same znode, unchanged; see `_reload`).
        self._topic_mzxids: dict[str, int] = {}
        # The highest mzxid of every znode this copy has read: a change it never heard of (its
        # watch gone with its connection) was committed after all of them, so above this.
        self._read_zxid = 0
        # During a reconciling reload: the watermark then, and what the copy had heard of and
        # not yet re-read (never kept).
        self._kept_below_zxid = 0
        self._suspect_states: set[TopicPartition] = set()
        self._present: set[str] = set()  # topic znodes that exist (malformed ones included)
        self._malformed: dict[str, int] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._states: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
        self._dirty_topics: set[str] = set()
        self._dirty_states: set[TopicPartition] = set()
        self._dirty_configs: set[str] = set()
        # UpdateMetadata's encoded partition states, made while waiting (core/metadata_encoding.py)
        self._encoded: EncodedStates = {}
        self._to_encode: set[TopicPartition] = set()
        self._replica_keys: dict[str, TopicReplicaKeys] = {}
        # Every key of `_replica_keys` -> the online value (a new dict: a handed-over one is the
        # replica state machine's now)
        self._replica_states: dict[PartitionAndReplica, object] = {}
        # Per topic, the digest of its UpdateMetadata states made from `_encoded`, and the
        # brokers it names (the failover's metadata digests, common/metadata_digest.py)
        self._digests: dict[str, tuple[bytes, frozenset[int]]] = {}
        # Per topic with a digest: its partitions led by other than the preferred replica (the
        # imbalance gauge's count, ControllerContext.hand_over_imbalance)
        self._imbalance: dict[str, int] = {}
        self._to_digest: set[str] = set()
        self._ready_at = None
        metrics.STANDBY_READY.set(0)

    @property
    def ready(self) -> bool:
        return self._ready_at is not None

    @property
    def dirty_count(self) -> int:
        return len(self._dirty_topics) + len(self._dirty_states) + len(self._dirty_configs)

    def pending_count(self) -> int:
        """Changed znodes not yet re-read, states not yet encoded, topics not yet digested: what
        a takeover would still do itself (0: the copy is ready and idle)."""
        return self.dirty_count + len(self._to_encode) + len(self._to_digest)

    def _intact(self) -> bool:
        return bool(self._armings) and all(self._zk.tree_watch_intact(a) for a in self._armings)

    # --- lifecycle ------------------------------------------------------------------------------

    def follow(self) -> None:
        """Stand by: keep the copy current (a first load, then the changes)."""
        if self.unsupported is not None:
            return
        self._following.set()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = spawn(self._run(), f"standby-metadata-{self._id}", on_death=self._on_death)

    def _on_death(self, _name: str, error: BaseException) -> None:
        # spawn() has logged it; a copy that stopped following is worthless: drop it and start
        # again (a takeover meanwhile loads cold).
        metrics.STANDBY_ERRORS.inc()
        self._reset()
        self._armings = []
        if self._following.is_set():
            asyncio.get_running_loop().call_later(1.0, self.follow)

    async def close(self) -> None:
        self._following.clear()
        await cancel_and_wait(self._task)
        self._task = None
        for arming in self._armings:
            self._zk.unwatch_tree(arming.path)
        self._armings = []
        self._reset()

    async def _run(self) -> None:
        while True:
            await self._following.wait()
            try:
                if not self.ready or not self._intact():
                    async with self._lock:
                        if self._following.is_set():
                            # The copy's load is one bulk step (common/gc_policy.py).
                            with gc_policy.no_collection_during("standby copy"):
                                await self._reload()
                    if not self.ready:
                        await asyncio.sleep(0.5)  # the connection changed during the read: again
                    with gc_policy.no_collection_during("standby encoding"):
                        await self._encode_pending()
                    continue
                try:
                    # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation
                    # that lands as the wait ends, and close() would then wait for ever.
                    async with asyncio.timeout(1.0):
                        await self._wake.wait()
                except TimeoutError:
                    continue  # look at the connection again
                # Gather a burst of changes (a partition creation, a broker's ISR shrinks) into
                # a few batched reads.
                await asyncio.sleep(self._refresh_interval_s)
                async with self._lock:
                    self._wake.clear()
                    if self._following.is_set() and self.ready and self._intact():
                        await self._refresh()
                await self._encode_pending()
            except ZkUnimplementedError as e:
                self.unsupported = str(e)
                log.error("controller %d: no warm standby (failovers load cold): %s", self._id, e)
                self._reset()
                return
            except ControllerError as e:
                # A read failed (a timeout, the session lost mid-read): `_refresh` has put back
                # what it had taken to read, so the copy is read again as after a lost
                # connection, keeping what did not change, rather than dropped (at 1M
                # partitions, a decode, encode and digest of every state again).
                log.warning("controller %d: a read of the standby copy failed (%s); reading it all again", self._id, e)
                metrics.STANDBY_ERRORS.inc()
                self._ready_at = None
                metrics.STANDBY_READY.set(0)
                await asyncio.sleep(1.0)

    # --- following ------------------------------------------------------------------------------

    def _on_event(self, event_kind: WatchKind, path: str) -> None:
        if not self._listening:
            return
        kind, topic, partition = classify(path)
        if kind == "topic":
            self._dirty_topics.add(topic)
        elif kind == "state":
            self._dirty_states.add(TopicPartition(topic, partition))
        elif kind == "config":
            self._dirty_configs.add(topic)
        elif kind == "root":
            if event_kind != WatchKind.DATA_CHANGED:
                self._armings = []  # a watched root itself was created or deleted: start again
        else:
            return
        self._wake.set()

    async def _reload(self) -> None:
        """Arm the watches on the current connection, then read everything (events from the
        arming on mark what changed during the read).

        A copy already held (the connection was lost: its tree watches went with it, and what
        changed meanwhile is unknown) is re-read, not dropped: every znode is read again, and
        what did not change is kept with its encoding and its topic's digest. At 1M partitions
        that leaves the reads, not the decode, encode and digest of every state, after each lost
        connection (seven in one benchmark's set-up). Unchanged means: a topic znode at the
        mzxid the copy read (each write, a creation included, has its own zxid); a partition
        state that the copy holds and had not heard changed (not marked dirty), with an mzxid
        no higher than the highest the copy ever read. A change the copy heard of is marked (or
        already read again); one it did not hear of came after its watch was gone, so after
        every read it made: its zxid is higher than any mzxid it read. Versions would not do: a
        state deleted and created again unheard (a topic recreated, or a deletion stopped
        half-way and the partition elected afresh) is back at version 0, as the copy may hold it."""
        started = time.monotonic()
        reconciling = bool(self._topics)
        if reconciling:
            self._ready_at = None
            metrics.STANDBY_READY.set(0)
            self._kept_below_zxid = self._read_zxid
            self._suspect_states = set(self._dirty_states)
            # Everything held is checked again, gone topics included.
            self._dirty_topics.update(self._topics, self._present)
            self._dirty_configs.update(self._configs)
        else:
            self._reset()
        self.kept_on_reload = 0
        self._armings = []
        self._listening = True
        self._reconciling = reconciling
        try:
            armings = [
                await self._zk.watch_tree(paths.BROKER_TOPICS, self._on_event),
                await self._zk.watch_tree(paths.CONFIG_TOPICS, self._on_event),
            ]
            self._armings = armings
            names = await self._zk.get_children_or_empty(paths.BROKER_TOPICS)
            self._dirty_topics.update(names)
            self._dirty_configs.update(names)
            reread = await self._refresh()
        finally:
            self._reconciling = False
            self._suspect_states = set()
        if not self._intact():
            return
        self._ready_at = time.monotonic()
        self.reloads += 1
        metrics.STANDBY_READY.set(1)
        metrics.STANDBY_RELOADS.inc()
        log.info(
            "controller %d: standby copy loaded (%d topics, %d partition states, %d znodes read, %d states "
            "kept from the copy before) in %.0f ms",
            self._id,
            len(self._topics),
            len(self._states),
            reread,
            self.kept_on_reload,
            (time.monotonic() - started) * 1000,
        )

    async def _refresh(self) -> int:
        """Re-read the dirty znodes; a topic re-read re-reads its partitions' states too (its
        partitions may have changed). Returns the znodes read.

        A read that fails (`_run` then reads the copy again, every topic and config included)
        puts back the marks of the states heard changed: the next reload must not keep those.
        After a reconciling reload's failure the copy's watermark goes back to what it was
        before the reload: the reload's reads came after the watches were armed again, later
        than a change made while they were gone, which the next reload must not keep either."""
        heard: set[TopicPartition] = set()
        try:
            return await self._read_taken(heard)
        except ControllerError:
            self._dirty_states.update(heard)
            if self._reconciling:
                self._read_zxid = self._kept_below_zxid
            raise

    async def _read_taken(self, heard: set[TopicPartition]) -> int:
        """`_refresh`'s reads: the topics marked, then the states heard changed (taken into
        `heard`) and those of the topics re-read, then the configs marked."""
        topics, self._dirty_topics = sorted(self._dirty_topics), set()
        read = 0
        # Topics a reconciling reload found the same incarnation and version as the copy's.
        unchanged: set[str] = set()
        # States to read because their topic was re-read (not heard changed)
        of_topics: set[TopicPartition] = set()
        if topics:
            got_topics = await self._zk.get_many([paths.topic_path(t) for t in topics])
            read += len(topics)
            self._read_zxid = max(self._read_zxid, max(map(_mzxid, filter(None, got_topics)), default=0))
            for topic, got in zip(topics, got_topics, strict=True):
                if (
                    self._reconciling
                    and got is not None
                    and topic in self._topics
                    and self._topic_mzxids.get(topic) == got[1].mzxid
                ):
                    unchanged.add(topic)
                    of_topics.update(self._partitions_of(topic))
                    continue
                loaded = loads.decode_topic_read(topic, got, self._malformed)
                if got is None:
                    self._present.discard(topic)
                else:
                    self._present.add(topic)
                self._forget_digest(topic)
                if loaded is None:
                    # Gone or malformed: a cold load would not read its states either.
                    for tp in self._partitions_of(topic):
                        self._states.pop(tp, None)
                        self._encoded.pop(tp, None)
                    self._topics.pop(topic, None)
                    self._topic_mzxids.pop(topic, None)
                    self._set_replica_keys(topic, None)
                    continue
                self._topics[topic] = loaded
                assert got is not None  # a topic decoded was read
                self._topic_mzxids[topic] = got[1].mzxid
                self._set_replica_keys(topic, topic_replica_keys(topic, loaded.assignments))
                of_topics.update(TopicPartition(topic, p) for p in loaded.assignments)
        taken, self._dirty_states = self._dirty_states, set()
        heard.update(taken)
        states = list(taken | of_topics)
        if states:
            state_paths = [paths.partition_state_path(tp.topic, tp.partition) for tp in states]
            read += len(states)
            # Decoded a multiRead batch at a time as the batches come in, later ones read
            # meanwhile (read in full first, a first load of 1M states held every read at once:
            # its controller then stayed 0.5 GB larger), paced (the lock is held: no takeover or
            # other refresh interleaves; watch events arriving meanwhile only mark znodes for
            # the next one).
            pacer = Pacer(DECODE_SLICE)
            async with loads.ReadAhead(self._zk, state_paths, READ_BATCH, loads.READ_AHEAD) as reads:
                while (batch := await reads.next()) is not None:
                    start, chunk_reads = batch
                    await pacer.before(len(chunk_reads))
                    end = start + len(chunk_reads)
                    chunk, chunk_paths = states[start:end], state_paths[start:end]
                    self._read_zxid = max(self._read_zxid, max(map(_mzxid, filter(None, chunk_reads)), default=0))
                    if unchanged:
                        chunk, chunk_paths, chunk_reads = self._changed_states(
                            unchanged, chunk, chunk_paths, chunk_reads
                        )
                    decoded = loads.decode_state_reads(chunk, chunk_paths, chunk_reads)
                    for tp, state in zip(chunk, decoded, strict=True):
                        self._forget_digest(tp.topic)
                        if state is None or tp.topic not in self._topics:
                            self._states.pop(tp, None)
                            self._encoded.pop(tp, None)
                        else:
                            self._states[tp] = state
                            self._to_encode.add(tp)
        configs, self._dirty_configs = sorted(self._dirty_configs), set()
        if configs:
            got_configs = await self._zk.get_many([f"{paths.CONFIG_TOPICS}/{t}" for t in configs])
            read += len(configs)
            for topic, got_config in zip(configs, got_configs, strict=True):
                config = loads.decode_config_read(topic, got_config) if got_config is not None else None
                if config is None:
                    self._configs.pop(topic, None)
                else:
                    self._configs[topic] = config
        metrics.STANDBY_ZNODES_READ.inc(read)
        return read

    async def _encode_pending(self) -> None:
        """Encode the UpdateMetadata fields of the states read since the last time, a slice at a
        time (the standby's loop serves its own requests meanwhile)."""
        while self._to_encode and self._following.is_set():
            async with self._lock:
                if not self._following.is_set():
                    return
                for _ in range(min(ENCODE_SLICE, len(self._to_encode))):
                    tp = self._to_encode.pop()
                    state = self._states.get(tp)
                    loaded = self._topics.get(tp.topic)
                    assignment = loaded.assignments.get(tp.partition) if loaded is not None else None
                    if state is None or assignment is None:
                        self._encoded.pop(tp, None)
                    else:
                        remember(self._encoded, tp, state, assignment)
            await asyncio.sleep(0)
        await self._digest_pending()

    async def _digest_pending(self) -> None:
        """Once everything is encoded: the digests of the topics changed since, a slice of
        partitions at a time. A topic with a partition lacking a state gets none (the takeover
        computes it, as after a cold load)."""
        while self._to_digest and not self._to_encode and self._following.is_set():
            async with self._lock:
                if not self._following.is_set() or self._to_encode:
                    return
                done = 0
                while self._to_digest and done < ENCODE_SLICE * 5:
                    topic = self._to_digest.pop()
                    loaded = self._topics.get(topic)
                    if loaded is None:
                        continue
                    done += len(loaded.assignments)
                    made = self._topic_digest(topic, loaded.assignments)
                    if made is not None:
                        self._digests[topic] = made[0], made[1]
                        self._imbalance[topic] = made[2]
            await asyncio.sleep(0)

    def _forget_digest(self, topic: str) -> None:
        self._digests.pop(topic, None)
        self._imbalance.pop(topic, None)
        self._to_digest.add(topic)

    def _topic_digest(
        self, topic: str, assignments: dict[int, ReplicaAssignment]
    ) -> tuple[bytes, frozenset[int], int] | None:
        """(metadata digest, brokers named, partitions not led by the preferred replica)."""
        fields: list[bytes] = []
        brokers: set[int] = set()
        imbalance = 0
        for partition in sorted(assignments):
            tp = TopicPartition(topic, partition)
            entry = self._encoded.get(tp)
            assignment = assignments[partition]
            if entry is None or entry[0] is not self._states.get(tp) or entry[1] is not assignment:
                return None
            fields.append(entry[2])
            brokers.update(assignment.replicas)
            if assignment.replicas and entry[0].leader != assignment.replicas[0]:
                imbalance += 1
        return topic_digest(fields), frozenset(brokers), imbalance

    def _set_replica_keys(self, topic: str, keys: TopicReplicaKeys | None) -> None:
        """A topic's replica keys, and their entries in the replica states kept ready: at 1M
        partitions, building the replica state machine's 3M states at takeover was the largest
        part of its start-up."""
        old = self._replica_keys.pop(topic, None)
        if self._online_replica is None:
            if keys is not None:
                self._replica_keys[topic] = keys
            return
        states = self._replica_states
        if old is not None:
            for key in old.keys:
                states.pop(key, None)
        if keys is not None:
            self._replica_keys[topic] = keys
            states.update(zip(keys.keys, itertools.repeat(self._online_replica)))

    def _changed_states(
        self,
        unchanged_topics: set[str],
        partitions: Sequence[TopicPartition],
        state_paths: Sequence[str],
        reads: Sequence[tuple[bytes, ZnodeStat] | None],
    ) -> tuple[list[TopicPartition], list[str], list[tuple[bytes, ZnodeStat] | None]]:
        """Of states re-read by a reconciling reload, those to decode: all but the ones of an
        unchanged topic that the copy holds, had not heard changed, and finds at an mzxid no
        higher than any it read before (`_reload` says why those are the copy's)."""
        held = self._states
        suspect = self._suspect_states
        below = self._kept_below_zxid
        keep: list[TopicPartition] = []
        changed: tuple[list[TopicPartition], list[str], list[tuple[bytes, ZnodeStat] | None]] = ([], [], [])
        for tp, path, got in zip(partitions, state_paths, reads, strict=True):
            state = held.get(tp)
            if (
                got is not None
                and state is not None
                and tp.topic in unchanged_topics
                and got[1].mzxid <= below
                and tp not in suspect
            ):
                keep.append(tp)
            else:
                changed[0].append(tp)
                changed[1].append(path)
                changed[2].append(got)
        self.kept_on_reload += len(keep)
        metrics.STANDBY_STATES_KEPT.inc(len(keep))
        return changed

    def _partitions_of(self, topic: str) -> list[TopicPartition]:
        loaded = self._topics.get(topic)
        return [TopicPartition(topic, p) for p in loaded.assignments] if loaded is not None else []

    # --- takeover ---------------------------------------------------------------------------------

    async def take(self, ctx: ControllerContext) -> WarmLoad | str:
        """Under the new epoch, right after the election: verify the copy (see the module's
        docstring), arm the term's topic watches and hand the copy to `ctx`. Returns why not
        when the copy cannot be trusted (the caller loads cold); the copy is emptied either way
        and following stops until `follow`."""
        self._following.clear()
        async with self._lock:
            try:
                return await self._take(ctx)
            finally:
                # While active, nothing is followed: the tree watches' callbacks go (their
                # events stop on the ZooKeeper thread) until `follow` arms them again.
                self._listening = False
                for arming in self._armings:
                    self._zk.unwatch_tree(arming.path)
                self._armings = []
                self._reset()

    async def _end_tree_watches(self) -> None:
        """Stop the server sending the tree watches' events (the active controller writes
        thousands of the znodes they cover in one operation, and each event is parsed on the
        session's thread). Done at the start of a takeover, right after the election: every
        event of a change before the election arrived before the election's reply, so the
        marks the verification needs are all in; changes after it are the term's to see, as
        after a cold load. And done before the term arms its own watches: the removal ends
        every watch on the path (see ZkClient.remove_watches)."""
        for arming in self._armings:
            try:
                await self._zk.remove_watches(arming.path)
            except ControllerError as e:
                # Its events keep coming until the connection ends, and are ignored once the
                # callbacks go: a cost, not a fault.
                log.info("controller %d: could not end the tree watch on %s: %s", self._id, arming.path, e)
                metrics.STANDBY_ERRORS.inc()

    async def _take(self, ctx: ControllerContext) -> WarmLoad | str:
        if self.unsupported is not None:
            return f"unsupported: {self.unsupported}"
        if self._armings and self._intact():
            await self._end_tree_watches()
        if self._ready_at is None:
            return "the copy was not complete"
        if not self._intact():
            return "the connection that armed the watches is gone"
        ready_at = self._ready_at
        # The term's watches first (TopicChange, and PartitionModifications per topic), as the
        # cold load's reads with watch=True arm them.
        names = await self._zk.get_children_or_empty(paths.BROKER_TOPICS, watch=True)
        await self._zk.pipelined([functools.partial(self._zk.exists, paths.topic_path(t), watch=True) for t in names])
        self._dirty_topics.update(set(names) ^ self._present)
        reread = rounds = 0
        while self.dirty_count and rounds < TAKE_ROUNDS:
            reread += await self._refresh()
            rounds += 1
        if not self._intact():
            return "the connection changed during the takeover"
        for topic, loaded in self._topics.items():
            ctx.assignments[topic] = loaded.assignments
            if loaded.topic_id:
                ctx.topic_ids[topic] = loaded.topic_id
        ctx.malformed_topics.update(self._malformed)
        ctx.topic_configs.update((t, c) for t, c in self._configs.items() if t in self._topics)
        # The states of the assigned partitions, per topic in C loops (a filter over 1M states
        # was half a second of a takeover), over the keys made while waiting when they fit;
        # yielding every DECODE_SLICE partitions or PACE_BUDGET_S (the failover's event owns the
        # context and the lock is held: nothing changes either meanwhile). In one step with what follows it held
        # the loop 3.6 s at 1M partitions in a slow hour.
        states = self._states
        handed: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
        pacer = Pacer(DECODE_SLICE)
        for topic, parts in ctx.assignments.items():
            await pacer.before(len(parts))
            keys = self._replica_keys.get(topic)
            if keys is not None and keys.assignments is parts:
                partitions: Sequence[TopicPartition] = keys.partitions
            else:
                partitions = [TopicPartition(topic, p) for p in parts]
            found = list(map(states.get, partitions))
            if None in found:
                handed.update((tp, state) for tp, state in zip(partitions, found, strict=True) if state is not None)
            else:
                handed.update(zip(partitions, found, strict=True))  # type: ignore[arg-type]
        ctx.partition_states.update(handed)
        # Entries count only for the very state and assignment objects handed over above.
        ctx.encoded_partition_states.update(self._encoded)
        ctx.replica_keys_hint.update(self._replica_keys)
        if self._online_replica is not None:
            # `_reset` below makes a new dict: this one is the replica state machine's now.
            ctx.replica_states_hint = (self._replica_states, frozenset(self._replica_keys))
        ctx.hand_over_imbalance({t: c for t, c in self._imbalance.items() if t in self._topics})
        # Last: valid while nothing is written to the states and assignments handed over above.
        ctx.hand_over_metadata_digests({t: d for t, d in self._digests.items() if t in self._topics})
        metrics.FAILOVER_LOADS.labels("warm").inc()
        return WarmLoad(
            reread=reread,
            rounds=rounds,
            topics=len(self._topics),
            partitions=ctx.partition_count,
            age_s=round(time.monotonic() - ready_at, 1),
            left_dirty=self.dirty_count,
        )
