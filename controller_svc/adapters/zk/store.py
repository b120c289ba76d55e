"""The controller's view of ZooKeeper: the election multi-op and fenced writes.

Every write of an active controller is a multi whose first op checks /controller_epoch
at the zkVersion this controller set when it was elected (KAFKA-6082). A bad version on
that check means another controller exists: `ControllerMovedError`, and the caller resigns.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from controller_svc.adapters.zk import codecs, loads, paths
from controller_svc.adapters.zk.client import (
    CheckOp,
    CreateOp,
    DeleteOp,
    OpResult,
    SetDataOp,
    WatchCallback,
    ZkClient,
    ZkOp,
    ZnodeStat,
)
from controller_svc.common import metrics
from controller_svc.common.errors import (
    ControllerEpochCorruptError,
    ControllerError,
    ControllerMovedError,
    CorruptZnodeError,
    ZkBadVersionError,
    ZkNodeExistsError,
    ZkNoNodeError,
    ZkUnavailableError,
)
from controller_svc.common.model import BrokerInfo, TopicPartition
from controller_svc.common.self_stop import BEFORE_FENCED_WRITE, SelfStop
from controller_svc.core.context import ControllerContext

log = logging.getLogger(__name__)

# ZooKeeper's default jute.maxbuffer is 1 MB; keep each multi well below it.
DEFAULT_MAX_OPS_PER_MULTI = 1000


@dataclass(frozen=True, slots=True)
class ActiveController:
    """What /controller says, with the stat needed for conditional deletes."""

    controller_id: int
    version: int
    ephemeral_owner: int


@dataclass(frozen=True, slots=True)
class EpochFence:
    epoch: int
    zk_version: int
    session_id: int


class ControllerZkStore:
    def __init__(
        self, zk: ZkClient, clock_ms: Callable[[], int] | None = None, self_stop: SelfStop | None = None
    ) -> None:
        self.zk = zk
        # Fault injection (debug.self.stop.dir): stop this process just before a fenced write.
        self.self_stop = self_stop
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.fence: EpochFence | None = None

    def __repr__(self) -> str:
        return f"ControllerZkStore(fence={self.fence})"

    # --- the session: reads and watches (the managers reach ZooKeeper only through these) -----

    @property
    def session_id(self) -> int:
        return self.zk.session_id

    def watch_data(self, path: str, callback: WatchCallback) -> None:
        self.zk.watch_data(path, callback)

    def watch_children(self, path: str, callback: WatchCallback) -> None:
        self.zk.watch_children(path, callback)

    def unwatch(self, path: str) -> None:
        self.zk.unwatch(path)

    async def get_or_none(self, path: str, watch: bool = False) -> tuple[bytes, ZnodeStat] | None:
        return await self.zk.get_or_none(path, watch=watch)

    async def exists(self, path: str, watch: bool = False) -> bool:
        return await self.zk.exists(path, watch=watch) is not None

    async def arm_exists_watches(self, znodes: Sequence[str]) -> None:
        """An exists watch on each of `znodes`, pipelined (one round trip for all)."""
        await self.zk.pipelined([functools.partial(self.zk.exists, path, watch=True) for path in znodes])

    async def children(self, path: str, watch: bool = False) -> list[str]:
        return await self.zk.get_children_or_empty(path, watch=watch)

    # --- metadata loads (pipelined; corrupt znodes are counted and skipped) ---------------------

    async def load_brokers(self, watch: bool) -> dict[int, BrokerInfo]:
        return await loads.load_brokers(self.zk, watch)

    async def load_topic_names(self, watch: bool) -> list[str]:
        return await loads.load_topic_names(self.zk, watch)

    async def load_topics(
        self, topics: Sequence[str], watch: bool, known_bad: dict[str, int] | None = None
    ) -> dict[str, loads.LoadedTopic]:
        return await loads.load_topics(self.zk, topics, watch, known_bad)

    async def load_partition_states(self, ctx: ControllerContext, partitions: Sequence[TopicPartition]) -> None:
        await loads.load_partition_states(self.zk, ctx, partitions)

    async def load_topic_configs(self, topics: Sequence[str]) -> dict[str, dict[str, str]]:
        return await loads.load_topic_configs(self.zk, topics)

    async def load_all(self, ctx: ControllerContext) -> None:
        await loads.load_all(self.zk, ctx)

    async def read_notifications(self, parent: str) -> list[tuple[str, dict[str, object] | None]]:
        """The notifications under `parent`, re-arming the children watch."""
        return await loads.read_notifications(self.zk, parent, watch=True)

    # --- this controller's endpoint registration (ephemeral, outside the fence) -----------------

    async def create_ephemeral(self, path: str, data: bytes) -> None:
        await self.zk.ensure_path(path.rsplit("/", 1)[0])
        await self.zk.create(path, data, ephemeral=True)

    async def delete(self, path: str, version: int) -> None:
        await self.zk.delete(path, version=version)

    # --- /controller --------------------------------------------------------------------------

    async def read_active_controller(self, watch: bool = True) -> ActiveController | None:
        """Read /controller (re-arming its watch). A corrupt /controller is reported and
        deleted conditionally on the version read, so it cannot wedge the cluster."""
        got = await self.zk.get_or_none(paths.CONTROLLER, watch=watch)
        if got is None:
            return None
        data, stat = got
        try:
            znode = codecs.decode_controller(data)
        except CorruptZnodeError as e:
            metrics.CORRUPT_ZNODES.labels("controller").inc()
            log.error("%s; deleting it (version %d) so that a controller can be elected", e, stat.version)
            try:
                await self.zk.delete(paths.CONTROLLER, version=stat.version)
            except (ZkNoNodeError, ZkBadVersionError):
                log.info("/controller changed while we were deleting its corrupt data; re-reading")
                return await self.read_active_controller(watch)
            return None
        return ActiveController(znode.broker_id, stat.version, stat.ephemeral_owner)

    async def delete_controller_if_owned(self) -> bool:
        """Delete /controller if our current session owns it (after we resigned)."""
        got = await self.zk.get_or_none(paths.CONTROLLER, watch=True)
        if got is None or got[1].ephemeral_owner != self.zk.session_id:
            return False
        try:
            await self.zk.delete(paths.CONTROLLER, version=got[1].version)
        except (ZkNoNodeError, ZkBadVersionError):
            return False
        return True

    # --- /controller_epoch ----------------------------------------------------------------------

    async def read_controller_epoch(self, watch: bool = False) -> tuple[int, int] | None:
        got = await self.zk.get_or_none(paths.CONTROLLER_EPOCH, watch=watch)
        if got is None:
            return None
        data, stat = got
        try:
            return codecs.decode_controller_epoch(data), stat.version
        except CorruptZnodeError as e:
            metrics.CORRUPT_ZNODES.labels("controller_epoch").inc()
            raise ControllerEpochCorruptError(
                f"{e}. No controller will be elected until it holds the last epoch as an integer "
                f"(e.g. with zkCli: set {paths.CONTROLLER_EPOCH} <epoch>)"
            ) from e

    async def _read_or_create_epoch(self) -> tuple[int, int]:
        current = await self.read_controller_epoch(watch=True)
        if current is not None:
            return current
        try:
            await self.zk.create(paths.CONTROLLER_EPOCH, codecs.encode_controller_epoch(0))
            log.info("created %s with epoch 0", paths.CONTROLLER_EPOCH)
        except ZkNodeExistsError:
            pass
        current = await self.read_controller_epoch(watch=True)
        if current is None:
            raise ControllerMovedError(f"{paths.CONTROLLER_EPOCH} vanished right after it was created")
        return current

    async def register_controller_and_increment_epoch(self, controller_id: int) -> EpochFence:
        """One multi: create /controller (ephemeral) and set /controller_epoch to epoch+1 at the
        version read (KafkaZkClient.registerControllerAndIncrementControllerEpoch)."""
        session_id = self.zk.session_id
        current_epoch, epoch_version = await self._read_or_create_epoch()
        new_epoch = current_epoch + 1
        data = codecs.encode_controller(controller_id, self._clock_ms())
        try:
            results = await self.zk.multi(
                [
                    CreateOp(paths.CONTROLLER, data, ephemeral=True),
                    SetDataOp(paths.CONTROLLER_EPOCH, codecs.encode_controller_epoch(new_epoch), epoch_version),
                ]
            )
        except (ZkNodeExistsError, ZkBadVersionError) as e:
            # Either another controller won, or our own reply was lost and the multi was resent:
            # re-read to tell the two apart (checkControllerAndEpoch).
            fence = await self._check_controller_and_epoch(controller_id, new_epoch, session_id)
            if fence is None:
                raise ControllerMovedError(
                    f"controller moved to another node while electing controller {controller_id}"
                ) from e
            self.fence = fence
            return fence
        except ZkUnavailableError as e:
            # No answer at all: the multi may have been applied with its reply lost. Find out
            # now rather than leave /controller naming a process that does not know it won
            # (KAFKA-13407's symptom) until a later retry cleans it up.
            try:
                fence = await self._check_controller_and_epoch(controller_id, new_epoch, session_id)
            except ZkUnavailableError:
                raise e from None
            if fence is None:
                raise
            log.info(
                "the election's reply was lost but it was applied: controller %d holds epoch %d",
                controller_id,
                new_epoch,
            )
            self.fence = fence
            return fence
        stat = results[1].stat
        assert stat is not None
        self.fence = EpochFence(new_epoch, stat.version, session_id)
        return self.fence

    async def _check_controller_and_epoch(
        self, controller_id: int, new_epoch: int, session_id: int
    ) -> EpochFence | None:
        active = await self.read_active_controller(watch=True)
        if active is None or active.controller_id != controller_id or active.ephemeral_owner != session_id:
            return None
        current = await self.read_controller_epoch()
        if current is None or current[0] != new_epoch:
            return None
        return EpochFence(new_epoch, current[1], session_id)

    # --- fenced writes -------------------------------------------------------------------------

    def clear_fence(self) -> None:
        self.fence = None

    async def fenced_multi(self, ops: Sequence[ZkOp]) -> list[OpResult]:
        """Run `ops` behind the controller-epoch check; returns the results of `ops` only."""
        stop = self.self_stop
        if stop is not None and stop.stop_if_armed(BEFORE_FENCED_WRITE, paths=[op.path for op in ops]):
            # A zombie's write, attempted after it resumed: what became of it is the test's proof.
            fence = self.fence
            try:
                results = await self._fenced_multi(ops)
            except ControllerError as e:
                stop.record("debug.zombie_write", outcome="refused", error=str(e), epoch=fence.epoch if fence else -1)
                raise
            stop.record("debug.zombie_write", outcome="applied", epoch=fence.epoch if fence else -1)
            return results
        return await self._fenced_multi(ops)

    async def _fenced_multi(self, ops: Sequence[ZkOp]) -> list[OpResult]:
        fence = self.fence
        if fence is None:
            raise ControllerMovedError("not the active controller: no epoch fence")
        try:
            results = await self._multi_until_answered(fence, [CheckOp(paths.CONTROLLER_EPOCH, fence.zk_version), *ops])
        except ControllerError as e:
            if e.op_index == 0:
                raise ControllerMovedError(
                    f"{paths.CONTROLLER_EPOCH} is no longer at version {fence.zk_version} (epoch {fence.epoch}): "
                    "another controller was elected"
                ) from e
            if e.op_index > 0:
                raise e.at_op(e.op_index - 1) from None  # the caller's ops are numbered without our check
            raise
        return results[1:]

    async def _multi_until_answered(self, fence: EpochFence, ops: Sequence[ZkOp]) -> list[OpResult]:
        """Kafka's retryRequestsUntilConnected: a write that failed without an answer (the
        server hung or its connection was lost; aiozk fails the request and moves to another
        server) is sent again on the same session, for up to one session timeout. If the first
        attempt was applied and only its reply lost, the retry fails on a version, existence or
        missing-node conflict, which every caller already resolves by re-reading; the epoch
        check stays first, so a retry never writes for a controller that has moved. A new
        session means the role was lost: ControllerMovedError."""
        loop = asyncio.get_running_loop()  # the loop's clock: virtual in the simulation
        deadline = loop.time() + self.zk.session_timeout_s
        attempt = 0
        while True:
            if self.zk.session_id != fence.session_id:  # checked before every attempt
                raise ControllerMovedError(
                    f"ZooKeeper session changed since election (0x{fence.session_id:x} -> 0x{self.zk.session_id:x})"
                )
            try:
                return await self.zk.multi(ops, session_id=fence.session_id)
            except ZkUnavailableError as e:
                attempt += 1
                if loop.time() >= deadline:
                    raise
                metrics.ZK_WRITE_RETRIES.inc()
                log.warning("a fenced write of %d ops got no answer (%s); retrying on the same session", len(ops), e)
                await asyncio.sleep(min(0.1 * attempt, 1.0))

    async def fenced_multi_batched(
        self, ops: Sequence[ZkOp], max_ops: int = DEFAULT_MAX_OPS_PER_MULTI
    ) -> list[OpResult]:
        """Bounded-size multis, each behind the epoch check. Not atomic across batches."""
        results: list[OpResult] = []
        for start in range(0, len(ops), max_ops):
            results.extend(await self.fenced_multi(ops[start : start + max_ops]))
        return results

    async def fenced_delete(self, paths_to_delete: Sequence[str], max_ops: int = DEFAULT_MAX_OPS_PER_MULTI) -> None:
        """Delete znodes behind the epoch check; ones already gone are skipped."""
        pending: list[ZkOp] = [DeleteOp(p) for p in paths_to_delete]
        while pending:
            chunk, pending = pending[:max_ops], pending[max_ops:]
            while chunk:
                try:
                    await self.fenced_multi(chunk)
                    chunk = []
                except ZkNoNodeError as e:
                    chunk = chunk[: e.op_index] + chunk[e.op_index + 1 :]
