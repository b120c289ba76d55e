"""Byte-compatible JSON codecs for Kafka 2.x znodes (kafka.zk.ZkData).

Decoders raise `CorruptZnodeError` with the path and a reason; they never return
half-parsed data. Encoders produce exactly the field order and types Kafka writes
(e.g. timestamps as strings), so Kafka's own ZooKeeper-mode tools read our data.
"""

from __future__ import annotations

import itertools
import json
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from controller_svc.common.errors import CorruptZnodeError
from controller_svc.common.model import BrokerInfo, EndPoint, LeaderIsrAndControllerEpoch, TopicPartition

# --- helpers ---------------------------------------------------------------------------------


def _dumps(obj: Any) -> bytes:
    # Kafka's Json.encodeAsBytes: compact separators, no spaces.
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _loads_object(path: str, data: bytes | None) -> dict[str, Any]:
    if not data:
        raise CorruptZnodeError(path, "empty data")
    try:
        # orjson: the failover load decodes one document per partition.
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise CorruptZnodeError(path, f"not JSON ({e})") from e
    if not isinstance(obj, dict):
        raise CorruptZnodeError(path, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _int_field(path: str, obj: dict[str, Any], key: str) -> int:
    value = obj.get(key)
    # bool is an int subclass in Python; Kafka's JSON would never hold one here.
    if isinstance(value, bool) or not isinstance(value, int):
        raise CorruptZnodeError(path, f"field {key!r} must be an integer, got {value!r}")
    return value


def _int_list(path: str, value: Any, what: str) -> tuple[int, ...]:
    if type(value) is not list or not all(type(v) is int for v in value):
        raise CorruptZnodeError(path, f"{what} must be a list of integers, got {value!r}")
    return tuple(value)


# --- /controller ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ControllerZnode:
    broker_id: int
    timestamp_ms: int


def encode_controller(controller_id: int, timestamp_ms: int) -> bytes:
    return _dumps({"version": 1, "brokerid": controller_id, "timestamp": str(timestamp_ms)})


def decode_controller(data: bytes | None, path: str = "/controller") -> ControllerZnode:
    obj = _loads_object(path, data)
    broker_id = _int_field(path, obj, "brokerid")
    raw_ts = obj.get("timestamp", "0")
    try:
        timestamp = int(raw_ts)
    except (TypeError, ValueError) as e:
        raise CorruptZnodeError(path, f"timestamp {raw_ts!r} is not a number") from e
    return ControllerZnode(broker_id=broker_id, timestamp_ms=timestamp)


# --- /controller_epoch --------------------------------------------------------------------


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("utf-8")


def decode_controller_epoch(data: bytes | None, path: str = "/controller_epoch") -> int:
    text = (data or b"").decode("utf-8", errors="replace").strip()
    try:
        epoch = int(text)
    except ValueError as e:
        raise CorruptZnodeError(path, f"{text!r} is not an integer") from e
    if epoch < 0:
        raise CorruptZnodeError(path, f"negative epoch {epoch}")
    return epoch


# --- /brokers/ids/<id> --------------------------------------------------------------------


def encode_broker_registration(info: BrokerInfo, timestamp_ms: int, jmx_port: int = -1) -> bytes:
    """Version 5 of the broker registration (BrokerIdZNode.encode), features empty."""
    plaintext = next((e for e in info.endpoints if e.security_protocol == "PLAINTEXT"), None)
    # Field order of the reference (BrokerIdZNode.encode, version 5).
    obj: dict[str, Any] = {
        "version": 5,
        "host": plaintext.host if plaintext else None,
        "port": plaintext.port if plaintext else -1,
        "jmx_port": jmx_port,
        "timestamp": str(timestamp_ms),
        "endpoints": [e.connection_string() for e in info.endpoints],
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in info.endpoints},
        "rack": info.rack,
        "features": {},
    }
    return _dumps(obj)


def decode_broker_registration(broker_id: int, data: bytes | None, broker_epoch: int) -> BrokerInfo:
    """Reads versions 1-5 (BrokerIdZNode.decode)."""
    path = f"/brokers/ids/{broker_id}"
    obj = _loads_object(path, data)
    version = _int_field(path, obj, "version")
    endpoints: list[EndPoint] = []
    if version >= 2 and "endpoints" in obj:
        raw_endpoints = obj["endpoints"]
        if not isinstance(raw_endpoints, list):
            raise CorruptZnodeError(path, "endpoints must be a list")
        protocol_map = obj.get("listener_security_protocol_map") or {}
        if not isinstance(protocol_map, dict):
            raise CorruptZnodeError(path, "listener_security_protocol_map must be an object")
        for raw in raw_endpoints:
            endpoints.append(EndPoint.parse(path, str(raw), protocol_map))
    else:
        host = obj.get("host")
        port = obj.get("port")
        if not isinstance(host, str) or not isinstance(port, int):
            raise CorruptZnodeError(path, "version 1 registration needs host and port")
        endpoints.append(EndPoint("PLAINTEXT", host, port, "PLAINTEXT"))
    rack = obj.get("rack")
    if rack is not None and not isinstance(rack, str):
        raise CorruptZnodeError(path, "rack must be a string or null")
    return BrokerInfo(broker_id=broker_id, endpoints=tuple(endpoints), rack=rack, epoch=broker_epoch)


# --- /brokers/topics/<t>/partitions/<p>/state ---------------------------------------------


# Kafka's Json.encodeAsBytes of the state znode: compact, keys in this order.
_PARTITION_STATE_JSON = b'{"controller_epoch":%d,"leader":%d,"version":1,"leader_epoch":%d,"isr":%b}'


def encode_partition_state(state: LeaderIsrAndControllerEpoch) -> bytes:
    """Byte for byte what Kafka writes. One call per state written, on the controller's loop
    (10k at a controlled shutdown of a broker leading 10k): the integers formatted into the
    layout and the ISR (a tuple of ints) through orjson take about a fifth of the time of
    orjson encoding a dict of the fields (`bench/results/encoding.json`), time that competed
    with ZooKeeper's own writes for the cores."""
    return _PARTITION_STATE_JSON % (state.controller_epoch, state.leader, state.leader_epoch, orjson.dumps(state.isr))


def decode_partition_state(path: str, data: bytes | None, zk_version: int) -> LeaderIsrAndControllerEpoch:
    # Hot path at failover (one call per partition): plain type checks, no generators.
    obj = _loads_object(path, data)
    leader = obj.get("leader")
    leader_epoch = obj.get("leader_epoch")
    controller_epoch = obj.get("controller_epoch")
    isr = obj.get("isr")
    if (
        type(leader) is int
        and type(leader_epoch) is int
        and type(controller_epoch) is int
        and type(isr) is list
        and all(type(r) is int for r in isr)
    ):
        return LeaderIsrAndControllerEpoch(leader, leader_epoch, tuple(isr), zk_version, controller_epoch)
    return LeaderIsrAndControllerEpoch(
        leader=_int_field(path, obj, "leader"),
        leader_epoch=_int_field(path, obj, "leader_epoch"),
        isr=_int_list(path, isr, "isr"),
        zk_version=zk_version,
        controller_epoch=_int_field(path, obj, "controller_epoch"),
    )


_STATE_FIELDS = operator.itemgetter("leader", "leader_epoch", "isr", "controller_epoch")
_INT = {int}
_LIST = {list}


def decode_partition_states(
    datas: Sequence[bytes], zk_versions: Sequence[int]
) -> list[LeaderIsrAndControllerEpoch] | None:
    """Many state znodes at once, as decode_partition_state decodes each, or None when any of
    them is not a well-formed state (the caller then decodes them one by one, for the error).

    A cold failover decodes one per partition (100k-1M): each document is parsed on its own
    (never joined into one array, where a corrupt document could shift its neighbours), and
    the fields are picked, type-checked and assembled a column at a time in C loops: about
    0.7 us a state against 1.2 us for one call per state (a 1000-state batch, one core)."""
    try:
        rows = list(map(_STATE_FIELDS, map(orjson.loads, datas)))
    except (orjson.JSONDecodeError, KeyError, TypeError, IndexError):
        return None
    if not rows:
        return []
    leaders, leader_epochs, isrs, controller_epochs = zip(*rows, strict=True)
    if not (
        set(map(type, leaders)) == _INT
        and set(map(type, leader_epochs)) == _INT
        and set(map(type, controller_epochs)) == _INT
        and set(map(type, isrs)) == _LIST
        and set(map(type, itertools.chain.from_iterable(isrs))) <= _INT
    ):
        return None
    return list(
        map(
            tuple.__new__,
            itertools.repeat(LeaderIsrAndControllerEpoch),
            zip(leaders, leader_epochs, map(tuple, isrs), zk_versions, controller_epochs, strict=True),
        )
    )


# --- /brokers/topics/<t> ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicZnode:
    partitions: dict[int, tuple[int, ...]]
    adding_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)
    topic_id: str | None = None


def _partition_map(path: str, raw: Any, what: str) -> dict[int, tuple[int, ...]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise CorruptZnodeError(path, f"{what} must be an object")
    fast = _partition_map_fast(raw)
    if fast is not None:
        return fast
    result: dict[int, tuple[int, ...]] = {}
    for key, replicas in raw.items():
        try:
            partition = int(key)
        except ValueError as e:
            raise CorruptZnodeError(path, f"partition id {key!r} is not a number") from e
        if partition < 0 or str(partition) != key:
            raise CorruptZnodeError(path, f"partition id {key!r} is not a non-negative integer")
        result[partition] = _int_list(path, replicas, f"{what}[{key}]")
    return result


def _partition_map_fast(raw: dict[str, Any]) -> dict[int, tuple[int, ...]] | None:
    """The partition map of a well-formed znode with a column's checks in C loops, or None (the
    caller's loop then finds the error). Equal replica lists share one tuple: a topic of 1000
    partitions on a few brokers has a few dozen distinct lists (a cold failover at 1M
    partitions decoded every list in a Python loop, and kept 1M tuples)."""
    keys = list(raw)
    try:
        ids = list(map(int, keys))
    except (ValueError, TypeError):
        return None
    # int() also reads " 1", "+1" and "1_0": only the canonical spelling is a partition id.
    if list(map(str, ids)) != keys or (ids and min(ids) < 0):
        return None
    lists = list(raw.values())
    if lists and (set(map(type, lists)) != _LIST or not set(map(type, itertools.chain.from_iterable(lists))) <= _INT):
        return None
    # Only ints are left, so tuple equality is exact (no 1 == True == 1.0 to merge).
    tuples = list(map(tuple, lists))
    shared = dict(zip(tuples, tuples, strict=True))
    return dict(zip(ids, map(shared.__getitem__, tuples), strict=True))


def decode_topic(path: str, data: bytes | None) -> TopicZnode:
    """Reads versions 1-3 of a topic znode (TopicZNode.decode)."""
    obj = _loads_object(path, data)
    partitions = _partition_map(path, obj.get("partitions"), "partitions")
    topic_id = obj.get("topic_id")
    return TopicZnode(
        partitions=partitions,
        adding_replicas=_partition_map(path, obj.get("adding_replicas"), "adding_replicas"),
        removing_replicas=_partition_map(path, obj.get("removing_replicas"), "removing_replicas"),
        topic_id=topic_id if isinstance(topic_id, str) else None,
    )


def encode_topic(znode: TopicZnode) -> bytes:
    obj: dict[str, Any] = {
        "version": 3 if znode.topic_id else 2,
        "partitions": {str(p): list(r) for p, r in sorted(znode.partitions.items())},
        "adding_replicas": {str(p): list(r) for p, r in sorted(znode.adding_replicas.items())},
        "removing_replicas": {str(p): list(r) for p, r in sorted(znode.removing_replicas.items())},
    }
    if znode.topic_id:
        obj["topic_id"] = znode.topic_id
    return _dumps(obj)


# --- our own: /kcontroller/controllers/<id> -----------------------------------------------


def decode_topic_config(path: str, data: bytes | None) -> dict[str, str]:
    """/config/topics/<t>: {"version":1,"config":{"unclean.leader.election.enable":"true"}}."""
    if not data:
        return {}
    config = _loads_object(path, data).get("config", {})
    if not isinstance(config, dict):
        raise CorruptZnodeError(path, "config must be an object")
    return {str(k): str(v) for k, v in config.items()}


def encode_controller_endpoint(controller_id: int, grpc_endpoint: str, metrics_endpoint: str) -> bytes:
    return _dumps({"version": 1, "id": controller_id, "grpc": grpc_endpoint, "metrics": metrics_endpoint})


def decode_controller_endpoint(path: str, data: bytes | None) -> str:
    obj = _loads_object(path, data)
    grpc_endpoint = obj.get("grpc")
    if not isinstance(grpc_endpoint, str) or ":" not in grpc_endpoint:
        raise CorruptZnodeError(path, f"grpc endpoint {grpc_endpoint!r} is not host:port")
    return grpc_endpoint


# --- admin requests and notifications ----------------------------------------------------------


def decode_reassignment_plan(data: bytes) -> tuple[list[tuple[TopicPartition, tuple[int, ...]]], list[str]]:
    """/admin/reassign_partitions: {"version":1,"partitions":[{"topic","partition","replicas"}]}.
    Returns the well-formed entries and a description of each malformed one."""
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return [], [f"not JSON: {e}"]
    entries = obj.get("partitions") if isinstance(obj, dict) else None
    if not isinstance(entries, list):
        return [], ["no 'partitions' list"]
    good: list[tuple[TopicPartition, tuple[int, ...]]] = []
    bad: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict):
            bad.append(f"entry {entry!r} is not an object")
            continue
        topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
        if (
            not isinstance(topic, str)
            or type(partition) is not int
            or not isinstance(replicas, list)
            or not all(type(r) is int for r in replicas)
        ):
            bad.append(f"entry {entry!r} needs a topic, an integer partition and a list of integer replicas")
            continue
        good.append((TopicPartition(topic, partition), tuple(replicas)))
    return good, bad


def encode_reassignment_plan(entries: dict[TopicPartition, tuple[int, ...]]) -> bytes:
    """/admin/reassign_partitions, as kafka-reassign-partitions --zookeeper writes it."""
    return _dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": tp.topic, "partition": tp.partition, "replicas": list(r)} for tp, r in sorted(entries.items())
            ],
        }
    )


def decode_preferred_election(path: str, data: bytes | None) -> list[TopicPartition]:
    """/admin/preferred_replica_election: {"version":1,"partitions":[{"topic","partition"}]}."""
    obj = _loads_object(path, data)
    entries = obj.get("partitions")
    if not isinstance(entries, list):
        raise CorruptZnodeError(path, "no 'partitions' list")
    partitions: list[TopicPartition] = []
    for entry in entries:
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("topic"), str)
            or type(entry.get("partition")) is not int
        ):
            raise CorruptZnodeError(path, f"bad entry {entry!r}")
        partitions.append(TopicPartition(entry["topic"], entry["partition"]))
    return partitions


def encode_topic_config(configs: dict[str, str]) -> bytes:
    """/config/topics/<t>: {"version":1,"config":{...}}."""
    return _dumps({"version": 1, "config": configs})


def decode_notification(data: bytes | None) -> dict[str, object] | None:
    """A notification znode's JSON object (ISR change, log-dir event, config change); None when
    it is not one."""
    try:
        obj = json.loads((data or b"").decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def encode_isr_change_notification(partitions: list[TopicPartition]) -> bytes:
    """/isr_change_notification/isr_change_<seq> (ReplicaManager.propagateIsrChanges)."""
    return _dumps({"version": 1, "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]})


def encode_log_dir_event(broker_id: int) -> bytes:
    """/log_dir_event_notification/log_dir_event_<seq> (LogDirFailureChannel; event 1: failure)."""
    return _dumps({"version": 1, "broker": broker_id, "event": 1})
