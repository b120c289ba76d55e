"""The local-cluster launcher (DESIGN.md contract 4): `controller-svc cluster up|down|status`.

`up` starts ZooKeeper (unless one is given), C controllers and B brokers as background
processes, waits until a controller is elected, every broker has applied its UpdateMetadata
and every controller reports SERVING, and writes DIR/cluster.json. Tests, the demo and benchmarks use it.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import grpc
import uvloop

from controller_svc.adapters.zk import codecs, paths
from controller_svc.adapters.zk.client import ZkClient
from controller_svc.common import grpc_common, tls
from controller_svc.common.errors import CorruptZnodeError
from controller_svc.devtools import zookeeper_launcher
from kcontroller.v1 import broker_pb2, broker_pb2_grpc, controller_pb2, controller_pb2_grpc

CLUSTER_FILE = "cluster.json"

# A local cluster is stopped as a whole: keep each broker's controlled shutdown short.
LOCAL_BROKER_DEFAULTS = {
    "controlled.shutdown.retry.backoff.ms": "500",
    "controlled.shutdown.timeout.ms": "8000",
}


class ClusterError(RuntimeError):
    pass


def node_command(
    kind: str,
    node_id: int,
    zookeeper: str,
    logs: str,
    grpc_port: int,
    metrics_port: int,
    session_timeout_ms: int,
    overrides: dict[str, str],
) -> list[str]:
    id_key = "controller.id" if kind == "controller" else "broker.id"
    settings = {
        id_key: str(node_id),
        "zookeeper.connect": zookeeper,
        "zookeeper.session.timeout.ms": str(session_timeout_ms),
        "state.change.log.dir": logs,
        "grpc.listen": f"127.0.0.1:{grpc_port}",
        **({"metrics.listen": f"127.0.0.1:{metrics_port}"} if metrics_port else {}),
        **overrides,
    }
    command = [sys.executable, "-m", "controller_svc" if kind == "controller" else "broker_stub"]
    if kind == "controller":
        command.append("controller")
    for key, value in settings.items():
        command += ["--override", f"{key}={value}"]
    return command


def spawn_node(command: list[str], log_path: pathlib.Path) -> int:
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    return process.pid


@dataclass(frozen=True)
class ClusterSnapshot:
    controller_id: int
    controller_epoch: int
    brokers: dict[int, Any]  # broker id -> DescribeBrokerResponse (or None when unreachable)


async def describe_broker(
    address: str, timeout_s: float = 2.0, counts_only: bool = False
) -> broker_pb2.DescribeBrokerResponse | None:
    """A broker's DescribeBroker; `counts_only` leaves out its metadata cache and roles (only
    their counts), which at 1M partitions are about 100 MB and seconds of the broker's CPU."""
    async with tls.aio_channel(address, tls.from_env(), grpc_common.CLIENT_OPTIONS) as channel:
        try:
            response: broker_pb2.DescribeBrokerResponse = await broker_pb2_grpc.BrokerControlStub(
                channel
            ).DescribeBroker(broker_pb2.DescribeBrokerRequest(counts_only=counts_only), timeout=timeout_s)
            return response
        except grpc.aio.AioRpcError:
            return None


async def describe_cluster(address: str, timeout_s: float = 2.0) -> controller_pb2.DescribeClusterResponse | None:
    async with tls.aio_channel(address, tls.from_env(), grpc_common.CLIENT_OPTIONS) as channel:
        try:
            response: controller_pb2.DescribeClusterResponse = await controller_pb2_grpc.ControllerStub(
                channel
            ).DescribeCluster(controller_pb2.DescribeClusterRequest(), timeout=timeout_s)
            return response
        except grpc.aio.AioRpcError:
            return None


async def read_controller(zookeeper: str) -> tuple[int, int]:
    """(controller id or -1, controller epoch or -1) from ZooKeeper."""
    zk = ZkClient(zookeeper, 10000)
    await zk.start(timeout_s=10)
    try:
        controller = await zk.get_or_none(paths.CONTROLLER)
        epoch = await zk.get_or_none(paths.CONTROLLER_EPOCH)
    finally:
        await zk.close()
    controller_id = -1
    if controller is not None:
        try:
            controller_id = codecs.decode_controller(controller[0]).broker_id
        except CorruptZnodeError:
            controller_id = -1
    controller_epoch = -1
    if epoch is not None:
        try:
            controller_epoch = codecs.decode_controller_epoch(epoch[0])
        except CorruptZnodeError:
            controller_epoch = -1
    return controller_id, controller_epoch


async def snapshot(spec: dict[str, Any], counts_only: bool = False) -> ClusterSnapshot:
    """The controller and every broker's DescribeBroker (`counts_only`: without their roles
    and metadata caches, what status and convergence checks need at any size)."""
    controller_id, epoch = await read_controller(spec["zookeeper"])
    responses = await asyncio.gather(*(describe_broker(b["grpc"], counts_only=counts_only) for b in spec["brokers"]))
    return ClusterSnapshot(controller_id, epoch, {b["id"]: r for b, r in zip(spec["brokers"], responses, strict=True)})


async def wait_converged(spec: dict[str, Any], timeout_s: float, min_epoch: int = 1) -> ClusterSnapshot:
    """Wait until a controller is elected (epoch >= min_epoch) and every broker has applied
    an UpdateMetadata of that epoch."""
    deadline = time.monotonic() + timeout_s
    last: ClusterSnapshot | None = None
    while time.monotonic() < deadline:
        try:
            last = await snapshot(spec, counts_only=True)
        except Exception:
            await asyncio.sleep(0.2)
            continue
        if (
            last.controller_id >= 0
            and last.controller_epoch >= min_epoch
            and all(
                r is not None
                and r.registered
                and r.controller_epoch == last.controller_epoch
                and r.update_metadata_count > 0
                for r in last.brokers.values()
            )
        ):
            return last
        await asyncio.sleep(0.1)
    raise ClusterError(f"cluster did not converge within {timeout_s:.0f} s; last seen: {last}")


async def serving(address: str, timeout_s: float = 2.0) -> bool:
    """The gRPC health status of a controller or broker is SERVING."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with tls.aio_channel(address, tls.from_env(), grpc_common.CLIENT_OPTIONS) as channel:
        try:
            response = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout_s
            )
        except grpc.aio.AioRpcError:
            return False
    return bool(response.status == health_pb2.HealthCheckResponse.SERVING)


async def wait_ready(spec: dict[str, Any], timeout_s: float) -> ClusterSnapshot:
    """wait_converged, and every controller ready: the standbys have processed their start-up
    and know the active controller (their health turns SERVING then)."""
    deadline = time.monotonic() + timeout_s
    converged = await wait_converged(spec, timeout_s)
    while True:  # asked at least once, however long converging took
        ready = await asyncio.gather(*(serving(c["grpc"]) for c in spec["controllers"]))
        if all(ready):
            return converged
        if time.monotonic() >= deadline:
            not_ready = [c["id"] for c, ok in zip(spec["controllers"], ready, strict=True) if not ok]
            raise ClusterError(f"controllers {not_ready} not SERVING within {timeout_s:.0f} s")
        await asyncio.sleep(0.1)


def up(
    directory: str,
    controllers: int,
    brokers: int,
    zookeeper: str | None = None,
    session_timeout_ms: int = 6000,
    controller_overrides: dict[str, str] | None = None,
    broker_overrides: dict[str, str] | None = None,
    wait_s: float = 90.0,
    wait: bool = True,
    zookeeper_nodes: int = 1,
    zookeeper_heap_mb: int = 1024,
) -> dict[str, Any]:
    """Contract 4. With no `zookeeper`, starts a local one: standalone, or an ensemble of
    `zookeeper_nodes` servers (cluster.json then also lists them under `zookeeper_nodes`, with
    what restarting each takes), each with a Java heap of `zookeeper_heap_mb`."""
    base = pathlib.Path(directory).resolve()
    if (base / CLUSTER_FILE).exists():
        raise ClusterError(f"{base / CLUSTER_FILE} exists: run `controller-svc cluster down --dir {directory}` first")
    logs = base / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    zookeeper_pid: int | None = None
    zk_nodes: list[dict[str, Any]] = []
    if zookeeper is None:
        zk = zookeeper_launcher.start(base / "zookeeper", nodes=zookeeper_nodes, detach=True, heap_mb=zookeeper_heap_mb)
        zookeeper = zk.connect
        zookeeper_pid = zk.pids[0]
        zk_nodes = [
            {
                "id": n.server_id,
                "pid": n.pid,
                "port": n.client_port,
                "data_dir": str(n.data_dir),
                "command": n.command,
            }
            for n in zk.nodes
        ]
    spec: dict[str, Any] = {
        "zookeeper": zookeeper,
        "zookeeper_pid": zookeeper_pid,
        "zookeeper_nodes": zk_nodes,
        "controllers": [],
        "brokers": [],
        "logs": str(logs),
    }
    try:
        for controller_id in range(1, controllers + 1):
            grpc_port, metrics_port = zookeeper_launcher.free_port(), zookeeper_launcher.free_port()
            command = node_command(
                "controller",
                controller_id,
                zookeeper,
                str(logs),
                grpc_port,
                metrics_port,
                session_timeout_ms,
                controller_overrides or {},
            )
            pid = spawn_node(command, logs / f"controller-{controller_id}.log")
            spec["controllers"].append(
                {
                    "id": controller_id,
                    "pid": pid,
                    "grpc": f"127.0.0.1:{grpc_port}",
                    "metrics": f"127.0.0.1:{metrics_port}",
                    "command": command,
                }
            )
        for broker_id in range(1, brokers + 1):
            grpc_port, metrics_port = zookeeper_launcher.free_port(), zookeeper_launcher.free_port()
            command = node_command(
                "broker",
                broker_id,
                zookeeper,
                str(logs),
                grpc_port,
                metrics_port,
                session_timeout_ms,
                broker_overrides or {},
            )
            pid = spawn_node(command, logs / f"broker-{broker_id}.log")
            spec["brokers"].append(
                {
                    "id": broker_id,
                    "pid": pid,
                    "grpc": f"127.0.0.1:{grpc_port}",
                    "metrics": f"127.0.0.1:{metrics_port}",
                    "command": command,
                }
            )
        write_spec(base, spec)
        if wait:
            uvloop.run(wait_ready(spec, wait_s))
    except BaseException:
        down(str(base), grace_s=2)
        raise
    return spec


def write_spec(base: pathlib.Path, spec: dict[str, Any]) -> None:
    tmp = base / (CLUSTER_FILE + ".tmp")
    tmp.write_text(json.dumps(spec, indent=2) + "\n")
    os.replace(tmp, base / CLUSTER_FILE)


def read_spec(directory: str) -> dict[str, Any]:
    path = pathlib.Path(directory) / CLUSTER_FILE
    try:
        spec: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterError(f"no cluster at {directory}: {path} does not exist") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ClusterError(f"cannot read {path}: {e}") from e
    return spec


def down(directory: str, grace_s: float = 15.0) -> None:
    """SIGTERM every process the launcher started, SIGKILL what is left after the grace period
    (one per group: brokers, then controllers, then ZooKeeper)."""
    base = pathlib.Path(directory).resolve()
    spec = read_spec(str(base))
    zk_pids = [n["pid"] for n in spec.get("zookeeper_nodes", []) if n.get("pid")] or [spec.get("zookeeper_pid")]
    # Brokers first (their controlled shutdown needs a controller), then controllers.
    for pids in (
        [n["pid"] for n in spec.get("brokers", []) if n.get("pid")],
        [n["pid"] for n in spec.get("controllers", []) if n.get("pid")],
        [pid for pid in zk_pids if pid],
    ):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)  # a stopped (or hung) process cannot handle SIGTERM
            except ProcessLookupError:
                pass
        zookeeper_launcher.stop_pids(pids, signal.SIGTERM, grace_s)
    (base / CLUSTER_FILE).rename(base / "cluster.json.down")


def format_status(spec: dict[str, Any], snap: ClusterSnapshot) -> str:
    lines = [
        f"zookeeper  {spec['zookeeper']}",
        f"controller {snap.controller_id if snap.controller_id >= 0 else 'NONE'}  epoch {snap.controller_epoch}",
        "",
        f"{'node':<14}{'pid':>8}  {'grpc':<22}{'state'}",
    ]
    for c in spec["controllers"]:
        role = "ACTIVE" if c["id"] == snap.controller_id else "standby"
        if not zookeeper_launcher.pid_alive(c["pid"]):
            role = "NOT RUNNING"
        lines.append(f"{'controller-' + str(c['id']):<14}{c['pid']:>8}  {c['grpc']:<22}{role}")
    for b in spec["brokers"]:
        r = snap.brokers.get(b["id"])
        if not zookeeper_launcher.pid_alive(b["pid"]):
            state = "NOT RUNNING"
        elif r is None:
            state = "UNREACHABLE"
        else:
            state = (
                f"{'registered' if r.registered else 'UNREGISTERED'} broker_epoch={r.broker_epoch} "
                f"controller_epoch={r.controller_epoch} live={len(r.live_brokers)} "
                f"partitions={r.role_count} leading={r.leader_count}"
            )
        lines.append(f"{'broker-' + str(b['id']):<14}{b['pid']:>8}  {b['grpc']:<22}{state}")
    return "\n".join(lines)


def status(directory: str) -> str:
    spec = read_spec(directory)
    text = format_status(spec, uvloop.run(snapshot(spec, counts_only=True)))
    try:
        from controller_svc.adapters.admin_client import AdminClient
        from controller_svc.core.cluster_table import format_cluster

        description = uvloop.run(AdminClient(zookeeper=spec["zookeeper"]).describe_cluster(include_partitions=True))
    except Exception as e:  # status must print what it has, whatever state the cluster is in
        return f"{text}\n\n(no cluster description from the active controller: {e})"
    return f"{text}\n\n{format_cluster(description)}"
