"""Configuration with Kafka's key names, from a properties file, the environment and flags.

Precedence: defaults < file (`--config`) < environment (`KCONTROLLER_<KEY>` with dots as
underscores, e.g. KCONTROLLER_ZOOKEEPER_CONNECT) < `--override key=value` flags. Every value
is validated at start-up; a bad one raises `ConfigError` naming the key.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from controller_svc.common.zk_settings import parse_connect_string


class ConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Key:
    name: str
    kind: type
    default: Any
    doc: str
    check: Callable[[Any], str | None] | None = None
    secret: bool = False  # never printed: --check-config and error messages show <redacted>

    def shown(self, value: Any) -> str:
        return "<redacted>" if self.secret and value else repr(value)


def _positive(value: Any) -> str | None:
    return None if value > 0 else "must be > 0"


def _non_negative(value: Any) -> str | None:
    return None if value >= 0 else "must be >= 0"


def _host_port(value: Any) -> str | None:
    _host, colon, port = str(value).rpartition(":")
    if not colon or not port.isdigit() or int(port) > 65535:
        return "must be host:port (port 0 picks a free port)"
    return None


def _zk_connect(value: Any) -> str | None:
    try:
        parse_connect_string(str(value))
    except ValueError as e:
        return str(e)
    return None


COMMON_KEYS: tuple[Key, ...] = (
    Key(
        "zookeeper.connect",
        str,
        "127.0.0.1:2181",
        "ZooKeeper connect string, host:port[,host:port][/chroot]",
        _zk_connect,
    ),
    Key("zookeeper.session.timeout.ms", int, 18000, "ZooKeeper session timeout", _positive),
    Key("zookeeper.connection.timeout.ms", int, 18000, "How long start-up waits for a first session", _positive),
    Key(
        "zookeeper.max.in.flight.requests",
        int,
        100,
        "Pipelined ZooKeeper requests in flight per session (Kafka's default is 10; loading metadata is "
        "faster with more)",
        _positive,
    ),
    Key("state.change.log.dir", str, "", "Directory of <node>.state-change.jsonl (empty: no file)"),
    Key(
        "state.change.log.alive.interval.ms",
        int,
        500,
        "How often the process writes node.alive to its state-change log: the analysis counts a lost "
        "process's detection time from its last record, so this bounds that figure's error",
        _positive,
    ),
    Key("grpc.listen", str, "127.0.0.1:0", "gRPC listen address host:port", _host_port),
    Key("grpc.advertised.host", str, "", "Host to advertise for the gRPC endpoint (default: listen host)"),
    Key("metrics.listen", str, "127.0.0.1:0", "Prometheus /metrics address host:port", _host_port),
    Key(
        "zookeeper.set.acl",
        bool,
        False,
        "Create our znodes with a secure ACL (Kafka's zookeeper.set.acl): anyone reads, only the "
        "zookeeper.auth.user identity changes them",
    ),
    Key("zookeeper.auth.user", str, "", "ZooKeeper digest user this process authenticates as (empty: none)"),
    Key(
        "zookeeper.auth.password",
        str,
        "",
        "ZooKeeper digest password (better: KCONTROLLER_ZOOKEEPER_AUTH_PASSWORD or zookeeper.auth.password.file)",
        secret=True,
    ),
    Key("zookeeper.auth.password.file", str, "", "File holding the ZooKeeper digest password"),
    Key("grpc.tls.enable", bool, False, "Mutual TLS on the gRPC server and on this process' gRPC clients"),
    Key("grpc.tls.ca.file", str, "", "PEM CA bundle that signs every node's and client's certificate"),
    Key("grpc.tls.cert.file", str, "", "PEM certificate of this process (its identity: CN and DNS names)"),
    Key("grpc.tls.key.file", str, "", "PEM private key of this process (read from the file, never logged)"),
    Key(
        "log.format",
        str,
        "plain",
        "Process log format: plain or json",
        lambda v: None if v in ("plain", "json") else "must be plain or json",
    ),
    Key(
        "log.level",
        str,
        "INFO",
        "Process log level",
        lambda v: None if v.upper() in ("DEBUG", "INFO", "WARNING", "ERROR") else "must be a log level",
    ),
)

CONTROLLER_KEYS: tuple[Key, ...] = (
    Key("controller.id", int, 1, "Id of this controller (written into /controller)", _non_negative),
    Key("controller.socket.timeout.ms", int, 30000, "Timeout of one control request to a broker", _positive),
    Key("controller.retry.backoff.ms", int, 100, "Wait before resending a failed control request", _positive),
    Key(
        "unclean.leader.election.enable",
        bool,
        False,
        "Elect a leader outside the ISR when no ISR member is live (data loss); per topic in /config/topics/<t>",
    ),
    Key("delete.topic.enable", bool, True, "Topic deletion; false removes deletion requests and keeps the topic"),
    Key("auto.leader.rebalance.enable", bool, True, "Move leadership back to preferred replicas periodically"),
    Key(
        "leader.imbalance.per.broker.percentage",
        int,
        10,
        "Imbalance (share of a broker's preferred partitions it does not lead) that triggers a rebalance",
        lambda v: None if 0 <= v <= 100 else "must be between 0 and 100",
    ),
    Key("leader.imbalance.check.interval.seconds", int, 300, "Interval of the automatic rebalance check", _positive),
    Key(
        "failover.replica.epochs.enable",
        bool,
        True,
        "At failover, send LeaderAndIsr only for replicas whose broker reports an older leader epoch (false: "
        "every replica, as Kafka does)",
    ),
    Key(
        "failover.replica.epochs.timeout.ms",
        int,
        3000,
        "How long a failover waits for a broker's leader epochs before sending it every LeaderAndIsr",
        _positive,
    ),
    Key(
        "failover.metadata.digests.enable",
        bool,
        True,
        "With failover.replica.epochs.enable: at failover, send a broker the UpdateMetadata of only the topics "
        "whose cached metadata differs from the controller's (false: every partition to every broker, as Kafka "
        "does)",
    ),
    Key(
        "controller.standby.warm.enable",
        bool,
        True,
        "While standing by, keep the topics, partition states and topic configs current (ZooKeeper 3.6+ "
        "persistent watches) and take them over at failover after verifying them (false: load cold)",
    ),
    Key(
        "controller.standby.refresh.interval.ms",
        int,
        100,
        "How long a standby gathers changes before re-reading the znodes they touched",
        _positive,
    ),
    Key(
        "controller.election.retry.ms",
        int,
        2000,
        "Retry interval of an election refused for a corrupt /controller_epoch",
        _positive,
    ),
    Key(
        "controller.admin.identities",
        str,
        "",
        "With TLS: certificate identities allowed to call the admin RPCs (comma-separated; empty: any the CA signed)",
    ),
    Key(
        "controller.broker.identities",
        str,
        "",
        "With TLS: certificate identities allowed to call ControlledShutdown (brokers; empty: any the CA signed)",
    ),
    Key(
        "debug.failover.hold.loop.ms",
        int,
        0,
        "Fault injection (tests): after the failover's metadata load, compute this long without yielding, "
        "as a failover over a very large cluster does (0: off)",
        _non_negative,
    ),
    Key(
        "debug.self.stop.dir",
        str,
        "",
        "Fault injection (tests): a directory where the file <node>.before-fenced-write or <node>.before-send "
        "makes this controller SIGSTOP itself at that point, once (empty: off)",
    ),
    *COMMON_KEYS,
)

BROKER_KEYS: tuple[Key, ...] = (
    Key("broker.id", int, 1, "Id of this broker (/brokers/ids/<id>)", _non_negative),
    Key("broker.rack", str, "", "Rack of this broker (empty: none)"),
    Key("controlled.shutdown.enable", bool, True, "On SIGTERM, move leaderships away before exiting"),
    Key("controlled.shutdown.max.retries", int, 3, "ControlledShutdown attempts before giving up", _non_negative),
    Key("controlled.shutdown.retry.backoff.ms", int, 5000, "Wait between ControlledShutdown attempts", _non_negative),
    Key(
        "controlled.shutdown.timeout.ms",
        int,
        30000,
        "Grace period of the whole controlled shutdown; the broker deregisters and exits after it",
        _positive,
    ),
    Key(
        "replica.catchup.delay.ms",
        int,
        1000,
        "How long a live follower takes to catch up and rejoin the ISR of a partition this broker leads",
        _non_negative,
    ),
    Key(
        "log.dirs",
        str,
        "data-0,data-1",
        "Comma-separated log dir names of a broker stub (no data is stored)",
        lambda v: None if any(d.strip() for d in v.split(",")) else "must name at least one log dir",
    ),
    Key(
        "broker.registration.wait.ms",
        int,
        60000,
        "How long a restarted broker waits for its previous registration to expire",
        _positive,
    ),
    Key(
        "broker.controller.identities",
        str,
        "",
        "With TLS: certificate identities allowed to call this broker's control RPCs (comma-separated; empty: any "
        "the CA signed)",
    ),
    *COMMON_KEYS,
)


def _convert(key: Key, raw: Any) -> Any:
    if isinstance(raw, key.kind) and not (key.kind is int and isinstance(raw, bool)):
        return raw
    text = str(raw).strip()
    if key.kind is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"config {key.name}={raw!r}: must be an integer") from None
    if key.kind is bool:
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ConfigError(f"config {key.name}={raw!r}: must be true or false")
    return text


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Java .properties subset: key=value or key: value, # and ! comments."""
    result: dict[str, str] = {}
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path} is not UTF-8 text") from e
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        sep = min((i for i in (stripped.find("="), stripped.find(":")) if i > 0), default=-1)
        if sep < 0:
            raise ConfigError(f"{path}:{number}: expected key=value, got {stripped!r}")
        result[stripped[:sep].strip()] = stripped[sep + 1 :].strip()
    return result


@dataclass(frozen=True)
class Config:
    values: Mapping[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def int(self, key: str) -> int:
        return int(self.values[key])

    def str(self, key: str) -> str:
        return str(self.values[key])


def load(
    keys: tuple[Key, ...],
    file: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    schema = {k.name: k for k in keys}
    raw: dict[str, Any] = {}
    if file:
        for name, value in read_properties(file).items():
            if name not in schema:
                raise ConfigError(f"unknown config {name!r} in {file}")
            raw[name] = value
    env = os.environ if environ is None else environ
    for name in schema:
        env_name = "KCONTROLLER_" + name.upper().replace(".", "_")
        if env_name in env:
            raw[name] = env[env_name]
    for name, value in (overrides or {}).items():
        if name not in schema:
            raise ConfigError(f"unknown config {name!r}")
        raw[name] = value
    values: dict[str, Any] = {}
    for name, key in schema.items():
        value = _convert(key, raw[name]) if name in raw else key.default
        if key.check is not None:
            problem = key.check(value)
            if problem:
                raise ConfigError(f"config {name}={key.shown(value)}: {problem}")
        values[name] = value
    return Config(values)


def describe(keys: tuple[Key, ...]) -> str:
    return "\n".join(f"  {k.name} (default {k.default!r}): {k.doc}" for k in keys)


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in items or []:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise ConfigError(f"--override {item!r}: expected key=value")
        result[name.strip()] = value.strip()
    return result
