"""Loading cluster metadata from ZooKeeper with pipelined reads (never one round trip per
znode in series). Corrupt znodes are reported, counted and skipped; they never stop a load."""

from __future__ import annotations

import functools
import logging

from controller_svc import metrics
from controller_svc.context import ControllerContext
from controller_svc.errors import CorruptZnodeError
from controller_svc.model import BrokerInfo, TopicPartition
from controller_svc.zk import codecs, paths
from controller_svc.zk.client import ZkClient

log = logging.getLogger(__name__)


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


async def load_topics(zk: ZkClient, ctx: ControllerContext) -> None:
    """Every topic's assignment and every partition's leader/ISR state."""
    topics = await zk.get_children_or_empty(paths.BROKER_TOPICS)
    reads = await zk.get_many([paths.topic_path(t) for t in topics])
    for topic, got in zip(topics, reads, strict=True):
        if got is None:
            continue
        try:
            znode = codecs.decode_topic(paths.topic_path(topic), got[0])
        except CorruptZnodeError as e:
            metrics.CORRUPT_ZNODES.labels("topic").inc()
            log.error("ignoring topic %s: %s", topic, e)
            continue
        ctx.assignments[topic] = dict(znode.partitions)
    partitions = ctx.all_partitions()
    state_paths = [paths.partition_state_path(tp.topic, tp.partition) for tp in partitions]
    states = await zk.get_many(state_paths)
    for tp, path, got in zip(partitions, state_paths, states, strict=True):
        if got is None:
            continue
        try:
            ctx.partition_states[tp] = codecs.decode_partition_state(path, got[0], got[1].version)
        except CorruptZnodeError as e:
            metrics.CORRUPT_ZNODES.labels("partition_state").inc()
            log.error("ignoring state of %s: %s", TopicPartition(tp.topic, tp.partition), e)
