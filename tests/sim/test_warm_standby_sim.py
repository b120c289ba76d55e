"""The warm standby (controller_svc/adapters/zk/standby.py) on the simulated cluster: a standby
whose copy is stale at takeover still takes over with what ZooKeeper holds, and a copy whose
watches may have missed events is not used. SimCluster compares every warm takeover with the
model at that moment (`warm_mismatches`, checked by `safety()`); these scenarios make sure the
copy really was stale, or really was untrustworthy, when the takeover came."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest

from broker_stub.isr import change_isr
from controller_svc.adapters.zk import codecs, paths
from controller_svc.adapters.zk import standby as standby_module
from controller_svc.adapters.zk.wire import CreateOp, DeleteOp, SetDataOp
from controller_svc.common import metrics, pacing
from controller_svc.common.errors import ErrorCode, ZkUnavailableError, ZkUnimplementedError
from controller_svc.common.model import LeaderIsrAndControllerEpoch, PartitionAndReplica, TopicPartition
from controller_svc.controller.controller import Controller
from controller_svc.controller.replica_state_machine import ReplicaState
from controller_svc.core.context import ControllerContext
from tests.sim.cluster import SimCluster
from tests.sim.test_failover_windows_sim import _failovers, _topic_t_online
from tests.sim.zk_model import SimZkClient, ZooKeeperModel


async def _standby_ready(cluster: SimCluster, controller_id: int) -> Controller:
    standby = await cluster.start_controller(controller_id)
    assert standby.standby is not None
    copy = standby.standby
    await cluster.until(lambda: copy.ready, what=f"controller {controller_id}'s copy")
    return standby


async def _shrink_isr(cluster: SimCluster, tp: TopicPartition) -> None:
    state = cluster.state_in_zookeeper(tp)
    leader = cluster.brokers[state.leader]
    follower = next(b for b in state.isr if b != state.leader)
    result = await change_isr(leader.zk, leader.state, tp, follower, lagging=True)  # type: ignore[arg-type]
    assert result.error == ErrorCode.NONE, result
    await cluster.until(lambda: follower not in cluster.state_in_zookeeper(tp).isr, what=f"{tp}'s ISR to shrink")


async def test_a_standby_that_read_none_of_the_changes_takes_over_with_what_zookeeper_holds() -> None:
    """The standby re-reads nothing while standing by (an hour between refreshes), so every
    change after its first read is only marked: ISR shrinks written by leaders, a new topic
    and its partition states, a topic config. At takeover it re-reads exactly the marked
    znodes and the context equals a cold load. Its metadata digest of an unchanged topic (w)
    is handed over and equals one made from the context (SimCluster checks every one)."""
    cluster = SimCluster(brokers=3, auto_leader_rebalance_enable=False, standby_refresh_interval_s=3600)
    completed = _failovers(cluster)
    try:
        tps = await _topic_t_online(cluster, 6)
        await cluster.create_topic("w", {0: [3, 1], 1: [1, 2], 2: [2, 3]})
        await cluster.until(
            lambda: all(cluster.state_in_zookeeper(TopicPartition("w", p)) is not None for p in range(3)),
            what="w online",
        )
        standby = await _standby_ready(cluster, 2)
        assert standby.standby is not None
        copy = standby.standby
        await cluster.until(lambda: "w" in copy._digests, what="the standby's digest of w")
        for tp in tps[:3]:
            await _shrink_isr(cluster, tp)
        await cluster.create_topic("u", {0: [1, 2], 1: [2, 3]})
        await cluster.until(
            lambda: all(cluster.state_in_zookeeper(TopicPartition("u", p)) is not None for p in (0, 1)),
            what="u online",
        )
        admin = await cluster.admin()
        await admin.create(f"{paths.CONFIG_TOPICS}/t", json.dumps({"version": 1, "config": {"a": "b"}}).encode())
        await admin.close()
        # The fault landed: the copy is stale (3 states, topic u, u's 2 states, t's config).
        assert copy.dirty_count >= 7, copy
        dirty = copy.dirty_count
        await cluster.stop_controller(1)
        await cluster.until(lambda: standby.is_active and len(completed) == 2, what="controller 2's failover")
        failover = completed[-1]
        assert failover["load_mode"] == "warm", failover
        assert failover["warm_reread"] >= dirty
        assert cluster.warm_takeovers_checked == 1
        assert cluster.warm_digests_checked >= 1  # w's at least; t's and u's were re-read
        # The replica states the standby built while it waited (u's at the takeover's re-read)
        # were adopted: exactly every assigned replica, Online.
        assert standby.term is not None
        rsm = standby.term.managers.partitions.rsm
        assigned = {
            PartitionAndReplica(TopicPartition(t, p), r)
            for t, parts in standby.context.assignments.items()
            for p, a in parts.items()
            for r in a.replicas
        }
        assert set(rsm.states) == assigned
        assert all(state is ReplicaState.ONLINE for state in rsm.states.values())
        assert cluster.differs_from_zookeeper(standby.context) == ""
        assert standby.context.topic_configs["t"] == {"a": "b"}
        # The active controller no longer hears the trees (each state it writes would come
        # back as an event), and its own topic watch, armed after the removal, stands.
        session = standby.zk.session_id
        assert not any(session in sessions for sessions in cluster.model.tree_watches.values())
        assert session in cluster.model.child_watches.get(paths.BROKER_TOPICS, set())
        await cluster.create_topic("v", {0: [1, 2]})
        await cluster.until(lambda: "v" in standby.context.assignments, what="the new controller to see topic v")
        cluster.safety()
    finally:
        await cluster.stop_all()


async def test_a_standby_that_slept_through_the_changes_takes_over_with_them() -> None:
    """SIGSTOP of the standby (shorter than its session timeout) while ISRs change and the
    active controller stops: on waking it gets the events it slept through, then the deletion
    of /controller, and its takeover includes them."""
    cluster = SimCluster(brokers=3, auto_leader_rebalance_enable=False)
    completed = _failovers(cluster)
    try:
        tps = await _topic_t_online(cluster, 4)
        standby = await _standby_ready(cluster, 2)
        zk = standby.zk
        zk.pause(2.0)  # type: ignore[attr-defined]
        for tp in tps[:2]:
            await _shrink_isr(cluster, tp)
        await cluster.stop_controller(1)
        assert zk.paused  # type: ignore[attr-defined]
        await cluster.until(lambda: standby.is_active and len(completed) == 2, what="controller 2's failover")
        assert completed[-1]["load_mode"] == "warm", completed[-1]
        assert cluster.warm_takeovers_checked == 1
        cluster.safety()
    finally:
        await cluster.stop_all()


async def test_a_standby_whose_session_was_replaced_does_not_trust_its_copy_until_it_read_again() -> None:
    """A new session means new connections: events of the old watches may be lost, so the copy
    is refused (the caller loads cold) until the standby has armed its watches again and read
    everything again; then its takeover is warm again."""
    cluster = SimCluster(brokers=3, auto_leader_rebalance_enable=False)
    completed = _failovers(cluster)
    try:
        await _topic_t_online(cluster, 4)
        standby = await _standby_ready(cluster, 2)
        assert standby.standby is not None
        copy = standby.standby
        reloads_before = copy.reloads
        zk = standby.zk
        assert zk.expire()  # type: ignore[attr-defined]
        await zk.renew()  # type: ignore[attr-defined]
        # A takeover now (nothing has run in between: renew does not yield) must refuse the copy.
        refused = await copy.take(ControllerContext())
        assert refused == "the connection that armed the watches is gone", refused
        copy.follow()
        await cluster.until(lambda: copy.reloads > reloads_before and copy.ready, what="the copy read again")
        await cluster.stop_controller(1)
        await cluster.until(lambda: standby.is_active and len(completed) == 2, what="controller 2's failover")
        assert completed[-1]["load_mode"] == "warm", completed[-1]
        assert cluster.differs_from_zookeeper(standby.context) == ""
        cluster.safety()
    finally:
        await cluster.stop_all()


async def test_a_zookeeper_without_add_watch_means_cold_failovers_and_nothing_else() -> None:
    """ZooKeeper before 3.6 (Kafka 2.8 ships 3.5) has no addWatch: the standby says so once,
    stops trying, and its takeovers load cold; everything else works as before."""
    cluster = SimCluster(brokers=3, auto_leader_rebalance_enable=False)
    completed = _failovers(cluster)

    def without_add_watch(zk: SimZkClient) -> None:
        async def refuse(path: str, callback: object) -> None:
            raise ZkUnimplementedError(f"ZooKeeper has no addWatch (needs 3.6+): {path}")

        zk.watch_tree = refuse  # type: ignore[method-assign,assignment]

    try:
        await _topic_t_online(cluster, 4)
        standby = await cluster.start_controller(2, before_start=without_add_watch)
        assert standby.standby is not None
        copy = standby.standby
        await cluster.until(lambda: copy.unsupported is not None, what="the standby to find addWatch missing")
        await cluster.stop_controller(1)
        await cluster.until(lambda: standby.is_active and len(completed) == 2, what="controller 2's failover")
        failover = completed[-1]
        assert failover["load_mode"] == "cold" and failover["cold_reason"].startswith("unsupported"), failover
        assert cluster.differs_from_zookeeper(standby.context) == ""
        cluster.safety()
    finally:
        await cluster.stop_all()


async def test_a_standby_decodes_a_reload_in_slices_with_the_loop_running_between(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reload's partition states are decoded a read batch at a time as the batches come in,
    the loop running other work every DECODE_SLICE states (one step over 1M held the standby's
    loop 5.2 s, with the election waiting behind it), and handed over in slices at takeover;
    the copy is complete and the takeover from it is warm and exact."""
    monkeypatch.setattr(standby_module, "DECODE_SLICE", 25)
    monkeypatch.setattr(standby_module, "READ_BATCH", 25)
    cluster = SimCluster(brokers=3, auto_leader_rebalance_enable=False)
    completed = _failovers(cluster)
    order: list[str] = []
    decode = standby_module.loads.decode_state_reads

    def recorded(partitions: Any, state_paths: Any, reads: Any) -> Any:
        order.append(f"decode {len(partitions)}")
        asyncio.get_running_loop().call_soon(order.append, "loop ran")
        return decode(partitions, state_paths, reads)

    try:
        await _topic_t_online(cluster, 110)
        monkeypatch.setattr(standby_module.loads, "decode_state_reads", recorded)
        await _standby_ready(cluster, 2)
        monkeypatch.setattr(standby_module.loads, "decode_state_reads", decode)
        # The reload: 110 states in slices of 25, the loop running after each slice.
        reload = order[: order.index("decode 10") + 1]
        assert reload == ["decode 25", "loop ran"] * 4 + ["decode 10"], order
        # The takeover hands the states over in slices too, a topic at a time: with a second
        # topic behind t's 110 partitions, it yields from `_take`.
        await cluster.create_topic("u", {p: [1, 2, 3] for p in range(5)})
        await cluster.until(
            lambda: all(cluster.state_in_zookeeper(TopicPartition("u", p)) is not None for p in range(5)),
            what="u online",
        )
        yielded_in: list[str] = []

        class Asyncio:
            def __getattr__(self, name: str) -> Any:
                return getattr(asyncio, name)

            @staticmethod
            async def sleep(delay: float, result: Any = None) -> Any:
                # sleep <- Pacer.before <- the step that paced itself
                yielded_in.append(sys._getframe(2).f_code.co_name)
                return await asyncio.sleep(delay, result)

        monkeypatch.setattr(pacing, "asyncio", Asyncio())
        await cluster.stop_controller(1)
        await cluster.until(lambda: len(completed) == 2, what="controller 2's failover")
        assert "_take" in yielded_in, yielded_in
        assert completed[-1]["load_mode"] == "warm", completed[-1]
        assert cluster.warm_takeovers_checked == 1
        cluster.safety()
    finally:
        await cluster.stop_all()


def _state_bytes(leader: int, isr: tuple[int, ...], leader_epoch: int = 0) -> bytes:
    return codecs.encode_partition_state(LeaderIsrAndControllerEpoch(leader, leader_epoch, isr, 0, 1))


def _create_topic_ops(topic: str, partitions: int, leader: int, replicas: tuple[int, ...] = (1, 2, 3)) -> list[Any]:
    """A topic znode (every partition on `replicas`) and a state znode per partition, as one multi."""
    assignment = {p: replicas for p in range(partitions)}
    ops: list[Any] = [
        CreateOp(paths.topic_path(topic), codecs.encode_topic(codecs.TopicZnode(assignment))),
        CreateOp(paths.partitions_path(topic)),
    ]
    for p in range(partitions):
        ops.append(CreateOp(f"{paths.partitions_path(topic)}/{p}"))
        ops.append(CreateOp(paths.partition_state_path(topic, p), _state_bytes(leader, (1, 2, 3))))
    return ops


def _delete_topic_ops(topic: str, partitions: int) -> list[Any]:
    ops: list[Any] = []
    for p in range(partitions):
        ops.append(DeleteOp(paths.partition_state_path(topic, p)))
        ops.append(DeleteOp(f"{paths.partitions_path(topic)}/{p}"))
    return [*ops, DeleteOp(paths.partitions_path(topic)), DeleteOp(paths.topic_path(topic))]


def _recreate_state_ops(topic: str, partition: int, leader: int) -> list[Any]:
    """A state znode deleted and created again (a deletion stopped half-way, the partition then
    elected afresh): back at version 0, its topic znode untouched."""
    path = paths.partition_state_path(topic, partition)
    return [DeleteOp(path), CreateOp(path, _state_bytes(leader, (leader,)))]


class _Copy:
    """A standby copy over the model, with topics a, b and c of 3 partitions each (states at
    version 0, led by broker 1), loaded and ready."""

    def __init__(self) -> None:
        self.model = ZooKeeperModel()
        self.admin = self.model.open_session(lambda _kind, _path: None)
        self.model.multi(
            self.admin,
            [CreateOp("/brokers"), CreateOp(paths.BROKER_TOPICS), CreateOp("/config"), CreateOp(paths.CONFIG_TOPICS)],
        )
        for topic in ("a", "b", "c"):
            self.model.multi(self.admin, _create_topic_ops(topic, 3, leader=1))
        self.zk = SimZkClient(self.model, 6000)
        self.copy = standby_module.StandbyMetadata(self.zk, refresh_interval_s=0.01, controller_id=2)

    async def __aenter__(self) -> _Copy:
        await self.zk.start()
        self.copy.follow()
        await _until(lambda: self.copy.ready)
        assert (self.copy.reloads, self.copy.kept_on_reload) == (1, 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.copy.close()
        await self.zk.close()

    def write(self, ops: list[Any]) -> None:
        self.model.multi(self.admin, ops)

    async def handed_over_equals_zookeeper(self, topics: dict[str, int]) -> dict[TopicPartition, Any]:
        """Take the copy over; it must be, state by state, what ZooKeeper holds."""
        ctx = ControllerContext()
        assert not isinstance(await self.copy.take(ctx), str)
        expected = {}
        for topic, count in topics.items():
            for p in range(count):
                node = self.model.nodes[paths.partition_state_path(topic, p)]
                expected[TopicPartition(topic, p)] = codecs.decode_partition_state("state", node.data, node.version)
        assert dict(ctx.partition_states) == expected
        for topic in topics:
            znode = codecs.decode_topic("topic", self.model.nodes[paths.topic_path(topic)].data)
            assert {p: a.replicas for p, a in ctx.assignments[topic].items()} == znode.partitions, topic
        return expected


async def test_a_reload_after_lost_watches_keeps_only_what_did_not_change() -> None:
    """A standby whose watches went with its session does not know what changed meanwhile: its
    reload reads every znode again and decodes only what differs from its copy. Changed
    meanwhile, unheard: a state of `a` (version 1 now), topic `b` deleted and created again
    with other leaders (its states back at version 0, as in the copy), one state of `c`
    deleted and created again under its untouched topic znode (version 0 again), a new topic
    `d`. Only the mzxids tell the recreated ones apart. The copy after the reload is what
    ZooKeeper holds, and only `a`'s other two states and `c`'s other two were kept."""
    async with _Copy() as setup:
        # No loop turn from the expiry to the new session: the copy's task cannot look between.
        assert setup.zk.expire()
        setup.write([SetDataOp(paths.partition_state_path("a", 0), _state_bytes(2, (2, 3), 1))])
        setup.write(_delete_topic_ops("b", 3))
        setup.write(_create_topic_ops("b", 3, leader=3, replicas=(3, 2, 1)))
        setup.write(_recreate_state_ops("c", 2, leader=2))
        setup.write(_create_topic_ops("d", 2, leader=2))
        await setup.zk.renew()
        await _until(lambda: setup.copy.reloads == 2 and setup.copy.ready)
        assert setup.copy.kept_on_reload == 4
        expected = await setup.handed_over_equals_zookeeper({"a": 3, "b": 3, "c": 3, "d": 2})
        assert [expected[TopicPartition(t, p)].leader for t, p in (("a", 0), ("b", 0), ("c", 2))] == [2, 3, 2]


async def test_a_change_heard_and_not_yet_read_when_the_watches_went_is_not_kept() -> None:
    """A state of `c` deleted and created again (version 0, as the copy holds it) is heard while
    the copy reads a later change of `a`; the connection goes before the next refresh. The copy
    has read an mzxid above the recreation's, so only its mark of what it heard keeps it from
    taking its old `c` state for the new one."""
    async with _Copy() as setup:
        read = setup.zk.get_many

        async def recreate_then_read(paths_to_read: Any) -> Any:
            if setup.zk.get_many is recreate_then_read:
                setup.zk.get_many = read  # type: ignore[method-assign]
                setup.write(_recreate_state_ops("c", 2, leader=2))  # heard: marked dirty
                setup.write([SetDataOp(paths.partition_state_path("a", 1), _state_bytes(3, (3, 1), 2))])
                got = await read(paths_to_read)  # a/1 at an mzxid above c/2's
                assert setup.zk.expire()
                await setup.zk.renew()
                return got
            return await read(paths_to_read)

        setup.zk.get_many = recreate_then_read  # type: ignore[method-assign]
        setup.write([SetDataOp(paths.partition_state_path("a", 1), _state_bytes(2, (2, 1), 1))])
        await _until(lambda: setup.copy.reloads == 2 and setup.copy.ready)
        expected = await setup.handed_over_equals_zookeeper({"a": 3, "b": 3, "c": 3})
        assert expected[TopicPartition("c", 2)].leader == 2
        assert setup.copy.kept_on_reload == 7  # all but a/1 and c/2


async def test_a_load_decodes_each_read_batch_as_it_comes_in_with_few_outstanding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The copy's states are read in batches, a few outstanding ahead of the one being decoded,
    so only those are held at once: a first load that read 1M states in full before decoding
    them held every read together, and its controller stayed about 0.5 GB larger."""
    monkeypatch.setattr(standby_module, "READ_BATCH", 2)
    monkeypatch.setattr(standby_module.loads, "READ_AHEAD", 1)
    events: list[tuple[str, int]] = []
    decode = standby_module.loads.decode_state_reads

    def recorded(partitions: Any, state_paths: Any, reads: Any) -> Any:
        events.append(("decode", len(partitions)))
        return decode(partitions, state_paths, reads)

    monkeypatch.setattr(standby_module.loads, "decode_state_reads", recorded)
    setup = _Copy()
    read = setup.zk.get_many

    async def get_many(paths_to_read: Any) -> Any:
        if any(path.endswith("/state") for path in paths_to_read):
            events.append(("read", len(paths_to_read)))
        return await read(paths_to_read)

    setup.zk.get_many = get_many  # type: ignore[method-assign]
    async with setup:
        reads = [n for kind, n in events if kind == "read"]
        assert sorted(reads, reverse=True) == [2, 2, 2, 2, 1], events  # 9 states, batches of 2
        assert sum(n for kind, n in events if kind == "decode") == 9, events
        # Before the first batch is decoded, only it and the one read ahead were asked for.
        assert events.index(("decode", 2)) <= 2, events
        await setup.handed_over_equals_zookeeper({"a": 3, "b": 3, "c": 3})


def _fail_the_first_read_of_states(setup: _Copy) -> list[int]:
    """The copy's next read of partition states fails as a lost session fails it (once); the
    returned list gets the number of states it was to read when it did."""
    read = setup.zk.get_many
    failed: list[int] = []

    async def get_many(paths_to_read: Any) -> Any:
        if not failed and any(path.endswith("/state") for path in paths_to_read):
            failed.append(len(paths_to_read))
            raise ZkUnavailableError("the session was lost (injected)")
        return await read(paths_to_read)

    setup.zk.get_many = get_many  # type: ignore[method-assign]
    return failed


async def test_a_reload_whose_read_fails_keeps_the_copy_and_not_what_changed_while_the_watches_were_gone() -> None:
    """While the watches were gone, a state of `a` changed and topic `d` was created after it.
    The reload reads the topics (`d`'s znode at an mzxid above `a`'s change) and fails reading
    the states. The copy is not dropped: the next reload keeps what did not change, and not
    `a`'s changed state, though `a`'s topic znode is as the copy read it and the failed reload
    had read an mzxid above the change."""
    async with _Copy() as setup:
        errors = metrics.STANDBY_ERRORS._value.get()
        assert setup.zk.expire()
        setup.write([SetDataOp(paths.partition_state_path("a", 0), _state_bytes(2, (2, 3), 1))])
        setup.write(_create_topic_ops("d", 2, leader=2))
        failed = _fail_the_first_read_of_states(setup)
        await setup.zk.renew()
        await _until(lambda: setup.copy.reloads == 2 and setup.copy.ready)
        assert failed == [3 * 3 + 2]  # the reload's read of every state failed
        assert metrics.STANDBY_ERRORS._value.get() == errors + 1
        assert setup.copy.kept_on_reload == 8  # all of a, b and c but a/0
        expected = await setup.handed_over_equals_zookeeper({"a": 3, "b": 3, "c": 3, "d": 2})
        assert expected[TopicPartition("a", 0)].leader == 2


async def test_a_refresh_whose_read_fails_leaves_what_it_heard_to_be_read_again() -> None:
    """A state of `c` is deleted and created again (version 0, as the copy holds it), then topic
    `d` created: both heard. The refresh reads `d`'s znode, at an mzxid above the recreation's,
    and fails reading the states. The copy is read again; only the mark of what was heard,
    put back, keeps it from taking its old `c` state for the new one."""
    async with _Copy() as setup:
        failed = _fail_the_first_read_of_states(setup)
        setup.write(_recreate_state_ops("c", 2, leader=2))
        setup.write(_create_topic_ops("d", 2, leader=2))
        await _until(lambda: setup.copy.reloads == 2 and setup.copy.ready)
        assert failed == [1 + 2]  # c/2 and d's states
        assert setup.copy.kept_on_reload == 8  # all of a, b and c but c/2
        expected = await setup.handed_over_equals_zookeeper({"a": 3, "b": 3, "c": 3, "d": 2})
        assert expected[TopicPartition("c", 2)].leader == 2


async def _until(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)
