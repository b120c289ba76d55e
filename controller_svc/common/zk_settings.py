"""ZooKeeper connection settings shared by every process: the connect string and digest
credentials, parsed and checked before any session is opened (so a bad value is a
configuration error, not a connection failure)."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any


def parse_connect_string(connect: str) -> tuple[str, str | None]:
    """Split Kafka's `host:port,host:port/chroot` into (servers, chroot)."""
    connect = connect.strip()
    if not connect:
        raise ValueError("zookeeper.connect is empty")
    servers, slash, chroot = connect.partition("/")
    if not servers:
        raise ValueError(f"zookeeper.connect {connect!r} has no servers")
    for server in servers.split(","):
        host, colon, port = server.rpartition(":")
        if not colon or not host or not port.isdigit():
            raise ValueError(f"zookeeper.connect entry {server!r} is not host:port")
    return servers, ("/" + chroot.strip("/")) if slash and chroot.strip("/") else None


@dataclass(frozen=True, slots=True)
class ZkDigestAuth:
    """ZooKeeper digest credentials (`addauth digest user:password`), sent first on every
    connection of the session, and the ACL our znodes get with `zookeeper.set.acl` (Kafka's
    secure ACLs: anyone may read, only this identity may change them)."""

    user: str
    password: str

    def __repr__(self) -> str:
        return f"ZkDigestAuth(user={self.user!r}, password=<redacted>)"

    @property
    def digest_id(self) -> str:
        # ZooKeeper's DigestAuthenticationProvider: user:base64(sha1(user:password)).
        raw = hashlib.sha1(f"{self.user}:{self.password}".encode()).digest()
        return f"{self.user}:{base64.b64encode(raw).decode()}"


def digest_auth_from_config(values: Any) -> tuple[ZkDigestAuth | None, bool]:
    """(credentials, set_acl) from zookeeper.auth.* and zookeeper.set.acl; ValueError naming the key."""
    user = str(values.get("zookeeper.auth.user", "") or "")
    password = str(values.get("zookeeper.auth.password", "") or "")
    password_file = str(values.get("zookeeper.auth.password.file", "") or "")
    if password_file:
        try:
            with open(password_file, encoding="utf-8") as f:
                password = f.read().strip()
        except OSError as e:
            raise ValueError(f"zookeeper.auth.password.file={password_file!r}: {e.strerror}") from None
    set_acl = bool(values.get("zookeeper.set.acl", False))
    if not user:
        if set_acl:
            raise ValueError("zookeeper.set.acl is true but zookeeper.auth.user is empty")
        return None, False
    if not password:
        raise ValueError(
            "zookeeper.auth.user is set but there is no password "
            "(zookeeper.auth.password, KCONTROLLER_ZOOKEEPER_AUTH_PASSWORD or zookeeper.auth.password.file)"
        )
    return ZkDigestAuth(user, password), set_acl
