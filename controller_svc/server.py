"""The controller's gRPC service (kcontroller.v1.Controller). Handlers only enqueue events
and await their replies; a controller that is not active answers NOT_CONTROLLER (41)
naming the active controller."""

from __future__ import annotations

import logging

import grpc

from controller_svc.controller import Controller
from controller_svc.errors import ControllerError, ErrorCode
from controller_svc.request_batch import live_broker_message
from kcontroller.v1 import controller_pb2, controller_pb2_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = controller_pb2.DESCRIPTOR.services_by_name["Controller"].full_name


class ControllerService(controller_pb2_grpc.ControllerServicer):
    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    async def DescribeCluster(
        self, request: controller_pb2.DescribeClusterRequest, context: grpc.aio.ServicerContext
    ) -> controller_pb2.DescribeClusterResponse:
        try:
            description = await self.controller.describe()
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
        )
        if not description.active:
            response.error_code = int(ErrorCode.NOT_CONTROLLER)
            response.error_message = (
                f"controller {description.responder_id} is not active; the active controller is "
                f"{description.active_controller_id} at {description.active_controller_endpoint or '?'}"
            )
        return response
