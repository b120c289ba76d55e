"""Controlled shutdown, broker side (KafkaServer.controlledShutdown).

Ask the active controller to move this broker's leaderships away, retrying
(controlled.shutdown.max.retries, controlled.shutdown.retry.backoff.ms) until it answers that
nothing is led here any more, all within controlled.shutdown.timeout.ms. The active controller
is found through ZooKeeper, else from the endpoint the last UpdateMetadata named; a
NOT_CONTROLLER answer names the active one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import grpc

from broker_stub.state import BrokerState
from controller_svc.adapters.admin_client import AdminError, read_active_endpoint
from controller_svc.adapters.zk.client import ZkClient
from controller_svc.common import grpc_common
from controller_svc.common.errors import ControllerError, ErrorCode
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.common.tls import TlsFiles, aio_channel
from kcontroller.v1 import controller_pb2, controller_pb2_grpc

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ShutdownSettings:
    max_retries: int
    retry_backoff_s: float
    timeout_s: float
    tls: TlsFiles | None = None


async def _controller_address(zk: ZkClient, state: BrokerState, timeout_s: float) -> str | None:
    """The active controller, read through this broker's own ZooKeeper session."""
    try:
        return await asyncio.wait_for(read_active_endpoint(zk), timeout_s)
    except (AdminError, ControllerError, TimeoutError) as e:
        log.warning("could not find the controller through ZooKeeper (%s); using %r", e, state.controller_endpoint)
        return state.controller_endpoint or None


async def controlled_shutdown(
    zk: ZkClient, state: BrokerState, settings: ShutdownSettings, state_log: StateChangeLog
) -> bool:
    """True once the controller says this broker leads nothing."""
    deadline = time.monotonic() + settings.timeout_s
    attempts = 0
    address: str | None = None
    while attempts <= settings.max_retries and time.monotonic() < deadline:
        attempts += 1
        remaining_time = max(0.5, deadline - time.monotonic())
        if address is None:
            address = await _controller_address(zk, state, min(5.0, remaining_time))
        if address is None:
            log.warning("controlled shutdown attempt %d: no controller known", attempts)
        else:
            try:
                async with aio_channel(address, settings.tls, grpc_common.CLIENT_OPTIONS) as channel:
                    response = await controller_pb2_grpc.ControllerStub(channel).ControlledShutdown(
                        controller_pb2.ControlledShutdownRequest(
                            broker_id=state.broker_id, broker_epoch=state.broker_epoch
                        ),
                        timeout=remaining_time,
                    )
            except grpc.aio.AioRpcError as e:
                log.warning("controlled shutdown attempt %d to %s failed: %s", attempts, address, e.code().name)
                address = None
            else:
                if response.error_code == ErrorCode.NOT_CONTROLLER:
                    address = response.active_controller.grpc or None
                    log.info("controller moved; retrying with %s", address)
                    continue
                if response.error_code:
                    log.error(
                        "controlled shutdown refused: %s %s",
                        ErrorCode(response.error_code).name,
                        response.error_message,
                    )
                elif not response.remaining_partitions:
                    log.info("controlled shutdown succeeded after %d attempt(s)", attempts)
                    state_log.record(
                        "broker.controlled_shutdown_succeeded",
                        broker_id=state.broker_id,
                        broker_epoch=state.broker_epoch,
                        attempts=attempts,
                    )
                    return True
                else:
                    log.warning(
                        "controlled shutdown attempt %d: still leading %d partitions",
                        attempts,
                        len(response.remaining_partitions),
                    )
        if attempts <= settings.max_retries:
            await asyncio.sleep(min(settings.retry_backoff_s, max(0.0, deadline - time.monotonic())))
    log.error("controlled shutdown did not complete (%d attempts); shutting down anyway", attempts)
    state_log.record(
        "broker.controlled_shutdown_failed",
        broker_id=state.broker_id,
        broker_epoch=state.broker_epoch,
        attempts=attempts,
    )
    return False
