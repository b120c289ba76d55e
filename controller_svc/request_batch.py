"""Building control requests from the controller context (ControllerBrokerRequestBatch).

Pure: it turns context data into protobuf messages; the channel manager sends them.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller_svc.context import ControllerContext
from controller_svc.model import NO_LEADER, BrokerInfo, TopicPartition
from kcontroller.v1 import broker_pb2, common_pb2


def live_broker_message(info: BrokerInfo) -> common_pb2.LiveBroker:
    return common_pb2.LiveBroker(
        id=info.broker_id,
        endpoints=[
            common_pb2.Endpoint(listener=e.listener, host=e.host, port=e.port, security_protocol=e.security_protocol)
            for e in info.endpoints
        ],
        rack=info.rack or "",
        broker_epoch=info.epoch,
    )


def metadata_partition_state(ctx: ControllerContext, tp: TopicPartition) -> common_pb2.PartitionState:
    """UpdateMetadataPartitionState of one partition; a partition with no state znode yet
    is announced without a leader."""
    state = ctx.partition_states.get(tp)
    replicas = ctx.replicas(tp)
    return common_pb2.PartitionState(
        topic=tp.topic,
        partition=tp.partition,
        controller_epoch=state.controller_epoch if state else ctx.epoch,
        leader=state.leader if state else NO_LEADER,
        leader_epoch=state.leader_epoch if state else -1,
        isr=list(state.isr) if state else [],
        zk_version=state.zk_version if state else -1,
        replicas=list(replicas),
        offline_replicas=list(ctx.offline_replicas(tp)),
    )


def build_update_metadata(
    controller_id: int,
    ctx: ControllerContext,
    broker_id: int,
    partitions: Iterable[TopicPartition],
) -> broker_pb2.UpdateMetadataRequest:
    """An UpdateMetadata for one broker, carrying that broker's epoch (KIP-380) and every
    live or shutting-down broker."""
    return broker_pb2.UpdateMetadataRequest(
        controller_id=controller_id,
        controller_epoch=ctx.epoch,
        broker_epoch=ctx.broker_epoch(broker_id),
        partition_states=[metadata_partition_state(ctx, tp) for tp in sorted(partitions)],
        live_brokers=[live_broker_message(ctx.live_brokers[b]) for b in sorted(ctx.live_brokers)],
    )
