"""The broker applies a large control request in slices, the loop free between them, and stops
applying anything once its shutdown is past the controlled shutdown (broker_stub/server.py)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import grpc
import pytest

from broker_stub import replica_manager, server
from broker_stub.server import APPLY_SLICE, BrokerControlService
from broker_stub.state import BrokerState, PartitionRole
from controller_svc.common.errors import ErrorCode
from controller_svc.common.model import TopicPartition
from controller_svc.common.state_change_log import StateChangeLog
from kcontroller.v1 import broker_pb2, common_pb2


class RecordingLog(StateChangeLog):
    def __init__(self) -> None:
        super().__init__(None, "broker-1")
        self.records: list[tuple[str, dict[str, Any]]] = []
        self.role_changes_logged = asyncio.Event()  # set by the first slice's role changes

    def record(self, kind: str, **fields: Any) -> None:
        self.records.append((kind, fields))

    def record_many(self, kind: str, rows: Any) -> None:
        self.records.extend((kind, row) for row in rows)
        if kind == "partition.role_changed":
            self.role_changes_logged.set()


def _state() -> BrokerState:
    state = BrokerState(broker_id=1, broker_epoch=5, controller_epoch=1)
    for p in range(0, 3 * APPLY_SLICE, 2):  # half the partitions known, as leader at epoch 3
        state.roles[TopicPartition("t", p)] = PartitionRole("leader", 1, 3, (1, 2), (1, 2), 1, 0)
    return state


def _leader_and_isr(partitions: int, leader_epoch: int = 4) -> broker_pb2.LeaderAndIsrRequest:
    return broker_pb2.LeaderAndIsrRequest(
        controller_id=9,
        controller_epoch=2,
        broker_epoch=5,
        partition_states=[
            common_pb2.PartitionState(
                topic="t",
                partition=p,
                controller_epoch=2,
                leader=2,
                # every fifth partition is fenced (stale leader epoch) where a role exists
                leader_epoch=3 if p % 5 == 0 else leader_epoch,
                isr=[2],
                zk_version=1,
                replicas=[1, 2],
            )
            for p in range(partitions)
        ],
    )


class Ticker:
    """Counts the loop's turns while a handler runs."""

    def __init__(self) -> None:
        self.ticks = 0
        self.stopped = False

    async def run(self) -> None:
        while not self.stopped:
            self.ticks += 1
            await asyncio.sleep(0)


async def test_a_large_request_is_applied_in_slices_with_the_loop_free_between_them() -> None:
    request = _leader_and_isr(3 * APPLY_SLICE + 7)
    expected_state = _state()
    expected = replica_manager.apply_leader_and_isr(expected_state, request)
    state, log = _state(), RecordingLog()
    service = BrokerControlService(state, log)
    ticker = Ticker()
    ticking = asyncio.ensure_future(ticker.run())
    await asyncio.sleep(0)
    before = ticker.ticks
    response = await service.LeaderAndIsr(request, None)  # type: ignore[arg-type]
    ticker.stopped = True
    await ticking
    assert ticker.ticks - before >= 3  # one turn of the loop between each two of the 4 slices
    assert dict(state.roles) == dict(expected_state.roles)
    assert state.hosted_and_led() == expected_state.hosted_and_led()
    assert state.role_epochs_by_topic() == expected_state.role_epochs_by_topic()
    assert state.generation == expected_state.generation and state.controller_epoch == 2
    assert [(e.topic, e.partition, e.error_code) for e in response.partition_errors] == [
        (tp.topic, tp.partition, int(code)) for tp, code in expected.partition_errors.items()
    ]
    assert any(e.error_code == ErrorCode.STALE_CONTROLLER_EPOCH for e in response.partition_errors)
    kinds = [kind for kind, _ in log.records]
    assert kinds[0] == "request.received"
    assert kinds.count("partition.role_changed") == len(expected.role_changes)


async def test_update_metadata_and_stop_replica_in_slices_equal_the_request_applied_at_once() -> None:
    metadata = broker_pb2.UpdateMetadataRequest(
        controller_id=9,
        controller_epoch=2,
        broker_epoch=5,
        partition_states=[
            common_pb2.PartitionState(topic="t", partition=p, leader=1 + p % 2, leader_epoch=4, replicas=[1, 2])
            for p in range(2 * APPLY_SLICE + 1)
        ],
    )
    stop = broker_pb2.StopReplicaRequest(
        controller_id=9,
        controller_epoch=2,
        broker_epoch=5,
        partitions=[
            broker_pb2.StopReplicaPartition(topic="t", partition=p, leader_epoch=5, delete_partition=p % 3 == 0)
            for p in range(2 * APPLY_SLICE + 1)
        ],
    )
    expected_state = _state()
    replica_manager.apply_update_metadata(expected_state, metadata)
    expected_stop = replica_manager.apply_stop_replica(expected_state, stop)
    state = _state()
    service = BrokerControlService(state, RecordingLog())
    await service.UpdateMetadata(metadata, None)  # type: ignore[arg-type]
    response = await service.StopReplica(stop, None)  # type: ignore[arg-type]
    assert dict(state.metadata) == dict(expected_state.metadata)
    assert state.update_metadata_count == expected_state.update_metadata_count == 1
    assert dict(state.roles) == dict(expected_state.roles)
    assert len(response.partition_errors) == len(expected_stop.partition_errors)


class AbortingContext:
    """What grpc.aio's context.abort does: raise, ending the RPC with that status."""

    def __init__(self) -> None:
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise grpc.aio.AbortError()


async def test_after_stop_applying_the_request_in_progress_stops_and_every_request_fails_unavailable() -> None:
    state, log = _state(), RecordingLog()
    service = BrokerControlService(state, log)
    before = server.metrics.REQUESTS.labels("LeaderAndIsr", "refused_stopping")._value.get()
    context = AbortingContext()
    handler = asyncio.ensure_future(service.LeaderAndIsr(_leader_and_isr(3 * APPLY_SLICE), context))  # type: ignore[arg-type]
    await log.role_changes_logged.wait()  # the first slice is applied
    service.stop_applying()
    with pytest.raises(grpc.aio.AbortError):
        await handler
    assert context.aborted is not None and context.aborted[0] is grpc.StatusCode.UNAVAILABLE
    roles = [state.roles.get(TopicPartition("t", p)) for p in range(3 * APPLY_SLICE)]
    applied = [p for p, role in enumerate(roles) if role is not None and role.leader == 2]
    assert applied and max(applied) < APPLY_SLICE  # nothing after the first slice
    metadata = broker_pb2.UpdateMetadataRequest(controller_epoch=2, broker_epoch=5)
    epochs = broker_pb2.DescribeReplicaEpochsRequest(controller_epoch=2, broker_epoch=5)
    for call in (
        service.UpdateMetadata(metadata, None),  # type: ignore[arg-type]
        service.DescribeReplicaEpochs(epochs, None),  # type: ignore[arg-type]
    ):
        with pytest.raises(ConnectionError):  # without a gRPC context (the simulation's transport)
            await call
    assert server.metrics.REQUESTS.labels("LeaderAndIsr", "refused_stopping")._value.get() == before + 1


@pytest.mark.parametrize("seed", range(6))
def test_the_leader_and_isr_response_is_the_one_protobuf_builds(seed: int) -> None:
    rng = random.Random(seed)
    result = replica_manager.ApplyResult()
    topics = ["t", "", "ünïcode-topic", "x" * 200, "a.b_c-1"]
    for _ in range(rng.randrange(0, 400)):
        tp = TopicPartition(rng.choice(topics), rng.choice([0, 1, 127, 128, 16383, 16384, rng.randrange(1 << 31)]))
        result.partition_errors[tp] = rng.choice(list(ErrorCode))
    result.error = rng.choice([ErrorCode.NONE, ErrorCode.NONE, ErrorCode.STALE_CONTROLLER_EPOCH])
    built = broker_pb2.LeaderAndIsrResponse(
        error_code=int(result.error),
        error_message="" if result.error == ErrorCode.NONE else result.error.name,
        partition_errors=[
            common_pb2.PartitionError(topic=tp.topic, partition=tp.partition, error_code=int(code))
            for tp, code in result.partition_errors.items()
        ],
    )
    encoded = server._leader_and_isr_response(result)
    assert encoded == built
    assert encoded.SerializeToString(deterministic=True) == built.SerializeToString(deterministic=True)
