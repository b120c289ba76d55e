"""ZooKeeper's wire format for the requests that carry thousands of ops: multiRead and write
multis, encoded and decoded with `struct`.

aiozk renders and parses every field through its generic `Part` machinery, in Python, on the
session's thread: about 20 ms of CPU for a multi of 1000 setData and its reply (measured in
isolation), holding the GIL the controller's own thread needs; a 10k-partition controlled
shutdown writes ten of them. The encodings here are jute's, byte for byte; `tests/unit/test_zk_wire.py` pins
them against aiozk's own codecs.

Also the plain data of the wire the rest of the adapter shares: the multi's ops, their results
and the parts of a Stat the project uses.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from aiozk import exc as zk_exc
from aiozk import protocol
from aiozk.protocol.response import Response, response_xref


class ZnodeStat(NamedTuple):
    """The parts of a ZooKeeper Stat the project uses (a NamedTuple: cheap to build in bulk)."""

    version: int
    czxid: int
    mzxid: int
    ephemeral_owner: int
    num_children: int

    @staticmethod
    def of(stat: Any) -> ZnodeStat:
        return ZnodeStat(
            stat.version, stat.created_zxid, stat.last_modified_zxid, stat.ephemeral_owner, stat.num_children
        )


# --- multi-op operations ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckOp:
    path: str
    version: int


@dataclass(frozen=True, slots=True)
class CreateOp:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class SetDataOp:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class DeleteOp:
    path: str
    version: int = -1


ZkOp = CheckOp | CreateOp | SetDataOp | DeleteOp


@dataclass(frozen=True, slots=True)
class OpResult:
    """Result of one op of a successful multi: the created path and/or the new stat."""

    op: ZkOp
    path: str
    stat: ZnodeStat | None


_new_stat = ZnodeStat._make


# --- multiRead (ZooKeeper 3.6+, OpCode.multiRead = 22) -----------------------------------------
# Many getData ops in one request: one round trip, one future, and a parse done with `struct`
# instead of aiozk's generic Part parser. Loading 100k partition states is dominated by
# per-request client overhead, so this is what makes failover fast.

_MULTI_HEADER = struct.Struct("!i?i")
_INT = struct.Struct("!i")
_HEADER_XID_OP = struct.Struct("!ii")
# czxid, mzxid, ctime, mtime, version, cversion, aversion, ephemeralOwner, dataLength, numChildren, pzxid
_STAT = struct.Struct("!qqqqiiiqiiq")
_GET_DATA_OPCODE = 4
_ERROR_TYPE = -1
NO_NODE = -101
_UNIMPLEMENTED = -6
MULTI_READ_BATCH = 1000


class MultiReadRequest(protocol.TransactionRequest):  # type: ignore[misc]
    """getData ops only, serialized with `struct` (aiozk's generic renderer is the bottleneck)."""

    opcode = 22
    writes_data = False

    def __init__(self, paths: Sequence[str]) -> None:
        super().__init__()
        self.paths = paths

    def serialize(self, xid: int | None = None) -> bytes:
        parts = [_HEADER_XID_OP.pack(xid or 0, self.opcode)]
        op_header = _MULTI_HEADER.pack(_GET_DATA_OPCODE, False, -1)
        for path in self.paths:
            encoded = path.encode("utf-8")
            parts.append(op_header)
            parts.append(_INT.pack(len(encoded)))
            parts.append(encoded)
            parts.append(b"\x00")  # watch = false
        parts.append(_MULTI_HEADER.pack(-1, True, -1))
        return b"".join(parts)

    def __str__(self) -> str:
        return f"MultiRead[{len(self.paths)} znodes]"


class MultiReadResponse(Response):  # type: ignore[misc]
    """Registered in aiozk's response table for opcode 22 by its metaclass."""

    opcode = 22

    def __init__(self, results: list[tuple[bytes, ZnodeStat] | int]) -> None:
        self.results = results

    @classmethod
    def deserialize(cls, raw: bytes) -> MultiReadResponse:
        results: list[tuple[bytes, ZnodeStat] | int] = []
        offset = 0
        while True:
            op_type, done, _err = _MULTI_HEADER.unpack_from(raw, offset)
            offset += _MULTI_HEADER.size
            if done:
                break
            if op_type == _ERROR_TYPE:
                results.append(_INT.unpack_from(raw, offset)[0])
                offset += _INT.size
            elif op_type == _GET_DATA_OPCODE:
                length = _INT.unpack_from(raw, offset)[0]
                offset += _INT.size
                data = bytes(raw[offset : offset + length]) if length > 0 else b""
                offset += max(length, 0)
                czxid, mzxid, _c, _m, version, _cv, _av, owner, _len, children, _p = _STAT.unpack_from(raw, offset)
                offset += _STAT.size
                results.append((data, _new_stat((version, czxid, mzxid, owner, children))))
            else:
                raise ValueError(f"unexpected op type {op_type} in a multiRead response")
        return cls(results)


# --- write multis (OpCode.multi = 14) ----------------------------------------------------------
# check, create2, setData and delete ops, as ZkClient.multi sends them. The reply class is
# registered for opcode 14 in aiozk's response table (its metaclass does that), so it parses
# every multi reply of the process; an op type it has no fast path for is parsed by aiozk's
# class for that op, as before.

_MULTI_OPCODE = 14
_CHECK_OPCODE = 13
_CREATE2_OPCODE = 15
_SET_DATA_OPCODE = 5
_DELETE_OPCODE = 2
_EPHEMERAL_FLAG = 1
_SEQUENTIAL_FLAG = 2
_INT_INT = struct.Struct("!ii")


def _string(value: str) -> bytes:
    encoded = value.encode("utf-8")
    return _INT.pack(len(encoded)) + encoded


def encode_acl(acl: Sequence[Any]) -> bytes:
    """A jute vector<ACL> from aiozk ACL parts (perms, then the id's scheme and id)."""
    return _INT.pack(len(acl)) + b"".join(
        _INT.pack(entry.perms) + _string(entry.id.scheme) + _string(entry.id.id) for entry in acl
    )


class WriteMultiRequest(protocol.TransactionRequest):  # type: ignore[misc]
    """A multi of `ops` on `full_paths` (the ops' paths with the chroot); creates get `acl`."""

    opcode = _MULTI_OPCODE
    writes_data = True

    def __init__(self, ops: Sequence[ZkOp], full_paths: Sequence[str], acl: Sequence[Any]) -> None:
        super().__init__()
        self.ops = ops
        self.full_paths = full_paths
        self.acl = acl

    def serialize(self, xid: int | None = None) -> bytes:
        parts = [_HEADER_XID_OP.pack(xid or 0, self.opcode)]
        append = parts.append
        acl: bytes | None = None
        for op, path in zip(self.ops, self.full_paths, strict=True):
            encoded = path.encode("utf-8")
            if isinstance(op, SetDataOp):
                append(_MULTI_HEADER.pack(_SET_DATA_OPCODE, False, -1))
                append(_INT.pack(len(encoded)))
                append(encoded)
                append(_INT.pack(len(op.data)))
                append(op.data)
                append(_INT.pack(op.version))
            elif isinstance(op, CheckOp):
                append(_MULTI_HEADER.pack(_CHECK_OPCODE, False, -1))
                append(_INT.pack(len(encoded)))
                append(encoded)
                append(_INT.pack(op.version))
            elif isinstance(op, CreateOp):
                if acl is None:
                    acl = encode_acl(self.acl)
                flags = (_EPHEMERAL_FLAG if op.ephemeral else 0) | (_SEQUENTIAL_FLAG if op.sequential else 0)
                append(_MULTI_HEADER.pack(_CREATE2_OPCODE, False, -1))
                append(_INT.pack(len(encoded)))
                append(encoded)
                append(_INT.pack(len(op.data)))
                append(op.data)
                append(acl)
                append(_INT.pack(flags))
            else:
                append(_MULTI_HEADER.pack(_DELETE_OPCODE, False, -1))
                append(_INT.pack(len(encoded)))
                append(encoded)
                append(_INT.pack(op.version))
        append(_MULTI_HEADER.pack(-1, True, -1))
        return b"".join(parts)

    def __str__(self) -> str:
        return f"Multi[{len(self.ops)} ops]"


class OpReply(NamedTuple):
    """One op's answer in a multi reply: the created path (create2) and the new stat (create2,
    setData); None where the op has none."""

    path: str | None
    stat: ZnodeStat | None


_NO_REPLY = OpReply(None, None)


class WriteMultiResponse(protocol.TransactionResponse):  # type: ignore[misc]
    """`responses`: per op, an `OpReply`, or the aiozk exception of its error (as aiozk's
    TransactionResponse gives), or, for an op type without a fast path, aiozk's own reply."""

    opcode = _MULTI_OPCODE

    @classmethod
    def deserialize(cls, raw: bytes) -> WriteMultiResponse:
        instance = cls()
        responses = instance.responses
        append = responses.append
        offset = 0
        while True:
            op_type, done, _err = _MULTI_HEADER.unpack_from(raw, offset)
            offset += _MULTI_HEADER.size
            if done:
                return instance
            if op_type == _SET_DATA_OPCODE:
                czxid, mzxid, _c, _m, version, _cv, _av, owner, _len, children, _p = _STAT.unpack_from(raw, offset)
                offset += _STAT.size
                append(OpReply(None, _new_stat((version, czxid, mzxid, owner, children))))
            elif op_type in (_CHECK_OPCODE, _DELETE_OPCODE):
                append(_NO_REPLY)
            elif op_type == _ERROR_TYPE:
                append(zk_exc.get_response_error(_INT.unpack_from(raw, offset)[0]))
                offset += _INT.size
            elif op_type == _CREATE2_OPCODE:
                length = _INT.unpack_from(raw, offset)[0]
                offset += _INT.size
                path = bytes(raw[offset : offset + length]).decode("utf-8") if length >= 0 else None
                offset += max(length, 0)
                czxid, mzxid, _c, _m, version, _cv, _av, owner, _len, children, _p = _STAT.unpack_from(raw, offset)
                offset += _STAT.size
                append(OpReply(path, _new_stat((version, czxid, mzxid, owner, children))))
            else:
                reply, offset = response_xref[op_type].parse(raw, offset)
                append(reply)
