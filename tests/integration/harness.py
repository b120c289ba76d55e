"""Test harness: a real ZooKeeper per test session, a fresh chroot and a real local cluster
(separate processes, real gRPC) per test, and helpers to poll for conditions."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from controller_svc.adapters.zk.client import ZkClient
from controller_svc.devtools import devcluster
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


def scrape(address: str) -> dict[str, float]:
    """Every sample of a Prometheus /metrics page, keyed by name{labels}."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


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

    async def converged(
        self, min_epoch: int = 1, timeout_s: float = 60.0, brokers: list[int] | None = None
    ) -> devcluster.ClusterSnapshot:
        """A controller with at least `min_epoch` and every broker (or only `brokers`, for tests
        that keep some down) on its metadata."""
        spec = self.spec
        if brokers is not None:
            spec = {**self.spec, "brokers": [b for b in self.spec["brokers"] if b["id"] in brokers]}
        return await devcluster.wait_converged(spec, timeout_s, min_epoch=min_epoch)

    def signal(self, node: dict[str, Any], sig: int) -> None:
        os.kill(node["pid"], sig)

    def kill(self, node: dict[str, Any]) -> None:
        os.kill(node["pid"], signal.SIGKILL)
        _reap(node["pid"])

    def start_node(self, node: dict[str, Any]) -> None:
        """(Re)start a node with the exact command the launcher used."""
        name = ("controller-" if node in self.spec["controllers"] else "broker-") + str(node["id"])
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

    async def znode_exists(self, path: str) -> bool:
        zk = await self.zk()
        try:
            return await zk.exists(path) is not None
        finally:
            await zk.close()

    def records(self, node: str | None = None) -> list[dict[str, Any]]:
        return read_records(self.logs, node)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


async def _dead(pid: int) -> bool:
    from controller_svc.devtools.zookeeper_launcher import pid_alive

    return not pid_alive(pid)


# --- partitions ---------------------------------------------------------------------------------


async def admin(cluster: Cluster) -> Any:
    from controller_svc.adapters.admin_client import AdminClient

    return AdminClient(zookeeper=cluster.zookeeper)


async def create_topic(
    cluster: Cluster,
    name: str,
    partitions: int = -1,
    replication_factor: int = -1,
    assignment: dict[int, list[int]] | None = None,
    configs: dict[str, str] | None = None,
) -> Any:
    from kcontroller.v1 import controller_pb2

    client = await admin(cluster)
    topic = controller_pb2.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=replication_factor,
        configs=configs or {},
        assignments=[controller_pb2.ReplicaAssignment(partition=p, replicas=r) for p, r in (assignment or {}).items()],
    )
    response = await client.create_topics(controller_pb2.CreateTopicsRequest(topics=[topic]))
    return response.topics[0]


async def partitions(cluster: Cluster, topic: str | None = None) -> dict[tuple[str, int], Any]:
    client = await admin(cluster)
    description = await client.describe_cluster(include_partitions=True, topics=[topic] if topic else [])
    return {(p.topic, p.partition): p for p in description.partitions}


async def describe(cluster: Cluster) -> Any:
    return await (await admin(cluster)).describe_cluster()


async def roles(cluster: Cluster, broker_id: int) -> dict[tuple[str, int], Any]:
    description = await cluster.describe_broker(broker_id)
    assert description is not None, f"broker {broker_id} unreachable"
    return {(r.topic, r.partition): r for r in description.roles}


async def brokers_agree_with_controller(cluster: Cluster, topic: str, broker_ids: list[int]) -> bool:
    """Every live replica of every partition has applied the controller's leader and epoch."""
    current = await partitions(cluster, topic)
    if not current:
        return False
    for broker_id in broker_ids:
        mine = await roles(cluster, broker_id)
        for key, p in current.items():
            if broker_id not in p.replicas or broker_id in p.offline_replicas:
                continue
            role = mine.get(key)
            if role is None or role.leader_epoch != p.leader_epoch or role.leader != p.leader:
                return False
            expected = "leader" if p.leader == broker_id else "follower"
            if role.role != expected:
                return False
    return True


def leader_epochs_never_regress(records: list[dict[str, Any]]) -> None:
    """Per broker and partition, applied leader epochs strictly increase (LeaderAndIsr roles)."""
    last: dict[tuple[str, str, int], int] = {}
    for r in records:
        if r["kind"] == "broker.started":  # a new process starts with no partition state
            last = {k: v for k, v in last.items() if k[0] != r["node"]}
            continue
        if r["kind"] != "partition.role_changed" or r["role"] not in ("leader", "follower"):
            continue
        key = (r["node"], r["topic"], r["partition"])
        assert r["leader_epoch"] > last.get(key, -1), f"leader epoch went backwards on {key}: {r}"
        last[key] = r["leader_epoch"]
