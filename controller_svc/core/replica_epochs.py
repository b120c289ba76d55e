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
# broker -> topic -> digest of its cached metadata of the topic (common/metadata_digest.py)
MetadataDigests = Mapping[int, Mapping[str, bytes]]


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


def topics_lacking(
    topics: Iterable[str], controller_digests: Mapping[str, bytes], held: Mapping[str, bytes] | None
) -> frozenset[str]:
    """The failover's UpdateMetadata to one broker: the topics of `topics` whose cached metadata
    the broker did not report with the controller's own digest (`held` None: no report, every
    topic; a topic without a controller digest, e.g. one being deleted, is always sent).

    Why skipping the others changes nothing, by the argument above: the broker answered after
    adopting the new controller epoch, so its cache can since change only through this
    controller; the controller's digest is over the very fields its UpdateMetadata would carry
    for the topic, read from ZooKeeper under the new epoch; an UpdateMetadata replaces the
    cached state of each partition it carries and touches no other. Equal digests mean equal
    bytes, so the broker would replace each state with itself. What else an UpdateMetadata
    brings (the live brokers, the controller's id, endpoint and epoch) still reaches every
    broker, in an UpdateMetadata without those topics, before any LeaderAndIsr."""
    topics = list(topics)
    if held is None:
        return frozenset(topics)
    return frozenset(t for t in topics if (digest := controller_digests.get(t)) is None or held.get(t) != digest)
