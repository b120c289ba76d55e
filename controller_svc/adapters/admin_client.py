"""Client side of the Controller service: finds the active controller from ZooKeeper alone
(/controller names it; /kcontroller/controllers/<id> holds its endpoint) or from any
controller, and follows NOT_CONTROLLER answers to the active one."""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from controller_svc.adapters.admin_errors import AdminError as AdminError
from controller_svc.adapters.zk import codecs, paths
from controller_svc.adapters.zk.client import ZkClient
from controller_svc.common import grpc_common, tls
from controller_svc.common.errors import CorruptZnodeError, ErrorCode
from kcontroller.v1 import controller_pb2, controller_pb2_grpc

T = TypeVar("T")

MAX_REDIRECTS = 3


async def find_active_controller(zookeeper: str, timeout_s: float = 30.0) -> str:
    """The active controller's gRPC endpoint, waiting up to `timeout_s` for an election or
    for a freshly elected controller to publish its endpoint."""
    zk = ZkClient(zookeeper, 10000)
    await zk.start(timeout_s=min(timeout_s, 10.0))
    deadline = asyncio.get_running_loop().time() + timeout_s
    try:
        while True:
            try:
                return await read_active_endpoint(zk)
            except AdminError:
                if asyncio.get_running_loop().time() >= deadline:
                    raise
                await asyncio.sleep(0.2)
    finally:
        await zk.close()


async def read_active_endpoint(zk: ZkClient) -> str:
    got = await zk.get_or_none(paths.CONTROLLER)
    if got is None:
        raise AdminError("no active controller: /controller does not exist", ErrorCode.NOT_CONTROLLER)
    try:
        controller_id = codecs.decode_controller(got[0]).broker_id
    except CorruptZnodeError as e:
        raise AdminError(str(e), ErrorCode.NOT_CONTROLLER) from e
    path = paths.controller_endpoint_path(controller_id)
    endpoint = await zk.get_or_none(path)
    if endpoint is None or endpoint[1].ephemeral_owner != got[1].ephemeral_owner:
        raise AdminError(f"controller {controller_id} has not published its endpoint yet", ErrorCode.NOT_CONTROLLER)
    return codecs.decode_controller_endpoint(path, endpoint[0])


def zookeeper_of_cluster_dir(directory: str) -> str:
    path = pathlib.Path(directory) / "cluster.json"
    try:
        return str(json.loads(path.read_text())["zookeeper"])
    except (OSError, ValueError, KeyError) as e:
        raise AdminError(f"cannot read the cluster's ZooKeeper from {path}: {e}") from e


class AdminClient:
    def __init__(
        self,
        controller: str | None = None,
        zookeeper: str | None = None,
        timeout_s: float = 30.0,
        tls_files: tls.TlsFiles | None = None,
    ) -> None:
        # Mutual TLS from KCONTROLLER_GRPC_TLS_* unless given (the CLI's admin certificate).
        self.tls = tls_files if tls_files is not None else tls.from_env()
        if not controller and not zookeeper:
            raise AdminError("give a controller address or a ZooKeeper connect string")
        self.controller = controller
        self.zookeeper = zookeeper
        self.timeout_s = timeout_s

    async def _address(self) -> str:
        if self.controller:
            return self.controller
        assert self.zookeeper is not None
        self.controller = await find_active_controller(self.zookeeper)
        return self.controller

    async def _call(
        self, method: Callable[[controller_pb2_grpc.ControllerStub], Callable[..., Awaitable[T]]], request: Any
    ) -> T:
        address = await self._address()
        for _ in range(MAX_REDIRECTS + 1):
            async with tls.aio_channel(address, self.tls, grpc_common.CLIENT_OPTIONS) as channel:
                try:
                    response = await method(controller_pb2_grpc.ControllerStub(channel))(
                        request, timeout=self.timeout_s
                    )
                except grpc.aio.AioRpcError as e:
                    raise AdminError(f"controller at {address}: {e.code().name} {e.details()}") from e
            if getattr(response, "error_code", 0) != ErrorCode.NOT_CONTROLLER:
                return response
            answer: Any = response
            redirect = answer.active_controller.grpc
            if not redirect or redirect == address:
                raise AdminError(
                    f"controller at {address} is not active and knows no active controller: {answer.error_message}",
                    ErrorCode.NOT_CONTROLLER,
                )
            address = self.controller = redirect
        raise AdminError("too many NOT_CONTROLLER redirects", ErrorCode.NOT_CONTROLLER)

    async def describe_cluster(
        self, include_partitions: bool = False, topics: list[str] | None = None
    ) -> controller_pb2.DescribeClusterResponse:
        return await self._call(
            lambda stub: stub.DescribeCluster,
            controller_pb2.DescribeClusterRequest(include_partitions=include_partitions, topics=topics or []),
        )

    async def create_topics(self, request: controller_pb2.CreateTopicsRequest) -> controller_pb2.CreateTopicsResponse:
        return await self._call(lambda stub: stub.CreateTopics, request)

    async def delete_topics(self, topics: list[str]) -> controller_pb2.DeleteTopicsResponse:
        return await self._call(lambda stub: stub.DeleteTopics, controller_pb2.DeleteTopicsRequest(topics=topics))

    async def alter_reassignments(
        self, plan: list[tuple[str, int, list[int] | None]]
    ) -> controller_pb2.AlterPartitionReassignmentsResponse:
        request = controller_pb2.AlterPartitionReassignmentsRequest(
            partitions=[
                controller_pb2.ReassignablePartition(topic=t, partition=p, replicas=r or [], cancel=r is None)
                for t, p, r in plan
            ]
        )
        return await self._call(lambda stub: stub.AlterPartitionReassignments, request)

    async def list_reassignments(
        self, partitions: list[tuple[str, int]] | None = None
    ) -> controller_pb2.ListPartitionReassignmentsResponse:
        request = controller_pb2.ListPartitionReassignmentsRequest(
            partitions=[controller_pb2.TopicPartitionRef(topic=t, partition=p) for t, p in partitions or []]
        )
        return await self._call(lambda stub: stub.ListPartitionReassignments, request)

    async def elect_leaders(
        self, election_type: str, partitions: list[tuple[str, int]] | None = None
    ) -> controller_pb2.ElectLeadersResponse:
        request = controller_pb2.ElectLeadersRequest(
            election_type=controller_pb2.UNCLEAN if election_type == "unclean" else controller_pb2.PREFERRED,
            partitions=[controller_pb2.TopicPartitionRef(topic=t, partition=p) for t, p in partitions or []],
        )
        return await self._call(lambda stub: stub.ElectLeaders, request)
