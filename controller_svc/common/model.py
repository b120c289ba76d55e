"""Typed, immutable metadata shared by the controller core, the adapters and the broker stub."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from controller_svc.common.errors import CorruptZnodeError

NO_LEADER = -1
# UpdateMetadata marks the partitions of a topic being deleted with this leader (LeaderAndIsr.LeaderDuringDelete).
LEADER_DURING_DELETE = -2
# A controller epoch of 0 means "none yet": the first elected controller gets epoch 1.
INITIAL_CONTROLLER_EPOCH = 0


class TopicPartition(NamedTuple):
    """Immutable and ordered like a frozen dataclass, but hashed, compared and sorted by
    CPython's tuple code: the controller keys dicts of 100k-1M entries with it, and a
    dataclass's generated __hash__/__eq__/__lt__ run as Python code (profiled: most of the
    failover's CPU at 100k partitions)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


_ENDPOINT_RE = re.compile(r"^(?P<listener>[A-Za-z0-9_\-.]+)://(?P<host>\[[^\]]*\]|[^:]*):(?P<port>-?\d+)$")


@dataclass(frozen=True, slots=True)
class EndPoint:
    listener: str
    host: str
    port: int
    security_protocol: str

    def connection_string(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"

    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @staticmethod
    def parse(path: str, text: str, protocol_map: dict[str, str]) -> EndPoint:
        match = _ENDPOINT_RE.match(text)
        if match is None:
            raise CorruptZnodeError(path, f"endpoint {text!r} is not LISTENER://host:port")
        listener = match["listener"]
        host = match["host"].strip("[]")
        return EndPoint(listener, host, int(match["port"]), str(protocol_map.get(listener, listener)))


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A registered broker: its endpoints and its epoch (czxid of its registration, KIP-380)."""

    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None
    epoch: int

    def control_endpoint(self) -> EndPoint | None:
        """The listener the controller talks to: PLAINTEXT (or SSL) first, like Kafka's controller listener."""
        for protocol in ("PLAINTEXT", "SSL"):
            for endpoint in self.endpoints:
                if endpoint.security_protocol == protocol:
                    return endpoint
        return self.endpoints[0] if self.endpoints else None


class LeaderIsrAndControllerEpoch(NamedTuple):
    """Contents of /brokers/topics/<t>/partitions/<p>/state, plus its zkVersion. A NamedTuple
    like TopicPartition: built two or three times per partition by every election (and 100k
    times by a cold failover's load), where a frozen dataclass's __init__ runs as Python code."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    controller_epoch: int


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """A partition's replicas in assignment order, with the KIP-455 reassignment sets."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """RAR: the replicas once the reassignment completes."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def origin_replicas(self) -> tuple[int, ...]:
        """OAR: the replicas before the reassignment started."""
        return tuple(r for r in self.replicas if r not in self.adding)


class PartitionAndReplica(NamedTuple):
    """A NamedTuple for the same reason as TopicPartition (300k of them at 100k partitions)."""

    tp: TopicPartition
    replica: int

    def __str__(self) -> str:
        return f"[{self.tp},{self.replica}]"
