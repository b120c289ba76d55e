"""Run one controller process: ZooKeeper session, gRPC server, metrics, the controller."""

from __future__ import annotations

import asyncio
import logging
import signal

import grpc

from controller_svc.adapters.channel_manager import tls_client_factory
from controller_svc.adapters.zk import paths
from controller_svc.adapters.zk.client import ZkClient
from controller_svc.common import grpc_common, tls
from controller_svc.common.config import Config
from controller_svc.common.loop_monitor import EventLoopMonitor, warn_threshold_s
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.common.tasks import cancel_and_wait, spawn
from controller_svc.common.zk_settings import digest_auth_from_config
from controller_svc.controller.controller import Controller, ControllerSettings
from controller_svc.service.grpc_server import SERVICE_NAME, ControllerService
from kcontroller.v1 import controller_pb2_grpc

log = logging.getLogger(__name__)

# The Controller service's admin RPCs (ControlledShutdown is the brokers').
ADMIN_METHODS = (
    "DescribeCluster",
    "CreateTopics",
    "DeleteTopics",
    "AlterPartitionReassignments",
    "ListPartitionReassignments",
    "ElectLeaders",
)


async def run_controller(config: Config) -> int:
    controller_id = config.int("controller.id")
    node = f"controller-{controller_id}"
    state_log = StateChangeLog(config.str("state.change.log.dir") or None, node)

    tls_files = tls.load(config.values)
    interceptors = []
    if tls_files is not None:
        admin = tls.parse_identities(config.str("controller.admin.identities"))
        interceptors.append(
            tls.Authorizer(
                {
                    **{f"/{SERVICE_NAME}/{method}": admin for method in ADMIN_METHODS},
                    f"/{SERVICE_NAME}/ControlledShutdown": tls.parse_identities(
                        config.str("controller.broker.identities")
                    ),
                }
            )
        )
    server = grpc.aio.server(options=grpc_common.SERVER_OPTIONS, interceptors=interceptors)
    grpc_port = grpc_common.bind(server, config.str("grpc.listen"), tls_files)
    grpc_endpoint = grpc_common.advertised(config.str("grpc.listen"), config.str("grpc.advertised.host"), grpc_port)
    metrics_host, _, metrics_port_text = config.str("metrics.listen").rpartition(":")
    metrics_port = int(metrics_port_text)
    if metrics_port == 0:
        metrics_port = grpc_common.free_port(metrics_host)
    grpc_common.serve_metrics(metrics_host, metrics_port)
    metrics_endpoint = grpc_common.advertised(
        config.str("metrics.listen"), config.str("grpc.advertised.host"), metrics_port
    )

    controller: Controller | None = None
    health: grpc_common.Health | None = None

    def session_lost() -> None:
        # Neither active nor a ready standby without a session: health says so until the
        # new session's re-election has been processed.
        if health is not None:
            health.update_soon(False)
        if controller is not None:
            controller.on_session_lost()

    def new_session() -> None:
        if controller is not None:
            reelected = controller.on_new_session()
            if health is not None:
                health.update_soon(True, after=reelected.processed)

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
    settings = ControllerSettings(
        controller_id=controller_id,
        grpc_endpoint=grpc_endpoint,
        metrics_endpoint=metrics_endpoint,
        request_timeout_s=config.int("controller.socket.timeout.ms") / 1000.0,
        retry_backoff_s=config.int("controller.retry.backoff.ms") / 1000.0,
        election_retry_s=config.int("controller.election.retry.ms") / 1000.0,
        unclean_leader_election_enable=bool(config["unclean.leader.election.enable"]),
        delete_topic_enable=bool(config["delete.topic.enable"]),
        auto_leader_rebalance_enable=bool(config["auto.leader.rebalance.enable"]),
        leader_imbalance_per_broker_percentage=config.int("leader.imbalance.per.broker.percentage"),
        leader_imbalance_check_interval_s=float(config.int("leader.imbalance.check.interval.seconds")),
        debug_failover_hold_loop_s=config.int("debug.failover.hold.loop.ms") / 1000.0,
        failover_replica_epochs_enable=bool(config["failover.replica.epochs.enable"]),
        failover_replica_epochs_timeout_s=config.int("failover.replica.epochs.timeout.ms") / 1000.0,
        failover_metadata_digests_enable=bool(config["failover.metadata.digests.enable"]),
        standby_warm_enable=bool(config["controller.standby.warm.enable"]),
        standby_refresh_interval_s=config.int("controller.standby.refresh.interval.ms") / 1000.0,
        debug_self_stop_dir=config.str("debug.self.stop.dir"),
    )
    controller = Controller(settings, zk, state_log, client_factory=tls_client_factory(tls_files))
    controller_pb2_grpc.add_ControllerServicer_to_server(ControllerService(controller), server)
    health = grpc_common.Health(server, [SERVICE_NAME])
    grpc_common.enable_reflection(server, [SERVICE_NAME])
    await health.set_serving(False)
    await server.start()
    log.info("controller %d: gRPC on %s, metrics on %s", controller_id, grpc_endpoint, metrics_endpoint)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def current_step() -> str | None:
        event = controller.events.current if controller is not None else None
        return type(event).__name__ if event is not None else None

    monitor = EventLoopMonitor(
        state_log,
        warn_threshold_s(config.int("zookeeper.session.timeout.ms")),
        current_step,
        alive_interval_s=config.int("state.change.log.alive.interval.ms") / 1000.0,
    )
    monitor_task = spawn(monitor.run(), "event-loop-monitor")

    await zk.start(timeout_s=config.int("zookeeper.connection.timeout.ms") / 1000.0)
    for path in paths.PERSISTENT_PATHS:  # KafkaZkClient.createTopLevelPaths
        await zk.ensure_path(path)
    # Ready once Startup has been processed: elected, or a standby watching /controller. Not if
    # the session was lost meanwhile (Expire preempts Startup): session_lost's NOT_SERVING wins.
    started = controller.start()
    health.update_soon(True, after=started.processed)
    await started.processed

    await stop.wait()
    log.info("controller %d shutting down", controller_id)
    await health.set_serving(False)
    await controller.shutdown()
    # Closing the session deletes /controller at once, so a standby takes over without
    # waiting for the session timeout.
    await zk.close()
    await server.stop(grace=1.0)
    await cancel_and_wait(monitor_task)
    state_log.close()
    return 0
