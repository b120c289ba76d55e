"""The struct codecs of write multis (adapters/zk/wire.py) against aiozk's own: the same bytes
on the wire for every op kind ZkClient sends, the same answers read from a reply."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from aiozk import exc as zk_exc
from aiozk import protocol
from aiozk.protocol.response import response_xref
from aiozk.protocol.transaction import TransactionResponse

from controller_svc.adapters.zk.client import ZnodeStat, digest_acl
from controller_svc.adapters.zk.wire import (
    CheckOp,
    CreateOp,
    DeleteOp,
    OpReply,
    SetDataOp,
    WriteMultiRequest,
    WriteMultiResponse,
    ZkOp,
)
from controller_svc.common.zk_settings import ZkDigestAuth

OPS: list[ZkOp] = [
    CheckOp("/controller_epoch", 7),
    SetDataOp("/brokers/topics/t/partitions/0/state", b'{"leader":1}', 3),
    SetDataOp("/brokers/topics/t/partitions/1/state", b"", -1),
    CreateOp("/brokers/topics/t/partitions/2/state", b'{"leader":2}'),
    CreateOp("/brokers/ids/1", b"{}", ephemeral=True),
    CreateOp("/isr_change_notification/isr_change_", b"x", sequential=True),
    CreateOp("/admin/delete_topics/t", b"", ephemeral=True, sequential=True),
    CreateOp("/brokers/topics/é/partitions"),
    DeleteOp("/admin/reassign_partitions", 4),
    DeleteOp("/controller", -1),
]


def aiozk_request(ops: list[ZkOp], full: list[str], acl: list[Any]) -> Any:
    """The request as ZkClient.multi built it with aiozk's classes before the fast codec."""
    request = protocol.TransactionRequest()
    for op, path in zip(ops, full, strict=True):
        if isinstance(op, CheckOp):
            request.add(protocol.CheckVersionRequest(path=path, version=op.version))
        elif isinstance(op, CreateOp):
            create = protocol.Create2Request(path=path, data=op.data, acl=acl)
            create.set_flags(op.ephemeral, op.sequential, False)
            request.add(create)
        elif isinstance(op, SetDataOp):
            request.add(protocol.SetDataRequest(path=path, data=op.data, version=op.version))
        else:
            request.add(protocol.DeleteRequest(path=path, version=op.version))
    return request


@pytest.mark.parametrize(
    "acl",
    [
        [protocol.UNRESTRICTED_ACCESS],
        digest_acl(ZkDigestAuth("kafka", "s3cret")),
    ],
    ids=["world", "digest"],
)
@pytest.mark.parametrize("chroot", ["", "/kc"])
def test_a_write_multi_is_encoded_as_aiozk_encodes_it(acl: list[Any], chroot: str) -> None:
    full = [chroot + op.path for op in OPS]
    ours = WriteMultiRequest(OPS, full, acl).serialize(42)
    theirs = aiozk_request(OPS, full, acl).serialize(42)
    assert ours == theirs


_HEADER = struct.Struct("!i?i")
_STAT = struct.Struct("!qqqqiiiqiiq")


def _stat(version: int) -> bytes:
    # czxid, mzxid, ctime, mtime, version, cversion, aversion, ephemeralOwner, dataLength, numChildren, pzxid
    return _STAT.pack(100 + version, 200 + version, 1, 2, version, 3, 0, 0x55 * version, 12, version % 3, 9)


def _string(value: str) -> bytes:
    encoded = value.encode()
    return struct.pack("!i", len(encoded)) + encoded


def _reply(*entries: tuple[int, bytes]) -> bytes:
    return b"".join(_HEADER.pack(kind, False, 0) + body for kind, body in entries) + _HEADER.pack(-1, True, -1)


def _as_compared(entry: Any) -> Any:
    if isinstance(entry, BaseException):
        return type(entry)
    if isinstance(entry, OpReply):
        return (entry.path, entry.stat)
    path = getattr(entry, "path", None)
    stat = getattr(entry, "stat", None)
    return (path, ZnodeStat.of(stat) if stat is not None else None)


@pytest.mark.parametrize(
    "entries",
    [
        [
            (13, b""),
            (5, _stat(4)),
            (15, _string("/kc/isr_change_notification/isr_change_0000000012") + _stat(0)),
            (2, b""),
            (5, _stat(1)),
        ],
        # A failed multi: every op answers with an error result (ZooKeeper's rollback).
        [
            (-1, struct.pack("!i", 0)),
            (-1, struct.pack("!i", -103)),
            (-1, struct.pack("!i", -2)),
            (-1, struct.pack("!i", -101)),
            (-1, struct.pack("!i", -110)),
        ],
        [],
    ],
    ids=["applied", "failed", "empty"],
)
def test_a_multi_reply_is_read_as_aiozk_reads_it(entries: list[tuple[int, bytes]]) -> None:
    raw = _reply(*entries)
    ours = WriteMultiResponse.deserialize(raw).responses
    theirs = TransactionResponse.deserialize(raw).responses
    assert len(ours) == len(entries)
    assert [_as_compared(e) for e in ours] == [_as_compared(e) for e in theirs]


def test_the_failed_ops_come_back_as_aiozk_exceptions() -> None:
    raw = _reply((-1, struct.pack("!i", -103)), (-1, struct.pack("!i", -2)))
    ours = WriteMultiResponse.deserialize(raw).responses
    assert isinstance(ours[0], zk_exc.BadVersion) and isinstance(ours[1], zk_exc.RuntimeInconsistency)


def test_every_multi_reply_of_the_process_is_read_by_the_fast_codec() -> None:
    assert response_xref[14] is WriteMultiResponse


@pytest.mark.parametrize("connect", ["127.0.0.1:2181", "127.0.0.1:2181/kafka", "127.0.0.1:2181/a/b/"])
def test_a_multis_paths_get_what_aiozk_normalize_path_gives_them(connect: str) -> None:
    """ZkClient prefixes the chroot to paths it finds already normal (all of a multi's at once)
    and leaves any other to aiozk: either way, aiozk's normalize_path of each."""
    import aiozk

    from controller_svc.adapters.zk.client import ZkClient
    from controller_svc.common.zk_settings import parse_connect_string

    servers, chroot = parse_connect_string(connect)
    zk = ZkClient(connect, 10000)
    zk._client = aiozk.ZKClient(servers, chroot=chroot)
    normal = ["/controller_epoch", "/brokers/topics/t/partitions/0/state", "/brokers/topics/é/partitions"]
    odd = ["/", "brokers/ids", "/brokers//ids", "/brokers/ids/", "//x", "/a\n/b", "/a\n", ""]
    batches = [normal, normal[:1], *([*normal, path] for path in odd), *([path] for path in odd)]
    for paths in batches:
        assert zk._full_paths(list(paths)) == [zk._client.normalize_path(p) for p in paths], paths
