"""ControllerChannelManager's metrics with a fake transport: QueueSize per broker, TotalQueueSize
kept current as requests leave the queues, and a removed broker's series gone."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import REGISTRY

from controller_svc.adapters.channel_manager import ApiKind, ChannelManager
from controller_svc.common.model import BrokerInfo, EndPoint
from controller_svc.common.state_change_log import StateChangeLog
from kcontroller.v1 import broker_pb2


class BlockingClient:
    """Holds every request until released, so queues fill up behind the one in flight."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.sent = 0

    async def send(self, api: ApiKind, request: Any, timeout_s: float) -> Any:
        await self.release.wait()
        self.sent += 1
        return broker_pb2.UpdateMetadataResponse(error_code=0)

    async def close(self) -> None:
        pass


def broker(broker_id: int) -> BrokerInfo:
    return BrokerInfo(broker_id, (EndPoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id, "PLAINTEXT"),), None, 10)


def sample(name: str, broker_id: int | None = None, quantile: str | None = None) -> float | None:
    labels = {} if broker_id is None else {"broker_id": str(broker_id)}
    if quantile is not None:
        labels["quantile"] = quantile
    return REGISTRY.get_sample_value(name, labels)


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


QUEUE = "kafka_controller_controllerchannelmanager_queuesize"
TOTAL = "kafka_controller_controllerchannelmanager_totalqueuesize"
QUEUE_TIME = "kafka_controller_controllerchannelmanager_requestrateandqueuetimems"


async def test_queue_sizes_follow_the_queues_and_a_removed_broker_disappears() -> None:
    clients = {1: BlockingClient(), 2: BlockingClient()}
    channels = ChannelManager(
        1, StateChangeLog(None, "controller-1"), 5.0, client_factory=lambda i: clients[i.broker_id]
    )
    for broker_id in (1, 2):
        channels.add_broker(broker(broker_id))
    request = broker_pb2.UpdateMetadataRequest(controller_id=1, controller_epoch=1)
    for _ in range(3):
        assert channels.send(1, "UpdateMetadata", request)
    assert channels.send(2, "UpdateMetadata", request)
    await settle()
    # One request in flight per broker; the rest wait in the queues.
    assert sample(QUEUE, 1) == 2
    assert sample(QUEUE, 2) == 0
    assert sample(TOTAL) == 2
    assert sample(QUEUE_TIME + "_count", 1) == 1

    clients[2].release.set()
    await settle()
    assert clients[2].sent == 1

    channels.remove_broker(1)  # broker 1 died with two requests queued
    assert sample(TOTAL) == 0
    for _ in range(2):  # gone at once, and the cancelled sender does not bring them back
        assert sample(QUEUE, 1) is None
        assert sample(QUEUE_TIME + "_count", 1) is None
        assert sample(QUEUE_TIME, 1, quantile="0.99") is None
        await settle()
    assert sample(QUEUE_TIME + "_count", 2) == 1

    # A bounce: the same broker id again starts with fresh series.
    clients[1] = BlockingClient()
    channels.add_broker(broker(1))
    channels.send(1, "UpdateMetadata", request)
    await settle()
    assert sample(QUEUE_TIME + "_count", 1) == 1 and sample(QUEUE, 1) == 0

    await channels.close()
    assert sample(TOTAL) == 0
    assert sample(QUEUE, 2) is None


async def test_total_queue_size_drains_as_requests_are_sent() -> None:
    client = BlockingClient()
    channels = ChannelManager(1, StateChangeLog(None, "controller-1"), 5.0, client_factory=lambda _: client)
    channels.add_broker(broker(7))
    request = broker_pb2.UpdateMetadataRequest(controller_id=1, controller_epoch=1)
    for _ in range(4):
        channels.send(7, "UpdateMetadata", request)
    await settle()
    assert sample(TOTAL) == 3
    client.release.set()
    await settle()
    assert client.sent == 4
    assert sample(TOTAL) == 0 and sample(QUEUE, 7) == 0
    await channels.close()


async def test_an_endpoint_change_moves_the_channel_and_keeps_the_queue() -> None:
    """processBrokerModification: a live broker whose endpoints changed keeps its queued
    requests; later sends (and resends) go to the new endpoint."""
    made: list[tuple[int, int, BlockingClient]] = []

    def factory(info: BrokerInfo) -> BlockingClient:
        client = BlockingClient()
        made.append((info.broker_id, info.endpoints[0].port, client))
        return client

    channels = ChannelManager(1, StateChangeLog(None, "controller-1"), 5.0, client_factory=factory)
    channels.add_broker(broker(3))
    for _ in range(3):
        channels.send(3, "UpdateMetadata", broker_pb2.UpdateMetadataRequest())
    await settle()
    assert channels.queue_size(3) == 2  # one in flight on the old channel, two queued
    moved = BrokerInfo(3, (EndPoint("PLAINTEXT", "127.0.0.1", 7777, "PLAINTEXT"),), None, 10)
    channels.update_broker(moved)
    assert channels.broker_ids == {3} and channels.queue_size(3) == 2
    (_, old_port, old), (_, new_port, new) = made
    assert (old_port, new_port) == (9003, 7777)
    old.release.set()  # the request in flight completes on the old channel
    new.release.set()
    for _ in range(20):
        await settle()
    assert old.sent == 1 and new.sent == 2 and channels.queue_size(3) == 0
    await channels.close()
