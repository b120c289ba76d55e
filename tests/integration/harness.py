"""Test harness: a real ZooKeeper per test session, a fresh chroot and a real local cluster
(separate processes, real gRPC) per test, and helpers to poll for conditions."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from controller_svc import devcluster
from controller_svc.zk.client import ZkClient
from kcontroller.v1 import broker_pb2, broker_pb2_grpc

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T | None]], timeout_s: float = 30.0, interval_s: float = 0.1, what: str = ""
) -> T:
    """Poll `check` until it returns something truthy; fail with `what` after the deadline."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await check()
        except Exception as e:
            last = e
        else:
            if last:
                return last
        await asyncio.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what or check}; last result: {last!r}")


def read_records(logs: str | pathlib.Path, node: str | None = None) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for path in sorted(pathlib.Path(logs).glob("*.state-change.jsonl")):
        if node is not None and not path.name.startswith(node + "."):
            continue
        for line in path.read_text().splitlines():
            if line.strip():
                records.append(json.loads(line))
    return sorted(records, key=lambda r: r["ts"])


class Cluster:
    def __init__(self, directory: pathlib.Path, spec: dict[str, Any], session_timeout_ms: int) -> None:
        self.dir = directory
        self.spec = spec
        self.session_timeout_ms = session_timeout_ms

    @property
    def zookeeper(self) -> str:
        return str(self.spec["zookeeper"])

    @property
    def logs(self) -> str:
        return str(self.spec["logs"])

    def controller(self, controller_id: int) -> dict[str, Any]:
        return next(c for c in self.spec["controllers"] if c["id"] == controller_id)

    def broker(self, broker_id: int) -> dict[str, Any]:
        return next(b for b in self.spec["brokers"] if b["id"] == broker_id)

    async def snapshot(self) -> devcluster.ClusterSnapshot:
        return await devcluster.snapshot(self.spec)

    async def converged(self, min_epoch: int = 1, timeout_s: float = 60.0) -> devcluster.ClusterSnapshot:
        return await devcluster.wait_converged(self.spec, timeout_s, min_epoch=min_epoch)

    def signal(self, node: dict[str, Any], sig: int) -> None:
        os.kill(node["pid"], sig)

    def kill(self, node: dict[str, Any]) -> None:
        os.kill(node["pid"], signal.SIGKILL)
        _reap(node["pid"])

    def start_node(self, node: dict[str, Any]) -> None:
        """(Re)start a node with the exact command the launcher used."""
        name = ("controller-" if "metrics" in node else "broker-") + str(node["id"])
        node["pid"] = devcluster.spawn_node(node["command"], pathlib.Path(self.logs) / f"{name}.log")
        devcluster.write_spec(self.dir, self.spec)

    async def stop_node(self, node: dict[str, Any], timeout_s: float = 15.0) -> None:
        os.kill(node["pid"], signal.SIGTERM)
        await eventually(lambda: _dead(node["pid"]), timeout_s, what=f"pid {node['pid']} to exit")

    async def describe_broker(self, broker_id: int) -> broker_pb2.DescribeBrokerResponse | None:
        return await devcluster.describe_broker(self.broker(broker_id)["grpc"])

    async def send_update_metadata(
        self, broker_id: int, controller_id: int, controller_epoch: int, broker_epoch: int
    ) -> broker_pb2.UpdateMetadataResponse:
        """What a controller (possibly a zombie one) would send, straight to the broker."""
        import grpc

        async with grpc.aio.insecure_channel(self.broker(broker_id)["grpc"]) as channel:
            response: broker_pb2.UpdateMetadataResponse = await broker_pb2_grpc.BrokerControlStub(
                channel
            ).UpdateMetadata(
                broker_pb2.UpdateMetadataRequest(
                    controller_id=controller_id, controller_epoch=controller_epoch, broker_epoch=broker_epoch
                ),
                timeout=5,
            )
            return response

    async def zk(self) -> ZkClient:
        client = ZkClient(self.zookeeper, 10000)
        await client.start(timeout_s=10)
        return client

    def records(self, node: str | None = None) -> list[dict[str, Any]]:
        return read_records(self.logs, node)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


async def _dead(pid: int) -> bool:
    from controller_svc.zookeeper_launcher import pid_alive

    return not pid_alive(pid)
