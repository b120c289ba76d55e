"""StopReplica responses answer for topic deletion only for the partitions whose request had
delete=true (Kafka's sendStopReplicaRequests callback); before, any StopReplica response of a
replica in ReplicaDeletionStarted (a delete=false one of an earlier batch included) counted as
its deletion."""

from __future__ import annotations

from typing import Any

from controller_svc.common.model import TopicPartition
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.controller import events as ev
from controller_svc.controller.settings import ControllerSettings
from controller_svc.controller.term import TermOfOffice
from controller_svc.core.context import ControllerContext
from kcontroller.v1 import broker_pb2, common_pb2

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def term_recording_into(events: list[Any]) -> TermOfOffice:
    """A term that was never opened: only its response callbacks are used, and they only enqueue."""
    return TermOfOffice(
        ControllerSettings(1, "", ""),
        ControllerContext(),
        None,
        None,
        StateChangeLog(None, "t"),
        None,
        events.append,  # type: ignore[arg-type]
    )


def response(top_level: int = 0, **codes: int) -> broker_pb2.StopReplicaResponse:
    return broker_pb2.StopReplicaResponse(
        error_code=top_level,
        partition_errors=[
            common_pb2.PartitionError(topic="t", partition=int(p[1:]), error_code=c) for p, c in codes.items()
        ],
    )


async def test_only_deleted_partitions_answer_and_a_request_level_error_answers_for_each() -> None:
    events: list[Any] = []
    term = term_recording_into(events)
    term._on_stop_replica_response(2, response(p0=0, p1=0), frozenset({T1}))
    term._on_stop_replica_response(2, response(p0=0), frozenset({T1}))  # T1 not answered yet
    term._on_stop_replica_response(3, response(top_level=11), frozenset({T0, T1}))
    assert events == [
        ev.StopReplicaResponseReceived(broker_id=2, error_code=0, partition_errors=(("t", 1, 0),)),
        ev.StopReplicaResponseReceived(broker_id=3, error_code=11, partition_errors=(("t", 0, 11), ("t", 1, 11))),
    ]


async def test_a_closed_term_enqueues_nothing() -> None:
    """A response or watch that arrives after resignation belongs to a term that is over."""
    events: list[Any] = []
    term = term_recording_into(events)
    term.closed = True  # what close() sets first (its unwatching needs a store, absent here)
    term._on_stop_replica_response(2, response(p0=0), frozenset({T0}))
    for _children, _path, callback in term.watches():
        callback(None, _path)  # type: ignore[arg-type]
    assert events == []
