"""Reading cluster metadata from ZooKeeper with pipelined reads (never one round trip per
znode in series). Corrupt znodes are reported, counted and skipped; they never stop a load."""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from controller_svc.adapters.zk import codecs, paths
from controller_svc.adapters.zk.client import ZkClient, ZnodeStat
from controller_svc.adapters.zk.wire import MULTI_READ_BATCH
from controller_svc.common import metrics
from controller_svc.common.errors import ControllerError, CorruptZnodeError
from controller_svc.common.model import BrokerInfo, LeaderIsrAndControllerEpoch, ReplicaAssignment, TopicPartition
from controller_svc.core.context import ControllerContext
from controller_svc.core.topics import validate_assignment

log = logging.getLogger(__name__)

# multiRead batches of partition states outstanding ahead of the one being decoded.
READ_AHEAD = 32
_DATA, _STAT = operator.itemgetter(0), operator.itemgetter(1)
_VERSION = operator.attrgetter("version")


async def load_brokers(zk: ZkClient, watch: bool) -> dict[int, BrokerInfo]:
    """Live brokers with their epochs (czxid of the registration, KIP-380)."""
    children = await zk.get_children_or_empty(paths.BROKER_IDS, watch=watch)
    ids: list[int] = []
    for child in children:
        if child.isdigit():
            ids.append(int(child))
        else:
            metrics.CORRUPT_ZNODES.labels("broker").inc()
            log.error("ignoring %s/%s: not a broker id", paths.BROKER_IDS, child)
    reads = await zk.pipelined([functools.partial(zk.get_or_none, paths.broker_path(b), watch=watch) for b in ids])
    brokers: dict[int, BrokerInfo] = {}
    for broker_id, got in zip(ids, reads, strict=True):
        if got is None:
            continue  # deregistered between the two reads; the next BrokerChange tells
        data, stat = got
        try:
            brokers[broker_id] = codecs.decode_broker_registration(broker_id, data, stat.czxid)
        except CorruptZnodeError as e:
            metrics.CORRUPT_ZNODES.labels("broker").inc()
            log.error("ignoring broker %d: %s", broker_id, e)
    return brokers


@dataclass(frozen=True, slots=True)
class LoadedTopic:
    name: str
    assignments: dict[int, ReplicaAssignment]
    topic_id: str | None


async def load_topic_names(zk: ZkClient, watch: bool) -> list[str]:
    return await zk.get_children_or_empty(paths.BROKER_TOPICS, watch=watch)


async def load_topics(
    zk: ZkClient, topics: Sequence[str], watch: bool, known_bad: dict[str, int] | None = None
) -> dict[str, LoadedTopic]:
    """Topic znodes (versions 1-3). A malformed one (bad JSON, bad partition ids, empty or
    duplicate replica lists) is logged, counted and left out; the others load. `known_bad`
    (topic -> znode version) is updated with the malformed ones, so a znode is reported once
    per version rather than at every TopicChange."""
    reads = await zk.pipelined([functools.partial(zk.get_or_none, paths.topic_path(t), watch=watch) for t in topics])
    result: dict[str, LoadedTopic] = {}
    bad = known_bad if known_bad is not None else {}
    for topic, got in zip(topics, reads, strict=True):
        loaded = decode_topic_read(topic, got, bad)
        if loaded is not None:
            result[topic] = loaded
    return result


def decode_topic_read(topic: str, got: tuple[bytes, ZnodeStat] | None, known_bad: dict[str, int]) -> LoadedTopic | None:
    """One topic znode as read (None: missing or malformed; a malformed one is logged and
    counted once per znode version, tracked in `known_bad`)."""
    if got is None:
        known_bad.pop(topic, None)
        return None
    path = paths.topic_path(topic)
    try:
        znode = codecs.decode_topic(path, got[0])
        validate_assignment(znode.partitions)
    except (CorruptZnodeError, ControllerError) as e:
        if known_bad.get(topic) != got[1].version:
            metrics.CORRUPT_ZNODES.labels("topic").inc()
            log.error("ignoring topic %s: %s: %s", topic, path, e)
        known_bad[topic] = got[1].version
        return None
    known_bad.pop(topic, None)
    return LoadedTopic(topic, _assignments(znode), znode.topic_id)


def _assignments(znode: codecs.TopicZnode) -> dict[int, ReplicaAssignment]:
    """Partitions that are not being reassigned share one ReplicaAssignment per replica list
    (immutable, and a few dozen lists per topic: 1M objects built one by one at a cold failover
    of 1M partitions, and kept)."""
    adding, removing = znode.adding_replicas, znode.removing_replicas
    plain = {r: ReplicaAssignment(r) for r in set(znode.partitions.values())}
    if not adding and not removing:
        return dict(zip(znode.partitions, map(plain.__getitem__, znode.partitions.values()), strict=True))
    return {
        p: ReplicaAssignment(r, adding.get(p, ()), removing.get(p, ())) if p in adding or p in removing else plain[r]
        for p, r in znode.partitions.items()
    }


def decode_state_read(
    tp: TopicPartition, path: str, got: tuple[bytes, ZnodeStat]
) -> LeaderIsrAndControllerEpoch | None:
    """One partition state znode as read (None: corrupt, logged and counted)."""
    try:
        return codecs.decode_partition_state(path, got[0], got[1].version)
    except CorruptZnodeError as e:
        metrics.CORRUPT_ZNODES.labels("partition_state").inc()
        log.error("ignoring state of %s: %s", tp, e)
        return None


def decode_state_reads(
    partitions: Sequence[TopicPartition],
    state_paths: Sequence[str],
    reads: Sequence[tuple[bytes, ZnodeStat] | None],
) -> list[LeaderIsrAndControllerEpoch | None]:
    """State znodes as read, in order: None for one that is gone or corrupt (a corrupt one is
    logged and counted). When every znode is there, the batch is decoded at once
    (codecs.decode_partition_states); otherwise, or when one of them is corrupt, one by one."""
    if None not in reads:
        present = cast("list[tuple[bytes, ZnodeStat]]", reads)
        found = codecs.decode_partition_states(list(map(_DATA, present)), list(map(_VERSION, map(_STAT, present))))
        if found is not None:
            return list(found)
    return [
        None if got is None else decode_state_read(tp, path, got)
        for tp, path, got in zip(partitions, state_paths, reads, strict=True)
    ]


def decode_config_read(topic: str, got: tuple[bytes, ZnodeStat]) -> dict[str, str] | None:
    """One topic config znode as read (None: corrupt, logged and counted)."""
    try:
        return codecs.decode_topic_config(f"{paths.CONFIG_TOPICS}/{topic}", got[0])
    except CorruptZnodeError as e:
        metrics.CORRUPT_ZNODES.labels("topic_config").inc()
        log.error("ignoring config of topic %s: %s", topic, e)
        return None


class _ManyReader(Protocol):
    async def get_many(self, paths: Sequence[str]) -> list[tuple[bytes, ZnodeStat] | None]: ...


class ReadAhead:
    """The reads of `paths` in batches handed out in order, `ahead` batches outstanding beyond
    the one handed out: each is the caller's to decode while ZooKeeper serves the later ones,
    and only those are held at once. Use as an async context manager (what is outstanding is
    cancelled on leaving it)."""

    def __init__(self, zk: _ManyReader, paths: Sequence[str], batch: int, ahead: int) -> None:
        self._zk = zk
        self._paths = paths
        self._batch = batch
        self._ahead = ahead
        self._starts = iter(range(0, len(paths), batch))
        self._reads: collections.deque[tuple[int, asyncio.Future[list[tuple[bytes, ZnodeStat] | None]]]] = (
            collections.deque()
        )

    def _read_next(self) -> None:
        start = next(self._starts, None)
        if start is not None:
            batch = self._paths[start : start + self._batch]
            self._reads.append((start, asyncio.ensure_future(self._zk.get_many(batch))))

    async def __aenter__(self) -> ReadAhead:
        for _ in range(self._ahead + 1):
            self._read_next()
        return self

    async def __aexit__(self, *exc: object) -> None:
        reads, self._reads = self._reads, collections.deque()
        for _, read in reads:
            read.cancel()
        await asyncio.gather(*(read for _, read in reads), return_exceptions=True)

    async def next(self) -> tuple[int, list[tuple[bytes, ZnodeStat] | None]] | None:
        """(index of the batch's first path, its reads), or None after the last."""
        if not self._reads:
            return None
        start, read = self._reads[0]
        got = await read
        self._reads.popleft()
        self._read_next()
        return start, got


async def load_partition_states(zk: ZkClient, ctx: ControllerContext, partitions: Sequence[TopicPartition]) -> None:
    """Batches are read READ_AHEAD at a time ahead of the one being decoded, each decoded as
    soon as it is in while ZooKeeper serves the later ones: read in full, then decoded, a cold
    failover's load at 100k partitions took the reads and then the decoding, one after the
    other (2.1x the reads alone)."""
    state_paths = [paths.partition_state_path(tp.topic, tp.partition) for tp in partitions]
    decoded: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
    missing: list[TopicPartition] = []
    async with ReadAhead(zk, state_paths, MULTI_READ_BATCH, READ_AHEAD - 1) as reads:
        while (got := await reads.next()) is not None:
            start, states = got
            batch = partitions[start : start + len(states)]
            found = decode_state_reads(batch, state_paths[start : start + len(states)], states)
            for tp, read, state in zip(batch, states, found, strict=True):
                if read is None:
                    missing.append(tp)
                elif state is not None:
                    decoded[tp] = state
    for tp in missing:
        ctx.partition_states.pop(tp, None)
    ctx.partition_states.update(decoded)  # one bulk write (core/tracked.py)


async def load_topic_configs(zk: ZkClient, topics: Sequence[str]) -> dict[str, dict[str, str]]:
    reads = await zk.get_many([f"{paths.CONFIG_TOPICS}/{t}" for t in topics])
    configs: dict[str, dict[str, str]] = {}
    for topic, got in zip(topics, reads, strict=True):
        if got is None:
            continue
        config = decode_config_read(topic, got)
        if config is not None:
            configs[topic] = config
    return configs


async def load_all(zk: ZkClient, ctx: ControllerContext) -> None:
    """Failover: every topic's assignment and config, every partition's leader and ISR."""
    names = await load_topic_names(zk, watch=True)
    topics = await load_topics(zk, names, watch=True, known_bad=ctx.malformed_topics)
    for topic in topics.values():
        ctx.assignments[topic.name] = dict(topic.assignments)
        if topic.topic_id:
            ctx.topic_ids[topic.name] = topic.topic_id
    ctx.topic_configs.update(await load_topic_configs(zk, sorted(topics)))
    await load_partition_states(zk, ctx, ctx.all_partitions())


async def read_notifications(zk: ZkClient, parent: str, watch: bool) -> list[tuple[str, dict[str, object] | None]]:
    """Children of a notification path with their JSON (None when it does not parse)."""
    children = await zk.get_children_or_empty(parent, watch=watch)
    reads = await zk.get_many([f"{parent}/{c}" for c in children])
    result: list[tuple[str, dict[str, object] | None]] = []
    for child, got in zip(children, reads, strict=True):
        if got is None:
            continue
        result.append((child, codecs.decode_notification(got[0])))
    return result
