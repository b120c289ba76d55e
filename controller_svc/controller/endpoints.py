"""Where controllers answer (their ephemeral /controller_endpoints entries) and the cluster
description a DescribeCluster RPC returns."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller_svc.adapters.zk import codecs, paths
from controller_svc.common.errors import ControllerError, CorruptZnodeError, ZkNodeExistsError
from controller_svc.common.model import TopicPartition
from controller_svc.controller import events as ev
from controller_svc.controller.partition_state_machine import PartitionStateMachine
from controller_svc.controller.ports import ControllerStore
from controller_svc.controller.settings import ControllerSettings
from controller_svc.core.context import ControllerContext

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    responder_id: int
    active: bool
    active_controller_id: int
    active_controller_endpoint: str
    controller_epoch: int
    live_brokers: tuple[Any, ...]
    topic_count: int
    partition_count: int
    offline_partition_count: int = 0
    preferred_replica_imbalance_count: int = 0
    partitions: tuple[tuple[TopicPartition, Any, Any], ...] = ()  # (tp, assignment, state)
    topic_ids: tuple[tuple[str, str], ...] = ()


async def register_endpoint(
    store: ControllerStore, settings: ControllerSettings, is_active: Callable[[], bool]
) -> None:
    """/controller_endpoints/<id>: where this controller answers (for NOT_CONTROLLER replies and
    discovery). Ephemeral; retried until it is ours."""
    path = paths.controller_endpoint_path(settings.controller_id)
    data = codecs.encode_controller_endpoint(settings.controller_id, settings.grpc_endpoint, settings.metrics_endpoint)
    while True:
        try:
            await store.create_ephemeral(path, data)
            return
        except ZkNodeExistsError:
            pass  # ours from before a reconnect, or another session's: read it below
        except ControllerError as e:
            log.warning("registering controller endpoint failed: %s", e)
        got = await store.get_or_none(path)
        if got is not None and got[1].ephemeral_owner == store.session_id:
            return
        if got is not None and is_active():
            # We hold /controller, so the id is ours: the old entry is from a previous run
            # of this controller whose session has not expired yet. Replace it.
            log.info("replacing %s left by session 0x%x", path, got[1].ephemeral_owner)
            try:
                await store.delete(path, version=got[1].version)
            except ControllerError:
                pass
            continue
        if got is not None:
            log.warning(
                "%s is held by another session (a previous run of controller %d?); waiting for it to expire",
                path,
                settings.controller_id,
            )
        await asyncio.sleep(1.0)


async def read_endpoint(store: ControllerStore, controller_id: int) -> str:
    if controller_id < 0:
        return ""
    got = await store.get_or_none(paths.controller_endpoint_path(controller_id))
    if got is None:
        return ""
    try:
        return codecs.decode_controller_endpoint(paths.controller_endpoint_path(controller_id), got[0])
    except CorruptZnodeError as e:
        log.warning("%s", e)
        return ""


def describe_cluster(
    responder_id: int,
    ctx: ControllerContext,
    psm: PartitionStateMachine | None,
    active_id: int,
    active_endpoint: str,
    request: ev.DescribeCluster,
) -> ClusterDescription:
    """The cluster as this controller sees it; partitions only from the active controller."""
    active = psm is not None
    partitions: tuple[tuple[TopicPartition, Any, Any], ...] = ()
    if request.include_partitions and active:
        wanted = set(request.topics)
        partitions = tuple(
            (tp, ctx.assignment(tp), ctx.partition_states.get(tp))
            for tp in sorted(ctx.all_partitions())
            if not wanted or tp.topic in wanted
        )
    return ClusterDescription(
        responder_id=responder_id,
        active=active,
        active_controller_id=active_id,
        active_controller_endpoint=active_endpoint,
        controller_epoch=ctx.epoch,
        live_brokers=tuple(ctx.live_brokers[b] for b in sorted(ctx.live_brokers)),
        topic_count=len(ctx.assignments),
        partition_count=ctx.partition_count,
        offline_partition_count=psm.offline_partition_count() if psm is not None else 0,
        preferred_replica_imbalance_count=ctx.preferred_replica_imbalance_count() if active else 0,
        partitions=partitions,
        topic_ids=tuple(sorted(ctx.topic_ids.items())),
    )
