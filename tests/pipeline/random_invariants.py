"""Random histories that break every invariant of contract 6 now and then, in two clusters whose
nodes have the same names: elections going back and forth in epoch, requests sent and received
under epochs several controllers claim, brokers applying stale epochs, role changes at, below
and above their partitions' epochs with deletions, stops and broker restarts in between, and
elections from previous ISRs with and without their leader. Records often share a millisecond,
and some nodes are named so that Spark reads no id from them (neither a controller's nor a
broker's). What test_invariant_files.py compares Spark's checks with the files' on."""

from __future__ import annotations

import pathlib
import random

from controller_svc.analytics import schema
from controller_svc.analytics.synthetic import HistoryWriter
from tests.pipeline import scenarios

# As named in the logs; the x nodes are neither controllers nor brokers to the checks, though a
# request one receives still names its sender's claim to an epoch.
CONTROLLERS = ("controller-1", "controller-2", "controller-x")
BROKERS = ("broker-1", "broker-2", "broker-04", "broker-4", "broker-x")
TOPICS = ("a", "b")
PARTITIONS = 2
ROLES = ("leader", "follower", "follower", "stopped", "deleted")


def one_cluster(out: HistoryWriter, rng: random.Random, steps: int, brokers: tuple[str, ...]) -> None:
    ts = 1_000
    epoch = 1
    leader_epochs: dict[tuple[str, str, int], int] = {}
    for _ in range(steps):
        ts += rng.choice((0, 0, 1, 5))
        action = rng.random()
        if action < 0.08:
            controller = rng.choice(CONTROLLERS[:2])
            epoch = max(1, epoch + rng.choice((-1, 0, 1, 1, 1)))
            out.record(ts, controller, "controller.elected", controller_id=int(controller[-1]), controller_epoch=epoch)
        elif action < 0.25:
            out.record(
                ts,
                rng.choice(CONTROLLERS),
                "request.sent",
                broker=rng.randrange(1, 5),
                api=rng.choice(schema.CONTROL_APIS[:3]),
                correlation_id=rng.randrange(1000),
                controller_epoch=max(0, epoch + rng.choice((-1, 0, 0, 0))),
            )
        elif action < 0.45:
            applied = rng.random() < 0.8
            out.record(
                ts,
                rng.choice(brokers),
                "request.received",
                api=rng.choice(schema.CONTROL_APIS[:3]),
                controller_id=rng.choice((1, 1, 2, 3)),
                controller_epoch=max(0, epoch + rng.choice((-1, 0, 0, 0))),
                broker_epoch=7,
                correlation_id=rng.randrange(1000),
                result="applied" if applied else "rejected",
                error=0 if applied else 11,
            )
        elif action < 0.8:
            node = rng.choice(brokers)
            topic, partition = rng.choice(TOPICS), rng.randrange(PARTITIONS)
            key = (node, topic, partition)
            role = rng.choice(ROLES)
            applied_epoch = max(0, leader_epochs.get(key, 0) + rng.choice((-1, 0, 0, 1, 1, 2)))
            leader_epochs[key] = 0 if role == "deleted" else max(applied_epoch, leader_epochs.get(key, 0))
            out.record(
                ts,
                node,
                "partition.role_changed",
                topic=topic,
                partition=partition,
                role=role,
                leader=rng.randrange(1, 5),
                leader_epoch=-2 if role == "deleted" else applied_epoch,
                isr=[],
                controller_epoch=epoch,
            )
        elif action < 0.87:
            node = rng.choice(brokers)
            out.record(ts, node, "broker.started", broker_id=rng.randrange(1, 5))
        else:
            leader = rng.choice((-1, 1, 2, 3, 4))
            scenarios._elected(
                out,
                ts,
                rng.choice(CONTROLLERS),
                epoch,
                rng.choice(TOPICS),
                rng.randrange(PARTITIONS),
                leader,
                rng.randrange(5),
                [max(leader, 1)],
                rng.sample((1, 2, 3, 4), rng.randrange(4)),
                rng.choice(("offline", "reassign", "preferred", "controlled_shutdown", "new")),
                unclean=rng.random() < 0.2,
            )


def history(directory: pathlib.Path, seed: int, steps: int = 600) -> None:
    """Two clusters, `east` and `west`, under `directory`. Their brokers overlap in one name,
    the last of east's in name order and the first of west's: sorted by cluster and node, that
    node's records in the two clusters are next to each other."""
    rng = random.Random(seed)
    east, west = ("broker-04", "broker-1", "broker-2"), ("broker-2", "broker-4", "broker-x")
    assert max(east) == min(west) and set(east) | set(west) == set(BROKERS)
    for name, brokers in (("east", east), ("west", west)):
        out = HistoryWriter(directory / name)
        one_cluster(out, rng, steps, brokers)
        out.close()
