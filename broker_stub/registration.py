"""Broker registration in /brokers/ids/<id> (KafkaZkClient.registerBroker).

The registration is ephemeral, Kafka's version 5 JSON; the broker epoch is its czxid
(KIP-380). A restart that finds its id still held by the dead session of its previous
run waits for that session to expire (bounded, logged) instead of failing (KAFKA-7165). A
ZooKeeper request that gets no answer (a hung server, a lost reply) is sent again after a
backoff, as Kafka's retryRequestsUntilConnected does: one server of an ensemble hanging for a
few seconds must not end a broker (the chaos campaign found brokers exiting on it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from controller_svc.adapters.zk import codecs, paths
from controller_svc.adapters.zk.client import WatchKind, ZkClient
from controller_svc.common.errors import (
    ControllerError,
    ZkNodeExistsError,
    ZkUnavailableError,
)
from controller_svc.common.model import BrokerInfo

log = logging.getLogger(__name__)

T = TypeVar("T")


class RegistrationError(ControllerError):
    pass


RETRY_BACKOFF_S = (0.1, 0.2, 0.5, 1.0)


class BrokerRegistration:
    def __init__(self, zk: ZkClient, info: BrokerInfo, wait_for_expiry_s: float) -> None:
        self.zk = zk
        self.info = info
        self.path = paths.broker_path(info.broker_id)
        self._wait_s = wait_for_expiry_s
        self.unanswered = 0  # requests sent again because ZooKeeper did not answer

    def __repr__(self) -> str:
        return f"BrokerRegistration({self.path})"

    async def ensure_top_level_paths(self) -> None:
        async def ensure() -> None:
            for path in paths.PERSISTENT_PATHS:
                await self.zk.ensure_path(path)

        await self._until_answered("creating the top-level paths", ensure)

    async def register(self) -> int:
        """Create the registration; returns the broker epoch (czxid). Until it succeeds or
        the caller cancels it, whatever ZooKeeper leaves unanswered: a create applied with its
        reply lost meets NodeExists the next time, finds our own session's registration and
        returns its czxid."""
        return await self._until_answered(f"registering {self.path}", self._register_once)

    async def _until_answered(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        attempt = 0
        while True:
            try:
                return await call()
            except ZkUnavailableError as e:
                backoff = RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]
                attempt += 1
                self.unanswered += 1
                if attempt == 1 or attempt % 20 == 0:
                    log.warning("%s: %s; trying again every %.1f s", what, e, backoff)
                await asyncio.sleep(backoff)

    async def _register_once(self) -> int:
        data = codecs.encode_broker_registration(self.info, int(time.time() * 1000))
        deadline = time.monotonic() + self._wait_s
        waited_logged = False
        while True:
            try:
                result = await self.zk.create(self.path, data, ephemeral=True)
                if result.stat is not None:
                    return result.stat.czxid
                log.warning("%s was deleted right after we created it; registering again", self.path)
                continue
            except ZkNodeExistsError:
                pass
            got = await self.zk.get_or_none(self.path)
            if got is None:
                continue
            if got[1].ephemeral_owner == self.zk.session_id:
                return got[1].czxid  # our own create, whose reply was lost and resent
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RegistrationError(
                    f"{self.path} is still held by ZooKeeper session 0x{got[1].ephemeral_owner:x} after "
                    f"{self._wait_s:.0f} s: is another broker running with id {self.info.broker_id}?"
                )
            if not waited_logged:
                log.warning(
                    "%s is held by session 0x%x (a previous run of this broker?); waiting up to %.0f s for it "
                    "to expire",
                    self.path,
                    got[1].ephemeral_owner,
                    remaining,
                )
                waited_logged = True
            await self._wait_for_deletion(min(remaining, 1.0))

    async def _wait_for_deletion(self, timeout_s: float) -> None:
        deleted = asyncio.Event()

        def on_change(kind: WatchKind, _path: str) -> None:
            if kind == WatchKind.DELETED:
                deleted.set()

        self.zk.watch_data(self.path, on_change)
        try:
            if await self.zk.exists(self.path, watch=True) is None:
                return
            try:
                await asyncio.wait_for(deleted.wait(), timeout_s)
            except TimeoutError:
                pass
        finally:
            self.zk.unwatch(self.path)
