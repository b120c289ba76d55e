"""A whole cluster in one process: the real `Controller` and the real broker request handling
(`broker_stub`'s fencing, apply and registration code) on the ZooKeeper model, with the
brokers' control RPCs called in-process instead of over gRPC.

What this harness does not have yet (the failover-windows issue, section 2): a virtual clock
and a seeded scheduler that interleaves events, deliveries and faults step by step; here the
asyncio loop runs in real time and scenarios place their faults by hand.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from broker_stub.registration import BrokerRegistration
from broker_stub.server import BrokerControlService
from broker_stub.state import BrokerState
from controller_svc.adapters.channel_manager import ApiKind
from controller_svc.adapters.zk import codecs, loads, paths
from controller_svc.adapters.zk.standby import WarmLoad
from controller_svc.common.errors import ErrorCode
from controller_svc.common.metadata_digest import topic_digest
from controller_svc.common.model import BrokerInfo, EndPoint, TopicPartition
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.common.tasks import cancel_and_wait, spawn
from controller_svc.controller.controller import Controller, ControllerSettings
from controller_svc.core.context import ControllerContext
from controller_svc.core.metadata_encoding import encode_online
from tests.sim.zk_model import SimZkClient, ZooKeeperModel


class SenderBug(BaseException):
    """What no sender catches (it catches every Exception of a send): stands for a bug that
    kills a request sender task, to show that the controller resigns instead of running on
    with a broker it can no longer reach."""


class InProcessBrokerClient:
    """The controller's channel to a broker: calls its handlers directly."""

    def __init__(self, cluster: SimCluster, broker_id: int, controller_zk: SimZkClient | None = None) -> None:
        self.cluster = cluster
        self.broker_id = broker_id
        # The sending controller's session: a paused controller process sends nothing until it
        # resumes, and then sends what it had queued, with the epoch it had.
        self.controller_zk = controller_zk

    def __repr__(self) -> str:
        return f"InProcessBrokerClient(broker={self.broker_id})"

    async def send(self, api: ApiKind, request: Any, timeout_s: float) -> Any:
        was_paused = self.controller_zk is not None and await self.controller_zk.wait_if_paused()
        if self.cluster.delivery_delay is not None:
            await asyncio.sleep(self.cluster.delivery_delay())  # deliveries to brokers interleave
        if self.cluster.sender_bugs.get(self.broker_id, 0) > 0:
            self.cluster.sender_bugs[self.broker_id] -= 1
            raise SenderBug(f"injected: the sender to broker {self.broker_id} dies")
        broker = self.cluster.brokers.get(self.broker_id)
        if broker is None or not broker.running:
            raise ConnectionError(f"broker {self.broker_id} is down")
        if hasattr(request, "parse"):  # a pre-serialized request: parse it as gRPC would
            request = request.parse()
        handler: Callable[[Any, Any], Awaitable[Any]] = getattr(broker.service, api.value)
        response = await handler(request, None)
        if was_paused and int(getattr(response, "error_code", 0)) == int(ErrorCode.STALE_CONTROLLER_EPOCH):
            self.cluster.model.landed["stale_request_rejected"] += 1
        if self.cluster.delivery_delay is not None:
            await asyncio.sleep(self.cluster.delivery_delay())  # and so do the replies
        return response

    async def close(self) -> None:
        return None


class ObservedStateChangeLog(StateChangeLog):
    """A state-change log whose records the simulation sees as they are written."""

    def __init__(self, node: str, observer: Callable[[str, str, dict[str, Any]], None] | None) -> None:
        super().__init__(None, node)
        self._observer = observer

    def record(self, kind: str, **fields: Any) -> None:
        super().record(kind, **fields)
        if self._observer is not None:
            self._observer(self.node, kind, fields)

    def record_many(self, kind: str, rows: Iterable[dict[str, Any]]) -> None:
        rows = list(rows)
        super().record_many(kind, rows)
        if self._observer is not None:
            for fields in rows:
                self._observer(self.node, kind, fields)


class SimBroker:
    def __init__(self, cluster: SimCluster, broker_id: int) -> None:
        self.broker_id = broker_id
        self.zk = SimZkClient(cluster.model, cluster.session_timeout_ms)
        self.info = BrokerInfo(broker_id, (EndPoint("PLAINTEXT", "sim", 9000 + broker_id, "PLAINTEXT"),), None, -1)
        self.state = BrokerState(broker_id=broker_id)
        self.service = BrokerControlService(
            self.state, StateChangeLog(None, f"broker-{broker_id}"), self.zk, catchup_delay_s=0.05
        )
        self.running = False
        self._isr_task: asyncio.Task[None] | None = None
        self._digests_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.zk.start()
        registration = BrokerRegistration(self.zk, self.info, 5.0)
        await registration.ensure_top_level_paths()
        self.state.broker_epoch = await registration.register()
        self.state.registered = True
        self.running = True
        self._isr_task = spawn(self.service.run_isr_maintenance(0.02), f"sim-broker-{self.broker_id}-isr")
        self._digests_task = spawn(self.service.run_metadata_digests(0.5), f"sim-broker-{self.broker_id}-digests")

    async def stop(self) -> None:
        """The end of a SIGTERM (after its controlled shutdown): the session is closed, so the
        registration goes at once."""
        self.running = False
        await cancel_and_wait(self._isr_task, self._digests_task)
        await self.zk.close()

    async def kill(self) -> None:
        """kill -9: the process is gone, its session ends (its registration goes)."""
        self.running = False
        await cancel_and_wait(self._isr_task, self._digests_task)
        self.zk.end_silently()

    async def restart(self, cluster: SimCluster) -> None:
        """A new process: a new session, a new registration (a new broker epoch), no roles."""
        self.zk = SimZkClient(cluster.model, cluster.session_timeout_ms)
        self.state = BrokerState(broker_id=self.broker_id)
        self.service = BrokerControlService(
            self.state, StateChangeLog(None, f"broker-{self.broker_id}"), self.zk, catchup_delay_s=0.05
        )
        await self.start()


class SimCluster:
    def __init__(self, brokers: int, session_timeout_ms: int = 6000, **settings: Any) -> None:
        self.model = ZooKeeperModel()
        self.session_timeout_ms = session_timeout_ms
        self.settings = settings
        self.brokers = {b: SimBroker(self, b) for b in range(1, brokers + 1)}
        self.controllers: dict[int, Controller] = {}
        # broker id -> how many sends to it kill their sender task (SenderBug)
        self.sender_bugs: dict[int, int] = {}
        # Every session a controller ever had (the campaign checks what they commit).
        self.controller_sessions: dict[int, int] = {}  # session -> controller id
        self.on_record: Callable[[str, str, dict[str, Any]], None] | None = None
        # Virtual seconds before each request reaches a broker and before its reply returns
        # (None: at once); per broker the sender still sends one request at a time, in order.
        self.delivery_delay: Callable[[], float] | None = None
        # Every warm takeover is compared with what a cold load would have read at that moment.
        self.warm_takeovers_checked = 0
        self.warm_digests_checked = 0  # a standby's metadata digests compared at its takeovers
        self.warm_mismatches: list[str] = []

    def controllers_session(self, session: int) -> int | None:
        """The controller a session belongs (or belonged) to, None for brokers and tools."""
        return self.controller_sessions.get(session)

    def _observe(self, node: str, kind: str, fields: dict[str, Any]) -> None:
        if self.on_record is not None:
            self.on_record(node, kind, fields)

    def __repr__(self) -> str:
        return f"SimCluster(brokers={sorted(self.brokers)}, controllers={sorted(self.controllers)}, {self.model!r})"

    async def start_brokers(self) -> None:
        for broker in self.brokers.values():
            await broker.start()

    async def start_controller(
        self, controller_id: int, before_start: Callable[[SimZkClient], None] | None = None
    ) -> Controller:
        zk = SimZkClient(self.model, self.session_timeout_ms)
        await zk.start()
        for path in paths.PERSISTENT_PATHS:
            await zk.ensure_path(path)
        if before_start is not None:
            before_start(zk)  # e.g. a fault armed for the controller's first requests
        settings = ControllerSettings(
            controller_id,
            f"sim:{controller_id}",
            "",
            retry_backoff_s=0.01,
            first_rebalance_delay_s=3600,
            **self.settings,
        )
        controller = Controller(
            settings,
            zk,  # type: ignore[arg-type]  # SimZkClient has ZkClient's methods
            ObservedStateChangeLog(f"controller-{controller_id}", self._observe),
            client_factory=lambda info: InProcessBrokerClient(self, info.broker_id, zk),
        )
        self._check_warm_takeovers(controller)
        zk.set_session_callbacks(controller.on_session_lost, controller.on_new_session)
        zk.on_session = lambda session: self.controller_sessions.__setitem__(session, controller_id)
        self.controller_sessions[zk.session_id] = controller_id
        self.controllers[controller_id] = controller
        await controller.start().processed
        return controller

    def _check_warm_takeovers(self, controller: Controller) -> None:
        """Wrap the standby's takeover: the context it fills must hold, for every znode not
        changed since the election, what ZooKeeper holds (the model is read synchronously right
        after the takeover, so nothing runs in between); a znode changed after the election may
        hold either value (the term's watches and notifications cover it, as after a cold load)."""
        standby = controller.standby
        if standby is None:
            return
        take = standby.take

        async def checked_take(ctx: ControllerContext) -> WarmLoad | str:
            election_zxid = self.model.nodes[paths.CONTROLLER_EPOCH].mzxid
            result = await take(ctx)
            if isinstance(result, WarmLoad):
                self.warm_takeovers_checked += 1
                self.warm_digests_checked += len(ctx.metadata_digests_hint())
                problem = self.differs_from_zookeeper(ctx, election_zxid) or _stale_hints(ctx)
                if problem:
                    self.warm_mismatches.append(f"controller {controller.id}'s warm takeover: {problem}")
            return result

        standby.take = checked_take  # type: ignore[method-assign]

    def differs_from_zookeeper(self, ctx: ControllerContext, since_zxid: int | None = None) -> str:
        """What of the context's topics, configs and partition states differs from a cold load
        of the model now ("" if nothing); with `since_zxid`, znodes (and lists of children)
        changed after it are not compared."""
        nodes = self.model.nodes
        horizon = since_zxid if since_zxid is not None else self.model.zxid

        def settled(path: str) -> bool:
            node = nodes.get(path)
            return node is None or node.mzxid <= horizon

        def children_settled(path: str) -> bool:
            node = nodes.get(path)
            return node is None or node.pzxid <= horizon

        bad: dict[str, int] = {}
        topics: dict[str, loads.LoadedTopic] = {}
        for name in sorted(nodes[paths.BROKER_TOPICS].children):
            node = nodes[paths.topic_path(name)]
            loaded = loads.decode_topic_read(name, (node.data, node.stat()), bad)
            if loaded is not None:
                topics[name] = loaded
        for name in set(topics) | set(ctx.assignments):
            if not settled(paths.topic_path(name)) or (
                (name in topics) != (name in ctx.assignments) and not children_settled(paths.BROKER_TOPICS)
            ):
                continue
            expected = dict(topics[name].assignments) if name in topics else None
            if ctx.assignments.get(name) != expected:
                return f"assignment of {name} {ctx.assignments.get(name)} != ZooKeeper's {expected}"
            expected_id = topics[name].topic_id if name in topics else None
            if ctx.topic_ids.get(name) != expected_id:
                return f"topic id of {name} {ctx.topic_ids.get(name)} != ZooKeeper's {expected_id}"
            config_path = f"{paths.CONFIG_TOPICS}/{name}"
            node = nodes.get(config_path)
            config = loads.decode_config_read(name, (node.data, node.stat())) if node is not None else None
            if expected is not None and settled(config_path) and children_settled(paths.CONFIG_TOPICS):
                if ctx.topic_configs.get(name) != config:
                    return f"config of {name} {ctx.topic_configs.get(name)} != ZooKeeper's {config}"
        for tp in ctx.all_partitions():
            path = paths.partition_state_path(tp.topic, tp.partition)
            if not settled(path) or not children_settled(paths.partition_path(tp.topic, tp.partition)):
                continue
            node = nodes.get(path)
            state = loads.decode_state_read(tp, path, (node.data, node.stat())) if node is not None else None
            if ctx.partition_states.get(tp) != state:
                return f"state of {tp} {ctx.partition_states.get(tp)} != ZooKeeper's {state}"
        extra = set(ctx.partition_states) - set(ctx.all_partitions())
        return f"states of partitions no topic has: {sorted(extra)}" if extra else ""

    async def kill_controller(self, controller_id: int) -> None:
        """kill -9: it stops acting at once; ZooKeeper expires its session a session timeout
        later (until then /controller may still name it)."""
        controller = self.controllers.pop(controller_id)
        zk = controller.zk
        await controller.shutdown()
        asyncio.get_running_loop().call_later(self.session_timeout_ms / 1000.0, zk.end_silently)  # type: ignore[attr-defined]

    async def stop_controller(self, controller_id: int) -> None:
        """SIGTERM: resign, close the session (/controller goes at once)."""
        controller = self.controllers.pop(controller_id)
        await controller.shutdown()
        await controller.zk.close()

    async def stop_all(self) -> None:
        for controller_id in list(self.controllers):
            await self.stop_controller(controller_id)
        for broker in self.brokers.values():
            if broker.running:
                await broker.kill()

    def zk_epoch(self) -> int:
        node = self.model.nodes.get(paths.CONTROLLER_EPOCH)
        return codecs.decode_controller_epoch(node.data) if node is not None else 0

    def active(self) -> Controller | None:
        """The controller that believes it is active with the epoch ZooKeeper holds. Another may
        still believe it is active with an older epoch until it hears of its lost session: it
        is fenced (every write checks the epoch) and brokers reject its requests."""
        current = [c for c in self.controllers.values() if c.is_active and c.context.epoch == self.zk_epoch()]
        assert len(current) <= 1, f"two active controllers with the current epoch: {current}"
        return current[0] if current else None

    # --- what tools write to ZooKeeper -------------------------------------------------------------

    async def admin(self) -> SimZkClient:
        zk = SimZkClient(self.model, self.session_timeout_ms)
        await zk.start()
        return zk

    async def create_topic(self, topic: str, assignment: dict[int, list[int]]) -> None:
        zk = await self.admin()
        await zk.create(
            paths.topic_path(topic),
            codecs.encode_topic(codecs.TopicZnode({p: tuple(r) for p, r in assignment.items()})),
        )
        await zk.close()

    # --- what the outside sees ---------------------------------------------------------------------

    def state_in_zookeeper(self, tp: TopicPartition) -> Any:
        node = self.model.nodes.get(paths.partition_state_path(tp.topic, tp.partition))
        if node is None:
            return None
        return codecs.decode_partition_state("state", node.data, node.version)

    def replicas_in_zookeeper(self, tp: TopicPartition) -> tuple[int, ...]:
        node = self.model.nodes[paths.topic_path(tp.topic)]
        return codecs.decode_topic("topic", node.data).partitions[tp.partition]

    async def until(self, condition: Callable[[], bool], timeout_s: float = 10.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what or condition}; {self!r}")
            await asyncio.sleep(0.01)

    def safety(self) -> None:
        """Invariants that hold at every moment: one active controller at most; for every
        partition in ZooKeeper, a leader is in the ISR and the ISR within the replicas."""
        self.active()
        assert not self.warm_mismatches, self.warm_mismatches[0]
        epochs = [c.context.epoch for c in self.controllers.values() if c.is_active]
        assert len(epochs) == len(set(epochs)), f"two active controllers with one epoch: {epochs}"
        for path, node in self.model.nodes.items():
            if not path.endswith("/state") or "/partitions/" not in path:
                continue
            state = codecs.decode_partition_state(path, node.data, node.version)
            topic, partition = path.split("/")[3], int(path.split("/")[5])
            replicas = self.replicas_in_zookeeper(TopicPartition(topic, partition))
            assert state.leader == -1 or state.leader in state.isr, (path, state)
            assert set(state.isr) <= set(replicas), (path, state, replicas)


def _stale_hints(ctx: ControllerContext) -> str:
    """A metadata digest the standby handed over that differs from one made now, without any
    cache, from the states and assignments it handed over (what the failover's UpdateMetadata
    would carry with every replica live), or an imbalance count from its hand-over that
    differs from a recount."""
    for topic, (digest, brokers) in ctx.metadata_digests_hint().items():
        parts = ctx.assignments[topic]
        fields = [
            encode_online(TopicPartition(topic, p), ctx.partition_states[TopicPartition(topic, p)], parts[p])
            for p in sorted(parts)
        ]
        if topic_digest(fields) != digest:
            return f"the standby's metadata digest of {topic} is stale"
        if brokers != frozenset(b for a in parts.values() for b in a.replicas):
            return f"the standby's brokers of {topic} {sorted(brokers)} are not the assignment's"
    recount = sum(
        1
        for t, parts in ctx.assignments.items()
        if t not in ctx.topics_to_be_deleted
        for p, a in parts.items()
        if (state := ctx.partition_states.get(TopicPartition(t, p))) is not None
        and a.replicas
        and state.leader != a.replicas[0]
    )
    counted = ctx.preferred_replica_imbalance_count()  # from the standby's counts where they hold
    if counted != recount:
        return f"the imbalance gauge counts {counted} after the standby's hand-over, a recount {recount}"
    return ""
