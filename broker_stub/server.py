"""The broker's gRPC service (kcontroller.v1.BrokerControl): fence, apply, log."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from broker_stub import isr, metrics, replica_manager
from broker_stub.replica_manager import ControlRequest
from broker_stub.state import BrokerState, PartitionRole
from controller_svc.adapters.zk import paths
from controller_svc.adapters.zk.client import ZkClient
from controller_svc.common import gc_policy, logging_setup
from controller_svc.common.errors import ControllerError, ErrorCode
from controller_svc.common.metadata_digest import varint
from controller_svc.common.model import TopicPartition
from controller_svc.common.state_change_log import StateChangeLog
from kcontroller.v1 import broker_pb2, broker_pb2_grpc, common_pb2

log = logging.getLogger(__name__)

SERVICE_NAME = broker_pb2.DESCRIPTOR.services_by_name["BrokerControl"].full_name
# Partitions whose metadata digests are made per slice in the background, their states
# serialized then (about 10 ms).
DIGEST_SLICE = 5_000
# Partitions of a control request applied between two yields to the loop (2-3 ms).
APPLY_SLICE = 500


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
        # Set once the broker is shutting down past its controlled shutdown (`stop_applying`).
        self._stopping = False

    def stop_applying(self) -> None:
        """From now on no control request is applied: a request in progress stops at its next
        slice and every one fails as UNAVAILABLE, which the controller's sender treats as a
        connection lost (it resends until the broker's deregistration removes it). Kafka's
        broker does the same at this point of its shutdown (the socket server stops processing
        requests right after the controlled shutdown): applying the controller's last requests
        to a broker about to exit only delayed its exit (its own demotion, 10k partitions, on
        cores the new leaders needed)."""
        self._stopping = True

    async def _refuse_when_stopping(self, api: str, context: grpc.aio.ServicerContext | None) -> None:
        if not self._stopping:
            return
        metrics.REQUESTS.labels(api, "refused_stopping").inc()
        if context is not None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "broker is shutting down")
        raise ConnectionError("broker is shutting down")

    def _record_received(self, api: str, request: ControlRequest, result: replica_manager.ApplyResult) -> None:
        controller_epoch = int(request.controller_epoch)
        metrics.REQUESTS.labels(api, "applied" if result.applied else "rejected").inc()
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

    def _record_role_changes(self, controller_epoch: int, changes: dict[TopicPartition, PartitionRole]) -> None:
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
                for tp, role in changes.items()
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

    async def run_metadata_digests(self, interval_s: float = 1.0, quiet_intervals_at_most: int = 5) -> None:
        """Keep the metadata digests a new controller asks for at failover made ahead, in
        slices between requests: computed only when asked, the first failover after 1M
        partitions were created made every broker hash its whole cache at once, on the same
        cores as the new controller's start-up. Made once an interval has passed with no
        control request applied (up to `quiet_intervals_at_most` intervals): a burst of them
        (a broker failure's) is applied first, and what it changed hashed after, when the
        controller and the other brokers no longer need the cores. A digest asked for before
        is made then (`BrokerState.metadata_digests`)."""
        while True:
            seen = self.state.generation
            await asyncio.sleep(interval_s)
            for _ in range(quiet_intervals_at_most - 1):
                if self.state.generation == seen:
                    break
                seen = self.state.generation
                await asyncio.sleep(interval_s)
            more = True
            while more:
                more = self.state.refresh_metadata_digests(DIGEST_SLICE)
                await asyncio.sleep(0)  # requests are applied between slices

    async def UpdateMetadata(
        self, request: broker_pb2.UpdateMetadataRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.UpdateMetadataResponse:
        async with self._lock:
            result = await self._apply_in_slices(
                "UpdateMetadata",
                request,
                context,
                request.partition_states,
                lambda partitions, _result: replica_manager.update_metadata_partitions(self.state, partitions),
            )
        return broker_pb2.UpdateMetadataResponse(error_code=int(result.error), error_message=_message(result.error))

    async def LeaderAndIsr(
        self, request: broker_pb2.LeaderAndIsrRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.LeaderAndIsrResponse:
        async with self._lock:
            result = await self._apply_in_slices(
                "LeaderAndIsr",
                request,
                context,
                request.partition_states,
                lambda partitions, result: replica_manager.leader_and_isr_partitions(self.state, partitions, result),
            )
        return _leader_and_isr_response(result)

    async def StopReplica(
        self, request: broker_pb2.StopReplicaRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.StopReplicaResponse:
        async with self._lock:
            result = await self._apply_in_slices(
                "StopReplica",
                request,
                context,
                request.partitions,
                lambda partitions, result: replica_manager.stop_replica_partitions(
                    self.state, partitions, request.controller_epoch, result
                ),
            )
        return broker_pb2.StopReplicaResponse(
            error_code=int(result.error),
            error_message=_message(result.error),
            partition_errors=_partition_errors(result),
        )

    async def _apply_in_slices(
        self,
        api: str,
        request: ControlRequest,
        context: grpc.aio.ServicerContext | None,
        partitions: Sequence[Any],
        apply_slice: Callable[[Sequence[Any], replica_manager.ApplyResult], dict[TopicPartition, PartitionRole] | None],
    ) -> replica_manager.ApplyResult:
        """Fence the request, then apply its partitions APPLY_SLICE at a time, yielding to the
        loop between slices (the caller holds the lock: requests still apply one at a time, in
        order). A 10k-partition LeaderAndIsr held the broker's loop for all of its application, and
        a shutting-down broker, whose own demotion is such a request, could act on its
        controller's answer only after it: each partition's change is whole, as in Kafka, where
        becomeLeaderOrFollower changes partitions one by one under their own locks."""
        await self._refuse_when_stopping(api, context)
        result = replica_manager.accept(self.state, request)
        self._record_received(api, request, result)
        if result.applied:
            with gc_policy.no_collection_during(api):
                for start in range(0, len(partitions), APPLY_SLICE):
                    if start:
                        await asyncio.sleep(0)
                        await self._refuse_when_stopping(api, context)
                    changes = apply_slice(partitions[start : start + APPLY_SLICE], result)
                    if changes:
                        self._record_role_changes(int(request.controller_epoch), changes)
            replica_manager.finish(self.state, request)
        self._update_gauges()
        return result

    async def DescribeReplicaEpochs(
        self, request: broker_pb2.DescribeReplicaEpochsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DescribeReplicaEpochsResponse:
        async with self._lock:
            await self._refuse_when_stopping("DescribeReplicaEpochs", context)
            result, answer = replica_manager.apply_describe_replica_epochs(self.state, request)
            self._record_received("DescribeReplicaEpochs", request, result)
            self._update_gauges()
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
                self._candidates = isr.expansion_candidates(self.state)
                self._scanned_generation = self.state.generation
            if not self._candidates:
                return 0
            due = isr.caught_up_followers(
                # The loop's clock (virtual in the simulation tier), not the wall's.
                self.state,
                self._first_seen,
                asyncio.get_running_loop().time(),
                self.catchup_delay_s,
                self._candidates,
            )
            if due:
                registered = {int(b) for b in await self.zk.get_children(paths.BROKER_IDS) if b.isdigit()}
                due = isr.registered_only(self.state, due, registered, self._first_seen)
            if not due:
                return 0
            results = await isr.update_isrs(self.zk, self.state, due)
            # A partition whose ISR took one returning follower while another still waits (it
            # came back later) stays: no control request may come to make a round look again.
            grown = [tp for tp, r in results.items() if r.error == ErrorCode.NONE]
            self._candidates.difference_update(tp for tp in grown if not isr.waits_for_a_follower(self.state, tp))
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
        for tp, code in result.partition_errors.items()
    ]


_LEADER_AND_ISR_ERRORS_TAG = bytes(
    [(broker_pb2.LeaderAndIsrResponse.DESCRIPTOR.fields_by_name["partition_errors"].number << 3) | 2]
)


# partition number -> its PartitionError.partition field (the same few thousand numbers recur)
_PARTITION_FIELDS: dict[int, bytes] = {}


def _leader_and_isr_response(result: replica_manager.ApplyResult) -> broker_pb2.LeaderAndIsrResponse:
    """The response lists every partition of the request with its error (as Kafka's does):
    10k message objects for a 10k-partition request took longer than applying it. Encoded as
    the response's fields directly (topic bytes once per topic) and parsed by upb, the same
    message results (`tests/unit/test_fencing.py` compares the two)."""
    chunks: list[bytes] = []
    topic: str | None = None
    topic_field = b""
    for tp, code in result.partition_errors.items():
        if tp[0] != topic:
            topic = tp[0]
            encoded = topic.encode()
            topic_field = b"\x0a" + varint(len(encoded)) + encoded
        error = int(code)
        if tp[1] < 0 or error < 0:  # negative int32s take ten bytes: upb's encoding
            body = common_pb2.PartitionError(topic=tp[0], partition=tp[1], error_code=error).SerializeToString()
        else:
            partition_field = _PARTITION_FIELDS.get(tp[1])
            if partition_field is None:
                partition_field = _PARTITION_FIELDS[tp[1]] = b"\x10" + varint(tp[1]) if tp[1] else b""
            body = topic_field + partition_field
            if error:
                body += b"\x18" + varint(error)
        chunks.append(_LEADER_AND_ISR_ERRORS_TAG + varint(len(body)) + body)
    response = broker_pb2.LeaderAndIsrResponse.FromString(b"".join(chunks))
    response.error_code = int(result.error)
    response.error_message = _message(result.error)
    return response
