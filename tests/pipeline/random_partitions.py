"""Random histories of partitions changing leaders and losing them in every way the analysis
knows (a broker's death, bounce, failed log dir, the controller's leader -1), regained at, below
and above the losses' epochs, by the leader's own broker or another node, deleted and recreated,
with registrations before and after the losses, brokers with and without node.alive and names
Spark reads no id from: what test_offline_files.py and test_leadership_scan.py compare Spark's
tables with the files' on."""

from __future__ import annotations

import pathlib
import random

from controller_svc.analytics.synthetic import HistoryWriter
from tests.pipeline import scenarios

CONTROLLER = "controller-1"
# Broker nodes as named in the logs, and the id Spark reads from each (None: not a broker; two
# names for broker 4, both its signs of life).
BROKER_NODES = {"broker-1": 1, "broker-2": 2, "broker-3": 3, "broker-04": 4, "broker-4": 4, "broker-x": None}
TOPICS = ("a", "b")
PARTITIONS = 3


def one_cluster(out: HistoryWriter, rng: random.Random, steps: int) -> None:
    """One cluster's partitions changing leaders, losing them in every way, and deleted."""
    ts = 1_000
    ids = [broker for broker in BROKER_NODES.values() if broker is not None]
    epochs: dict[tuple[str, int], int] = {}
    for node in BROKER_NODES:
        if rng.random() < 0.7:
            out.record(ts, node, "broker.registered", broker_id=BROKER_NODES[node] or 9, broker_epoch=1)
    for _ in range(steps):
        # Several records in one millisecond now and then.
        ts += rng.choice((0, 1, 3, 10, 50))
        topic, partition = rng.choice(TOPICS), rng.randrange(PARTITIONS)
        key = (topic, partition)
        epoch = epochs.get(key, 0)
        action = rng.random()
        node = rng.choice(list(BROKER_NODES))
        if action < 0.25:
            epochs[key] = epoch = epoch + rng.choice((0, 1, 1, 2))
            leader = rng.choice(ids)
            strategy = rng.choice(("offline", "preferred", "reassign"))
            isr, previous = [leader], rng.sample(ids, rng.randrange(3))
            unclean = rng.random() < 0.1
            scenarios._elected(
                out, ts, CONTROLLER, 1, topic, partition, leader, epoch, isr, previous, strategy, unclean
            )
            # Applied by the leader's broker, mostly, at the election's epoch or another.
            applier = f"broker-{leader}" if leader != 4 else "broker-04"
            applier = applier if rng.random() < 0.8 else node
            applied_epoch = epoch + rng.choice((0, 0, 0, -1, 1))
            role(out, ts + rng.randrange(5), applier, topic, partition, "leader", leader, applied_epoch)
        elif action < 0.35:
            if rng.random() < 0.5:
                scenarios._offline(out, ts, CONTROLLER, 1, topic, partition, epoch, [], prev_leader=1)
            else:  # without its leader field: read as leader -1
                out.record(
                    ts,
                    CONTROLLER,
                    "partition.offline",
                    topic=topic,
                    partition=partition,
                    leader_epoch=epoch,
                    controller_epoch=1,
                )
        elif action < 0.5:
            lost = rng.sample([*ids, None] if rng.random() < 0.1 else ids, rng.randrange(1, 3))
            dead, bounced = (lost, []) if rng.random() < 0.5 else ([], lost)
            if rng.random() < 0.2:
                dead, bounced = lost, lost
            out.record(ts, CONTROLLER, "broker.change", new=[], dead=dead, bounced=bounced, controller_epoch=1)
        elif action < 0.58:
            out.record(ts, node, "broker.registered", broker_id=BROKER_NODES[node] or 9, broker_epoch=ts)
        elif action < 0.75:
            out.record(ts, node, "node.alive")
        elif action < 0.85:
            leader = BROKER_NODES[node] if rng.random() < 0.7 else rng.choice(ids)
            reason = rng.choice(("log_dir_failure", "log_dir_failure", "deletion"))
            role(out, ts, node, topic, partition, "stopped", leader or 1, epoch, reason)
        elif action < 0.9:
            out.record(ts, CONTROLLER, "topic.deleted", topic=topic, controller_epoch=1)
            for partition_number in range(PARTITIONS):
                epochs.pop((topic, partition_number), None)
        else:
            role(out, ts, node, topic, partition, "follower", rng.choice(ids), epoch)


def role(
    out: HistoryWriter,
    ts: int,
    node: str,
    topic: str,
    partition: int,
    role: str,
    leader: int,
    leader_epoch: int,
    reason: str | None = None,
) -> None:
    out.record(
        ts,
        node,
        "partition.role_changed",
        topic=topic,
        partition=partition,
        role=role,
        leader=leader,
        leader_epoch=leader_epoch,
        isr=[],
        controller_epoch=1,
        **({} if reason is None else {"reason": reason}),
    )


def history(directory: pathlib.Path, seed: int) -> None:
    rng = random.Random(seed)
    for name in ("east", "west"):
        out = HistoryWriter(directory / name)
        one_cluster(out, rng, 400)
        out.close()
