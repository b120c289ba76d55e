"""Run one broker stub process: gRPC server, ZooKeeper registration, SIGTERM handling."""

from __future__ import annotations

import asyncio
import logging
import signal
import time

import grpc

from broker_stub import metrics
from broker_stub.registration import BrokerRegistration
from broker_stub.server import SERVICE_NAME, BrokerControlService
from broker_stub.shutdown import ShutdownSettings, controlled_shutdown
from broker_stub.state import BrokerState
from controller_svc.adapters.zk.client import ZkClient
from controller_svc.common import grpc_common, tls
from controller_svc.common.config import Config
from controller_svc.common.errors import ControllerError
from controller_svc.common.loop_monitor import EventLoopMonitor, warn_threshold_s
from controller_svc.common.model import BrokerInfo, EndPoint
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.common.tasks import cancel_and_wait, spawn
from controller_svc.common.zk_settings import digest_auth_from_config
from kcontroller.v1 import broker_pb2_grpc

log = logging.getLogger(__name__)


async def run_broker(config: Config) -> int:
    broker_id = config.int("broker.id")
    node = f"broker-{broker_id}"
    state_log = StateChangeLog(config.str("state.change.log.dir") or None, node)
    log_dirs = tuple(d.strip() for d in config.str("log.dirs").split(",") if d.strip())
    state = BrokerState(broker_id, log_dirs=log_dirs)
    state_log.record("broker.started", broker_id=broker_id)

    tls_files = tls.load(config.values)
    interceptors = []
    if tls_files is not None:
        # Control RPCs (and the debug ones) only from the controllers' certificates.
        allowed = tls.parse_identities(config.str("broker.controller.identities"))
        interceptors.append(tls.Authorizer({f"/{SERVICE_NAME}/": allowed}))
    server = grpc.aio.server(options=grpc_common.SERVER_OPTIONS, interceptors=interceptors)
    port = grpc_common.bind(server, config.str("grpc.listen"), tls_files)
    host, _, _ = grpc_common.advertised(config.str("grpc.listen"), config.str("grpc.advertised.host"), port).rpartition(
        ":"
    )
    service = BrokerControlService(state, state_log, catchup_delay_s=config.int("replica.catchup.delay.ms") / 1000.0)
    broker_pb2_grpc.add_BrokerControlServicer_to_server(service, server)
    health = grpc_common.Health(server, [SERVICE_NAME])
    grpc_common.enable_reflection(server, [SERVICE_NAME])
    await health.set_serving(False)
    await server.start()
    metrics_host, _, metrics_port_text = config.str("metrics.listen").rpartition(":")
    metrics_port = int(metrics_port_text) or grpc_common.free_port(metrics_host)
    grpc_common.serve_metrics(metrics_host, metrics_port)
    metrics.BROKER_EPOCH.set(-1)
    log.info("broker %d: gRPC on %s:%d, metrics on %s:%d", broker_id, host, port, metrics_host, metrics_port)

    info = BrokerInfo(
        broker_id=broker_id,
        endpoints=(EndPoint("PLAINTEXT", host, port, "PLAINTEXT"),),
        rack=config.str("broker.rack") or None,
        epoch=-1,
    )
    reregister_task: asyncio.Task[None] | None = None
    registration: BrokerRegistration | None = None

    async def register() -> None:
        assert registration is not None
        epoch = await registration.register()
        state.broker_epoch = epoch
        state.registered = True
        metrics.BROKER_EPOCH.set(epoch)
        metrics.REGISTERED.set(1)
        state_log.record("broker.registered", broker_id=broker_id, broker_epoch=epoch)
        log.info("broker %d registered with broker epoch %d", broker_id, epoch)
        await health.set_serving(True)

    def session_lost() -> None:
        state.registered = False
        metrics.REGISTERED.set(0)
        health.update_soon(False)  # SERVING again once registered in the new session
        if reregister_task is not None:
            reregister_task.cancel()  # a registration of the session just lost must not report SERVING

    def new_session() -> None:
        nonlocal reregister_task

        async def reregister() -> None:
            try:
                await register()
            except ControllerError as e:
                log.error("broker %d could not re-register: %s", broker_id, e)

        reregister_task = spawn(reregister(), "broker-reregistration")

    zk_auth, zk_set_acl = digest_auth_from_config(config.values)
    zk = ZkClient(
        config.str("zookeeper.connect"),
        config.int("zookeeper.session.timeout.ms"),
        config.int("zookeeper.max.in.flight.requests"),
        on_session_lost=session_lost,
        on_new_session=new_session,
        auth=zk_auth,
        set_acl=zk_set_acl,
    )
    registration = BrokerRegistration(zk, info, config.int("broker.registration.wait.ms") / 1000.0)
    service.zk = zk

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    monitor = EventLoopMonitor(
        state_log,
        warn_threshold_s(config.int("zookeeper.session.timeout.ms")),
        alive_interval_s=config.int("state.change.log.alive.interval.ms") / 1000.0,
    )
    monitor_task = spawn(monitor.run(), "event-loop-monitor")
    await zk.start(timeout_s=config.int("zookeeper.connection.timeout.ms") / 1000.0)
    await registration.ensure_top_level_paths()
    registration_task = spawn(register(), "broker-registration")
    isr_task = spawn(service.run_isr_maintenance(), "broker-isr-maintenance")
    digests_task = spawn(service.run_metadata_digests(), "broker-metadata-digests")
    stop_wait = asyncio.ensure_future(stop.wait())
    await asyncio.wait([registration_task, stop_wait], return_when=asyncio.FIRST_COMPLETED)
    if registration_task.done() and registration_task.exception() is not None:
        log.error("broker %d: registration failed: %s", broker_id, registration_task.exception())
        await cancel_and_wait(isr_task, digests_task, monitor_task)
        await zk.close()
        await server.stop(grace=0)
        return 1
    await stop_wait

    log.info("broker %d shutting down", broker_id)
    phases = _Phases()
    # Not ready from the first moment of shutdown; the server still answers the controller's
    # requests during the controlled shutdown.
    await health.set_serving(False)
    if config["controlled.shutdown.enable"] and state.registered:
        await controlled_shutdown(
            zk,
            state,
            ShutdownSettings(
                max_retries=config.int("controlled.shutdown.max.retries"),
                retry_backoff_s=config.int("controlled.shutdown.retry.backoff.ms") / 1000.0,
                timeout_s=config.int("controlled.shutdown.timeout.ms") / 1000.0,
                tls=tls_files,
            ),
            state_log,
        )
        phases.mark("controlled shutdown")
    service.stop_applying()
    await cancel_and_wait(registration_task, reregister_task, isr_task, digests_task)
    phases.mark("tasks stopped")
    # Deregistration is the session's close (KafkaServer.shutdown closes its ZooKeeper client):
    # ZooKeeper deletes the session's ephemeral registration before it answers the close, one
    # round trip. Reading and deleting the registration first added two, on cores the new
    # leaders were busy with (15-35 ms of a 10k-partition controlled shutdown's exit).
    # The gRPC server stops meanwhile: every control request is refused already
    # (stop_applying), and one that finds it gone is resent by the controller just as a refused
    # one is, until the registration's deletion tells the controller the broker left.
    await asyncio.gather(zk.close(), server.stop(grace=0.3))
    phases.mark("session closed and server stopped")
    state_log.record("broker.shutdown", broker_id=broker_id, broker_epoch=state.broker_epoch)
    await cancel_and_wait(monitor_task)
    state_log.close()
    log.info("broker %d shut down in %s", broker_id, phases)
    return 0


class _Phases:
    """How long each step of the shutdown took, for its last log line (where an exit's time
    went, the controlled shutdown's own and the steps after it)."""

    def __init__(self) -> None:
        self._last = time.monotonic()
        self._steps: list[tuple[str, float]] = []

    def mark(self, step: str) -> None:
        now = time.monotonic()
        self._steps.append((step, (now - self._last) * 1000))
        self._last = now

    def __str__(self) -> str:
        total = sum(ms for _, ms in self._steps)
        return f"{total:.0f} ms (" + ", ".join(f"{step} {ms:.0f} ms" for step, ms in self._steps) + ")"
