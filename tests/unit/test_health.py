"""Health status driven by ZooKeeper session events: the latest update wins, and SERVING after a
re-election waits for that event to be processed."""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2

from controller_svc.common.grpc_common import Health


async def status(health: Health, service: str = "") -> int:
    return int(health.servicer._server_status[service])


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_session_loss_then_reelection() -> None:
    health = Health(grpc.aio.server(), ["kcontroller.v1.Controller"])
    await health.set_serving(True)
    health.update_soon(False)  # session lost
    await settle()
    assert await status(health) == health_pb2.HealthCheckResponse.NOT_SERVING
    reelected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    health.update_soon(True, after=reelected)  # new session: SERVING once the re-election is processed
    await settle()
    assert await status(health, "kcontroller.v1.Controller") == health_pb2.HealthCheckResponse.NOT_SERVING
    reelected.set_result(None)
    await settle()
    assert await status(health) == health_pb2.HealthCheckResponse.SERVING
    assert await status(health, "kcontroller.v1.Controller") == health_pb2.HealthCheckResponse.SERVING


async def test_a_second_session_loss_during_reelection_keeps_not_serving() -> None:
    health = Health(grpc.aio.server(), [])
    await health.set_serving(True)
    reelected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    health.update_soon(False)
    health.update_soon(True, after=reelected)
    health.update_soon(False)  # lost again; the preempted re-election still completes its future
    reelected.set_result(None)
    await settle()
    assert await status(health) == health_pb2.HealthCheckResponse.NOT_SERVING


async def test_a_direct_update_supersedes_a_pending_one() -> None:
    health = Health(grpc.aio.server(), [])
    reelected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    health.update_soon(True, after=reelected)
    await health.set_serving(False)  # shutting down
    reelected.set_result(None)
    await settle()
    assert await status(health) == health_pb2.HealthCheckResponse.NOT_SERVING
