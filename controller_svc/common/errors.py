"""Error codes (Kafka's numbers) and the exception tree of the project.

Foreign exceptions (aiozk, grpc) are translated into these at the adapters, so the
core only ever sees `ControllerError` subclasses (the httpcore `map_exceptions` idea).
"""

from __future__ import annotations

import enum
from typing import Self


class ErrorCode(enum.IntEnum):
    """Kafka protocol error codes used on the wire (org.apache.kafka.common.protocol.Errors)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    STALE_CONTROLLER_EPOCH = 11
    INVALID_TOPIC_EXCEPTION = 17
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_REQUEST = 42
    NOT_CONTROLLER = 41
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    TOPIC_ALREADY_EXISTS = 36
    INVALID_CONFIG = 40
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    KAFKA_STORAGE_ERROR = 56
    STALE_BROKER_EPOCH = 77
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    # The analysis service's queue is full (analytics/service.py).
    THROTTLING_QUOTA_EXCEEDED = 89
    INVALID_UPDATE_VERSION = 95

    @classmethod
    def name_of(cls, code: int) -> str:
        """The code's name for a message, or the number itself for a code this version does not
        know (a newer server's): a client prints what it got rather than failing on it."""
        try:
            return cls(code).name
        except ValueError:
            return str(code)


class ControllerError(Exception):
    """Base of every error this project raises on purpose."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: bool = False
    # Which op of a ZooKeeper multi this error answers (-1: no single op's answer). The ZooKeeper
    # adapter translates each failure once, into these types, and says where it happened; call
    # sites catch the error they mean (e.g. ZkNodeExistsError), never a wrapper to unwrap.
    op_index: int = -1

    def at_op(self, index: int) -> Self:
        self.op_index = index
        return self


class ControllerMovedError(ControllerError):
    """Another controller owns the epoch (KAFKA-6082): the only safe reaction is to resign."""

    code = ErrorCode.NOT_CONTROLLER


class NotControllerError(ControllerError):
    """A request that needs the active controller reached one that is not (or no longer) active."""

    code = ErrorCode.NOT_CONTROLLER

    def __init__(self, message: str = "this controller is not active", active_controller_id: int = -1):
        super().__init__(message)
        self.active_controller_id = active_controller_id


class ControllerEpochCorruptError(ControllerError):
    """/controller_epoch holds something that is not an integer: no election until it is repaired."""


class CorruptZnodeError(ControllerError):
    """A znode holds data that does not parse as the Kafka JSON it must be."""

    code = ErrorCode.INVALID_REQUEST

    def __init__(self, path: str, reason: str, version: int = -1):
        super().__init__(f"corrupt znode {path}: {reason}")
        self.path = path
        self.reason = reason
        self.version = version


class ZkUnavailableError(ControllerError):
    """The ZooKeeper session is gone or the request could not be completed; retry after reconnect."""

    retriable = True


class ZkUnimplementedError(ControllerError):
    """The ZooKeeper server does not have the operation (e.g. addWatch before 3.6)."""


class ZkNotAuthorizedError(ControllerError):
    """ZooKeeper refused the request (NoAuth, AuthFailed, InvalidACL): our digest credentials
    do not grant it. Not retriable: the credentials or the znode's ACL must change."""

    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class ZkNodeExistsError(ControllerError):
    def __init__(self, path: str):
        super().__init__(f"znode already exists: {path}")
        self.path = path


class ZkNoNodeError(ControllerError):
    def __init__(self, path: str):
        super().__init__(f"znode does not exist: {path}")
        self.path = path


class ZkBadVersionError(ControllerError):
    def __init__(self, path: str):
        super().__init__(f"bad version on {path}")
        self.path = path


class ZkNotEmptyError(ControllerError):
    """Delete of a znode that still has children (ZooKeeper's NotEmpty)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path} has children")
        self.path = path


class IllegalStateError(ControllerError):
    """A programming error in the controller (e.g. a new request batch while one is pending):
    Kafka resigns on it, and so do we."""
