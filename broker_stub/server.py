"""The broker's gRPC service (kcontroller.v1.BrokerControl): fence, apply, log."""

from __future__ import annotations

import asyncio
import logging

import grpc

from broker_stub import isr, metrics, replica_manager
from broker_stub.state import BrokerState
from controller_svc.adapters.zk.client import ZkClient
from controller_svc.common import gc_policy, logging_setup
from controller_svc.common.errors import ControllerError, ErrorCode
from controller_svc.common.model import TopicPartition
from controller_svc.common.state_change_log import StateChangeLog
from kcontroller.v1 import broker_pb2, broker_pb2_grpc, common_pb2

log = logging.getLogger(__name__)

ControlRequest = (
    broker_pb2.UpdateMetadataRequest
    | broker_pb2.LeaderAndIsrRequest
    | broker_pb2.StopReplicaRequest
    | broker_pb2.DescribeReplicaEpochsRequest
)

SERVICE_NAME = broker_pb2.DESCRIPTOR.services_by_name["BrokerControl"].full_name
# Partitions whose metadata digests are made per slice in the background (about 10 ms).
DIGEST_SLICE = 20_000


class BrokerControlService(broker_pb2_grpc.BrokerControlServicer):
    def __init__(
        self, state: BrokerState, state_log: StateChangeLog, zk: ZkClient | None = None, catchup_delay_s: float = 1.0
    ) -> None:
        self.state = state
        self.state_log = state_log
        self.zk = zk
        self.catchup_delay_s = catchup_delay_s
        self._first_seen: dict[tuple[TopicPartition, int], float] = {}
        self._candidates: set[TopicPartition] = set()
        self._scanned_generation = -1
        # Control requests are applied one at a time, in arrival order (Kafka's
        # replicaStateChangeLock); the fencing check and the update are one step.
        self._lock = asyncio.Lock()
        self.rejected: dict[int, int] = {}

    def _record(self, api: str, request: ControlRequest, result: replica_manager.ApplyResult) -> None:
        controller_epoch = int(request.controller_epoch)
        metrics.REQUESTS.labels(api, "applied" if result.applied else "rejected").inc()
        self._update_gauges()
        if not result.applied:
            metrics.REJECTED.labels(api, result.error.name, str(int(result.error))).inc()
            self.rejected[int(result.error)] = self.rejected.get(int(result.error), 0) + 1
            log.warning(
                "rejected %s from controller %d epoch %d (broker epoch %d): %s (we are at controller epoch %d, "
                "broker epoch %d)",
                api,
                request.controller_id,
                controller_epoch,
                request.broker_epoch,
                result.error.name,
                self.state.controller_epoch,
                self.state.broker_epoch,
            )
        self.state_log.record(
            "request.received",
            api=api,
            controller_id=int(getattr(request, "controller_id")),  # noqa: B009
            controller_epoch=controller_epoch,
            broker_epoch=int(getattr(request, "broker_epoch")),  # noqa: B009
            correlation_id=int(getattr(request, "correlation_id")),  # noqa: B009
            result="applied" if result.applied else "rejected",
            error=int(result.error),
        )
        self.state_log.record_many(
            "partition.role_changed",
            (
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "role": role.role,
                    "leader": role.leader,
                    "leader_epoch": role.leader_epoch,
                    "isr": list(role.isr),
                    "controller_epoch": controller_epoch,
                }
                for tp, role in result.role_changes.items()
            ),
        )

    def _update_gauges(self) -> None:
        state = self.state
        metrics.CONTROLLER_EPOCH.set(state.controller_epoch)
        logging_setup.set_controller_epoch(state.controller_epoch)
        metrics.CONTROLLER_ID.set(state.controller_id)
        metrics.BROKER_EPOCH.set(state.broker_epoch)
        hosted, led = state.hosted_and_led()  # kept as roles change: no scan per request
        metrics.PARTITION_COUNT.set(hosted)
        metrics.LEADER_COUNT.set(led)

    async def run_metadata_digests(self, interval_s: float = 1.0) -> None:
        """Keep the metadata digests a new controller asks for at failover made ahead, in
        slices between requests: computed only when asked, the first failover after 1M
        partitions were created made every broker hash its whole cache at once, on the same
        cores as the new controller's start-up."""
        while True:
            await asyncio.sleep(interval_s)
            more = True
            while more:
                more = self.state.refresh_metadata_digests(DIGEST_SLICE)
                await asyncio.sleep(0)  # requests are applied between slices

    async def UpdateMetadata(
        self, request: broker_pb2.UpdateMetadataRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.UpdateMetadataResponse:
        async with self._lock:
            with gc_policy.no_collection_during("UpdateMetadata"):
                result = replica_manager.apply_update_metadata(self.state, request)
            self._record("UpdateMetadata", request, result)
        return broker_pb2.UpdateMetadataResponse(error_code=int(result.error), error_message=_message(result.error))

    async def LeaderAndIsr(
        self, request: broker_pb2.LeaderAndIsrRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.LeaderAndIsrResponse:
        async with self._lock:
            with gc_policy.no_collection_during("LeaderAndIsr"):
                result = replica_manager.apply_leader_and_isr(self.state, request)
            self._record("LeaderAndIsr", request, result)
        return broker_pb2.LeaderAndIsrResponse(
            error_code=int(result.error),
            error_message=_message(result.error),
            partition_errors=_partition_errors(result),
        )

    async def StopReplica(
        self, request: broker_pb2.StopReplicaRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.StopReplicaResponse:
        async with self._lock:
            result = replica_manager.apply_stop_replica(self.state, request)
            self._record("StopReplica", request, result)
        return broker_pb2.StopReplicaResponse(
            error_code=int(result.error),
            error_message=_message(result.error),
            partition_errors=_partition_errors(result),
        )

    async def DescribeReplicaEpochs(
        self, request: broker_pb2.DescribeReplicaEpochsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DescribeReplicaEpochsResponse:
        async with self._lock:
            result, answer = replica_manager.apply_describe_replica_epochs(self.state, request)
            self._record("DescribeReplicaEpochs", request, result)
        return broker_pb2.DescribeReplicaEpochsResponse(
            error_code=int(result.error),
            error_message=_message(result.error),
            topics=answer.topics,
            metadata_digests=answer.metadata_digests,
        )

    async def DescribeBroker(
        self, request: broker_pb2.DescribeBrokerRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DescribeBrokerResponse:
        state = self.state
        hosted, led = state.hosted_and_led()
        if request.counts_only:
            return broker_pb2.DescribeBrokerResponse(
                broker_id=state.broker_id,
                broker_epoch=state.broker_epoch,
                controller_epoch=state.controller_epoch,
                controller_id=state.controller_id,
                live_brokers=[state.live_brokers[b] for b in sorted(state.live_brokers)],
                update_metadata_count=state.update_metadata_count,
                registered=state.registered,
                log_dirs=list(state.log_dirs),
                offline_log_dirs=sorted(state.offline_log_dirs),
                controller_endpoint=state.controller_endpoint,
                metadata_partition_count=len(state.metadata),
                role_count=hosted,
                leader_count=led,
            )
        return broker_pb2.DescribeBrokerResponse(
            metadata_partition_count=len(state.metadata),
            role_count=hosted,
            leader_count=led,
            broker_id=state.broker_id,
            broker_epoch=state.broker_epoch,
            controller_epoch=state.controller_epoch,
            controller_id=state.controller_id,
            live_brokers=[state.live_brokers[b] for b in sorted(state.live_brokers)],
            metadata_partitions=[state.metadata[tp] for tp in sorted(state.metadata)],
            roles=[
                broker_pb2.PartitionRole(
                    topic=tp.topic,
                    partition=tp.partition,
                    role=role.role,
                    leader=role.leader,
                    leader_epoch=role.leader_epoch,
                    isr=list(role.isr),
                    replicas=list(role.replicas),
                    controller_epoch=role.controller_epoch,
                    zk_version=role.zk_version,
                    log_dir=state.log_dir_of(tp),
                )
                for tp, role in sorted(state.roles.items())
            ],
            update_metadata_count=state.update_metadata_count,
            registered=state.registered,
            log_dirs=list(state.log_dirs),
            offline_log_dirs=sorted(state.offline_log_dirs),
            controller_endpoint=state.controller_endpoint,
        )

    async def expand_caught_up_followers(self) -> int:
        """One round of the leader's ISR maintenance: followers that have been live for the
        catch-up delay rejoin the ISR (what Kafka's leader does once a follower's fetch
        offset reaches the high watermark)."""
        if self.zk is None or not self.state.registered:
            return 0
        async with self._lock:
            if self.state.generation != self._scanned_generation:
                self._candidates = isr.under_replicated_led(self.state)
                self._scanned_generation = self.state.generation
            if not self._candidates:
                return 0
            due = isr.caught_up_followers(
                # The loop's clock (virtual in the simulation tier), not the wall's.
                self.state, self._first_seen, asyncio.get_running_loop().time(), self.catchup_delay_s, self._candidates
            )
            if not due:
                return 0
            results = await isr.update_isrs(self.zk, self.state, due)
            self._candidates.difference_update(tp for tp, r in results.items() if r.error == ErrorCode.NONE)
            for tp, result in results.items():
                if result.error == ErrorCode.NONE:
                    self.state_log.record(
                        "partition.isr_changed",
                        topic=tp.topic,
                        partition=tp.partition,
                        isr=list(result.isr),
                        zk_version=result.zk_version,
                        reason="caught_up",
                        controller_epoch=self.state.controller_epoch,
                    )
            return sum(1 for r in results.values() if r.error == ErrorCode.NONE)

    async def run_isr_maintenance(self, interval_s: float = 0.2) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.expand_caught_up_followers()
            except ControllerError as e:
                log.warning("ISR maintenance failed this round: %s", e)

    async def SetReplicaLagging(
        self, request: broker_pb2.SetReplicaLaggingRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.SetReplicaLaggingResponse:
        if self.zk is None:
            return broker_pb2.SetReplicaLaggingResponse(error_code=int(ErrorCode.BROKER_NOT_AVAILABLE))
        tp = TopicPartition(request.topic, request.partition)
        async with self._lock:
            try:
                result = await isr.change_isr(self.zk, self.state, tp, request.replica, request.lagging)
            except ControllerError as e:
                log.warning("ISR change of %s failed: %s", tp, e)
                return broker_pb2.SetReplicaLaggingResponse(error_code=int(e.code), error_message=str(e))
            self.state.generation += 1
            if result.error == ErrorCode.NONE and result.zk_version >= 0:
                self.state_log.record(
                    "partition.isr_changed",
                    topic=tp.topic,
                    partition=tp.partition,
                    isr=list(result.isr),
                    zk_version=result.zk_version,
                    replica=request.replica,
                    lagging=request.lagging,
                    controller_epoch=self.state.controller_epoch,
                )
        return broker_pb2.SetReplicaLaggingResponse(
            error_code=int(result.error),
            error_message=result.message,
            isr=list(result.isr),
            zk_version=result.zk_version,
        )

    async def FailLogDir(
        self, request: broker_pb2.FailLogDirRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.FailLogDirResponse:
        state = self.state
        if request.log_dir not in state.log_dirs:
            return broker_pb2.FailLogDirResponse(
                error_code=int(ErrorCode.INVALID_REQUEST),
                error_message=f"unknown log dir {request.log_dir!r}; this broker has {list(state.log_dirs)}",
            )
        async with self._lock:
            if request.log_dir in state.offline_log_dirs:
                return broker_pb2.FailLogDirResponse(error_message="already offline")
            state.offline_log_dirs.add(request.log_dir)
            state.generation += 1
            offline = sorted(tp for tp in state.roles if state.log_dir_of(tp) == request.log_dir)
            for tp in offline:
                role = state.roles[tp]
                state.roles[tp] = role._replace(role="stopped")
                self.state_log.record(
                    "partition.role_changed",
                    topic=tp.topic,
                    partition=tp.partition,
                    role="stopped",
                    leader=role.leader,
                    leader_epoch=role.leader_epoch,
                    isr=list(role.isr),
                    controller_epoch=state.controller_epoch,
                    reason="log_dir_failure",
                )
            log.error(
                "broker %d: log dir %s failed; %d replicas offline", state.broker_id, request.log_dir, len(offline)
            )
            self.state_log.record(
                "broker.log_dir_failed", broker_id=state.broker_id, log_dir=request.log_dir, partitions=len(offline)
            )
            if self.zk is not None:
                await isr.write_log_dir_event(self.zk, state.broker_id)
        return broker_pb2.FailLogDirResponse(
            offline_partitions=[
                common_pb2.PartitionError(
                    topic=tp.topic, partition=tp.partition, error_code=int(ErrorCode.KAFKA_STORAGE_ERROR)
                )
                for tp in offline
            ]
        )


def _message(error: ErrorCode) -> str:
    return "" if error == ErrorCode.NONE else error.name


def _partition_errors(result: replica_manager.ApplyResult) -> list[common_pb2.PartitionError]:
    return [
        common_pb2.PartitionError(topic=tp.topic, partition=tp.partition, error_code=int(code))
        for tp, code in sorted(result.partition_errors.items())
    ]
