"""What brokers already hold, reported at failover (DescribeReplicaEpochs), and the rule that
decides which LeaderAndIsr a new controller still has to send.

Kafka's onControllerFailover sends LeaderAndIsr for every replica although a broker ignores
one whose leader epoch it already holds (ReplicaManager.becomeLeaderOrFollower: a request
epoch not above the current one is refused per partition). A broker answers the question
only after adopting the new controller epoch, so no request of the previous controller is
applied after its answer; the partition states were read from ZooKeeper under the new epoch,
and no older controller can write them any more (its writes are fenced on /controller_epoch's
version). So a replica whose broker reports at least ZooKeeper's leader epoch would refuse
the LeaderAndIsr: skipping it changes nothing on the broker. Every other replica (absent,
behind, stopped, on a failed log dir, or on a broker that did not answer) gets it, exactly as
in Kafka, which is what repairs a broker that missed a request of the previous controller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

# broker -> topic -> partition -> leader epoch held
ReplicaEpochs = Mapping[int, Mapping[str, Mapping[int, int]]]


class TopicEpochs(Protocol):
    """One topic of a DescribeReplicaEpochsResponse."""

    @property
    def topic(self) -> str: ...

    @property
    def partitions(self) -> Iterable[int]: ...

    @property
    def leader_epochs(self) -> Iterable[int]: ...


def held_epochs(topics: Iterable[TopicEpochs]) -> dict[str, dict[int, int]]:
    return {t.topic: dict(zip(t.partitions, t.leader_epochs, strict=True)) for t in topics}


def already_held(reported: ReplicaEpochs, broker_id: int, topic: str, partition: int, leader_epoch: int) -> bool:
    """True when the broker reported holding this leader epoch (or a later one) for the
    partition: a LeaderAndIsr at `leader_epoch` would be refused, so it need not be sent."""
    held = reported.get(broker_id)
    return held is not None and held_in_topic(held.get(topic), partition, leader_epoch)


def held_in_topic(held: Mapping[int, int] | None, partition: int, leader_epoch: int) -> bool:
    """`already_held` for one broker's epochs of the partition's topic."""
    if held is None:
        return False
    epoch = held.get(partition)
    return epoch is not None and epoch >= leader_epoch
