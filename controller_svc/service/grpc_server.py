"""The controller's gRPC service (kcontroller.v1.Controller). Handlers only enqueue events
and await their replies; a controller that is not active answers NOT_CONTROLLER (41)
naming the active controller."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, TypeVar

import grpc

from controller_svc.common import metrics
from controller_svc.common.errors import ControllerError, ErrorCode, NotControllerError
from controller_svc.controller import events as ev
from controller_svc.controller.controller import Controller
from controller_svc.controller.topic_admin import CreateTopicResult
from controller_svc.core.request_batch import live_broker_message
from kcontroller.v1 import controller_pb2, controller_pb2_grpc

log = logging.getLogger(__name__)

T = TypeVar("T")

SERVICE_NAME = controller_pb2.DESCRIPTOR.services_by_name["Controller"].full_name


class ControllerService(controller_pb2_grpc.ControllerServicer):
    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    async def _submit(self, api: str, event: ev.AdminRequest, response_type: type[T]) -> tuple[Any, T | None]:
        """Queue the event; on NOT_CONTROLLER (or another controller error) build the error
        response naming the active controller."""
        try:
            return await self.controller.submit(event), None
        except NotControllerError as e:
            metrics.ADMIN_REQUEST_ERRORS.labels(api, "NOT_CONTROLLER").inc()
            return None, response_type(  # type: ignore[call-arg]
                error_code=int(e.code), error_message=str(e), active_controller=await self._active_controller()
            )
        except ControllerError as e:
            metrics.ADMIN_REQUEST_ERRORS.labels(api, e.code.name).inc()
            return None, response_type(error_code=int(e.code), error_message=str(e))  # type: ignore[call-arg]

    def _future(self) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    async def DeleteTopics(
        self, request: controller_pb2.DeleteTopicsRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.DeleteTopicsResponse:
        results, error = await self._submit(
            "DeleteTopics",
            ev.DeleteTopics(reply=self._future(), topics=tuple(request.topics)),
            controller_pb2.DeleteTopicsResponse,
        )
        if error is not None:
            return error
        return controller_pb2.DeleteTopicsResponse(
            topics=[
                controller_pb2.DeletableTopicResult(name=name, error_code=code, error_message=message)
                for name, code, message in results
            ]
        )

    async def AlterPartitionReassignments(
        self, request: controller_pb2.AlterPartitionReassignmentsRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.AlterPartitionReassignmentsResponse:
        requests = tuple((p.topic, p.partition, None if p.cancel else tuple(p.replicas)) for p in request.partitions)
        results, error = await self._submit(
            "AlterPartitionReassignments",
            ev.ApiPartitionReassignment(reply=self._future(), requests=requests),
            controller_pb2.AlterPartitionReassignmentsResponse,
        )
        if error is not None:
            return error
        return controller_pb2.AlterPartitionReassignmentsResponse(
            partitions=[
                controller_pb2.ReassignablePartitionResult(
                    topic=r.tp.topic, partition=r.tp.partition, error_code=r.error_code, error_message=r.message
                )
                for r in results
            ]
        )

    async def ListPartitionReassignments(
        self, request: controller_pb2.ListPartitionReassignmentsRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.ListPartitionReassignmentsResponse:
        listing, error = await self._submit(
            "ListPartitionReassignments",
            ev.ListPartitionReassignments(
                reply=self._future(), partitions=tuple((p.topic, p.partition) for p in request.partitions)
            ),
            controller_pb2.ListPartitionReassignmentsResponse,
        )
        if error is not None:
            return error
        return controller_pb2.ListPartitionReassignmentsResponse(
            reassignments=[
                controller_pb2.OngoingPartitionReassignment(
                    topic=tp.topic,
                    partition=tp.partition,
                    replicas=list(assignment.replicas),
                    adding_replicas=list(assignment.adding),
                    removing_replicas=list(assignment.removing),
                    isr=list(state.isr) if state else [],
                    leader=state.leader if state else -1,
                )
                for tp, assignment, state in listing
            ]
        )

    async def ElectLeaders(
        self, request: controller_pb2.ElectLeadersRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.ElectLeadersResponse:
        election_type = "unclean" if request.election_type == controller_pb2.UNCLEAN else "preferred"
        outcomes, error = await self._submit(
            "ElectLeaders",
            ev.ElectLeaders(
                reply=self._future(),
                partitions=tuple((p.topic, p.partition) for p in request.partitions),
                election_type=election_type,
            ),
            controller_pb2.ElectLeadersResponse,
        )
        if error is not None:
            return error
        return controller_pb2.ElectLeadersResponse(
            partitions=[
                controller_pb2.PartitionElectionResult(
                    topic=o.tp.topic,
                    partition=o.tp.partition,
                    error_code=o.error_code,
                    error_message=o.message,
                    leader=o.leader,
                )
                for o in outcomes
            ]
        )

    async def ControlledShutdown(
        self, request: controller_pb2.ControlledShutdownRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.ControlledShutdownResponse:
        outcome, error = await self._submit(
            "ControlledShutdown",
            ev.ControlledShutdown(reply=self._future(), broker_id=request.broker_id, broker_epoch=request.broker_epoch),
            controller_pb2.ControlledShutdownResponse,
        )
        if error is not None:
            return error
        if outcome.error_code:
            metrics.ADMIN_REQUEST_ERRORS.labels("ControlledShutdown", ErrorCode(outcome.error_code).name).inc()
            log.warning("ControlledShutdown of broker %d refused: %s", request.broker_id, outcome.message)
        return controller_pb2.ControlledShutdownResponse(
            error_code=outcome.error_code,
            error_message=outcome.message,
            remaining_partitions=[
                controller_pb2.TopicPartitionRef(topic=tp.topic, partition=tp.partition) for tp in outcome.remaining
            ],
        )

    async def _active_controller(self) -> controller_pb2.ControllerEndpoint:
        active = self.controller.active_controller_id
        return controller_pb2.ControllerEndpoint(id=active, grpc=await self.controller.controller_endpoint(active))

    async def DescribeCluster(
        self, request: controller_pb2.DescribeClusterRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.DescribeClusterResponse:
        try:
            description = await self.controller.describe(request.include_partitions, tuple(request.topics))
        except ControllerError as e:
            return controller_pb2.DescribeClusterResponse(
                error_code=int(e.code), error_message=str(e), responder_id=self.controller.id
            )
        response = controller_pb2.DescribeClusterResponse(
            responder_id=description.responder_id,
            responder_active=description.active,
            active_controller=controller_pb2.ControllerEndpoint(
                id=description.active_controller_id, grpc=description.active_controller_endpoint
            ),
            controller_epoch=description.controller_epoch,
            live_brokers=[live_broker_message(b) for b in description.live_brokers],
            partition_count=description.partition_count,
            topic_count=description.topic_count,
            offline_partition_count=description.offline_partition_count,
            preferred_replica_imbalance_count=description.preferred_replica_imbalance_count,
            topic_ids=dict(description.topic_ids),
        )
        live = {b.broker_id for b in description.live_brokers}
        for tp, assignment, state in description.partitions:
            replicas = list(assignment.replicas) if assignment else []
            response.partitions.append(
                controller_pb2.PartitionDescription(
                    topic=tp.topic,
                    partition=tp.partition,
                    replicas=replicas,
                    adding_replicas=list(assignment.adding) if assignment else [],
                    removing_replicas=list(assignment.removing) if assignment else [],
                    leader=state.leader if state else -1,
                    leader_epoch=state.leader_epoch if state else -1,
                    isr=list(state.isr) if state else [],
                    zk_version=state.zk_version if state else -1,
                    offline_replicas=[r for r in replicas if r not in live],
                    has_state=state is not None,
                )
            )
        if not description.active:
            response.error_code = int(ErrorCode.NOT_CONTROLLER)
            response.error_message = (
                f"controller {description.responder_id} is not active; the active controller is "
                f"{description.active_controller_id} at {description.active_controller_endpoint or '?'}"
            )
        return response

    async def CreateTopics(
        self, request: controller_pb2.CreateTopicsRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.CreateTopicsResponse:
        topics = tuple(
            ev.NewTopic(
                name=t.name,
                partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                assignment=tuple((a.partition, tuple(a.replicas)) for a in t.assignments),
                configs=tuple(sorted(t.configs.items())),
            )
            for t in request.topics
        )
        reply: asyncio.Future[list[CreateTopicResult]] = asyncio.get_running_loop().create_future()
        try:
            results = await self.controller.submit(
                ev.CreateTopics(reply=reply, topics=topics, validate_only=request.validate_only)
            )
        except NotControllerError as e:
            metrics.ADMIN_REQUEST_ERRORS.labels("CreateTopics", "NOT_CONTROLLER").inc()
            return controller_pb2.CreateTopicsResponse(
                error_code=int(e.code), error_message=str(e), active_controller=await self._active_controller()
            )
        except ControllerError as e:
            return controller_pb2.CreateTopicsResponse(error_code=int(e.code), error_message=str(e))
        return controller_pb2.CreateTopicsResponse(
            topics=[
                controller_pb2.CreatableTopicResult(
                    name=r.name,
                    error_code=r.error_code,
                    error_message=r.error_message,
                    topic_id=r.topic_id,
                    assignments=[
                        controller_pb2.ReplicaAssignment(partition=p, replicas=list(rs))
                        for p, rs in sorted(r.assignment.items())
                    ],
                )
                for r in results
            ]
        )
