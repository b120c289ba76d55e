"""gRPC server plumbing shared by controllers and brokers: health service and reflection."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from controller_svc.common.tasks import spawn
from controller_svc.common.tls import TlsFiles, server_credentials

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Health:
    """grpc.health.v1 for the whole server ("") and for each named service."""

    def __init__(self, server: grpc.aio.Server, service_names: Sequence[str]) -> None:
        self.servicer = HealthServicer()
        self._services = ["", *service_names]
        self._generation = 0
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, server)

    async def set_serving(self, serving: bool) -> None:
        self._generation += 1  # supersedes any pending update_soon
        await self._apply(serving)

    async def _apply(self, serving: bool) -> None:
        status = SERVING if serving else NOT_SERVING
        for name in self._services:
            await self.servicer.set(name, status)

    def update_soon(self, serving: bool, after: Awaitable[Any] | None = None) -> None:
        """set_serving from a synchronous callback (a ZooKeeper session event), optionally once
        `after` (e.g. the event that re-elects) has completed. The latest call wins: a session
        lost again while the re-election waits keeps NOT_SERVING."""
        self._generation += 1
        generation = self._generation

        async def update() -> None:
            if after is not None:
                await after  # an event's `processed` completes even when its handler failed
            if generation == self._generation:
                await self._apply(serving)

        spawn(update(), "health-update")


def enable_reflection(server: grpc.aio.Server, service_names: Sequence[str]) -> None:
    reflection.enable_server_reflection(
        [*service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
        server,
    )


def advertised(listen: str, advertised_host: str, port: int) -> str:
    """The host:port to publish for a server listening on `listen` (a wildcard host publishes 127.0.0.1)."""
    host = listen.rpartition(":")[0]
    if advertised_host:
        host = advertised_host
    elif host in ("0.0.0.0", "", "[::]"):
        host = "127.0.0.1"
    return f"{host}:{port}"


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host or "127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_metrics(host: str, port: int) -> None:
    """Expose the process' Prometheus registry on http://host:port/metrics (a daemon thread)."""
    from prometheus_client import disable_created_metrics, start_http_server

    # No `<counter>_created` series: the JMX exporter's Kafka metrics have none, and they
    # double the series count for nothing a dashboard reads.
    disable_created_metrics()  # type: ignore[no-untyped-call]  # unannotated in prometheus_client
    try:
        start_http_server(port, addr=host)
    except OSError as e:
        raise OSError(e.errno, f"metrics.listen {host}:{port}: {e.strerror}") from None


def bind(server: grpc.aio.Server, listen: str, tls: TlsFiles | None = None) -> int:
    """Bind `host:port` (port 0: a free one), with mutual TLS when `tls` is given; returns the port."""
    if tls is not None:
        port = int(server.add_secure_port(listen, server_credentials(tls)))
    else:
        port = int(server.add_insecure_port(listen))
    if port == 0:
        raise OSError(f"cannot listen on {listen}")
    return port


# Clients of our own services (CLI, launcher, admin client, tests): metadata of 100k+
# partitions is far above gRPC's default 4 MB message limit.
CLIENT_OPTIONS = [
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
]

SERVER_OPTIONS = [
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.so_reuseport", 0),
]
