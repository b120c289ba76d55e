"""`controller-svc chaos`: a seeded schedule of faults on a real local cluster, judged from
outside.

It starts a cluster with `cluster up`'s launcher on a 3-node ZooKeeper ensemble, creates
topics, and for the given duration draws from one seed a schedule of faults and admin
operations: controllers killed (-9), stopped (SIGTERM), paused past the session timeout
(SIGSTOP, a zombie) and restarted; brokers killed, bounced fast, shut down in a controlled
way (SIGTERM) and restarted; one ZooKeeper server hung (SIGSTOP) or killed and restarted, the
ensemble keeping its quorum; the active controller killed together with a busy broker; every
controller down while a reassignment plan or a deletion request is written to ZooKeeper; and,
throughout, topics created, expanded and deleted, partitions reassigned and cancelled,
preferred and unclean elections. Faults go only to processes the campaign started.

When the faults stop, everything is brought back and the cluster must converge, checked
through ZooKeeper's znodes and every broker's DescribeBroker (not the controller's word): one
controller, every broker on its epoch and registered; every partition led by a member of its
ISR, the ISR within the replicas and, once every broker is back, equal to them; brokers' roles
on ZooKeeper's leader and leader epoch; no reassignment or deletion left, every accepted plan
carried out (or cancelled); nothing lost: every topic created and not deleted exists with all
its partitions, every deleted one is gone. Then `controller-svc analyze` checks every log of
the run; any violation fails the campaign. The summary (JSON) says what was injected, how long
convergence took, how long the cluster took to be serviceable again after each fault
(chaos_recovery: a probe every 0.5 s from outside), and on failure the seed and schedule that
reproduce it. Half the accepted reassignments are held in flight (the leader treats the added
replicas as lagging) so that cancels find moves in progress and must revert them.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from controller_svc.adapters.admin_client import AdminClient
from controller_svc.adapters.zk import codecs, paths
from controller_svc.adapters.zk.client import ZkClient
from controller_svc.common import grpc_common, tls
from controller_svc.common.errors import ControllerError
from controller_svc.common.model import TopicPartition
from controller_svc.devtools import devcluster, zookeeper_launcher
from controller_svc.devtools.chaos_recovery import RecoveryTracker
from kcontroller.v1 import broker_pb2, broker_pb2_grpc, controller_pb2

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChaosSettings:
    directory: str
    seed: int = 1
    duration_s: float = 60.0
    controllers: int = 3
    brokers: int = 4
    zookeeper_nodes: int = 3
    session_timeout_ms: int = 6000
    topics: int = 4
    partitions: int = 25
    converge_timeout_s: float = 180.0
    analyse: bool = True


@dataclass
class Expectations:
    """What the admin operations that were accepted leave behind."""

    topics: dict[str, int] = field(default_factory=dict)  # live topic -> partitions
    deleted: set[str] = field(default_factory=set)
    # (topic, partition) -> target replicas of the last accepted reassignment, None if cancelled
    plans: dict[tuple[str, int], tuple[int, ...] | None] = field(default_factory=dict)
    # (topic, partition) -> the replicas a cancelled move must have reverted to
    reverted: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)


class Chaos:
    def __init__(self, settings: ChaosSettings) -> None:
        self.settings = settings
        self.rng = random.Random(settings.seed)
        self.base = pathlib.Path(settings.directory).resolve()
        self.spec: dict[str, Any] = {}
        self.started = 0.0
        self.schedule: list[dict[str, Any]] = []
        self.faults: collections.Counter[str] = collections.Counter()
        self.admin_ops: collections.Counter[str] = collections.Counter()
        self.expect = Expectations()
        self.topic_seq = 0
        # Processes a fault has taken down (or paused), with what brings them back.
        self._recoveries: list[asyncio.Task[None]] = []
        self._zk_busy = False
        self.recovery = RecoveryTracker()
        # Reassignments kept in flight (an added replica marked lagging on the leader) so that a
        # cancel finds them in progress: (topic, partition) -> replicas before the move.
        self.held: dict[tuple[str, int], tuple[int, ...]] = {}

    # --- the run ---------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        s = self.settings
        leftovers = sorted(n for n in ("logs", "history", "analysis") if (self.base / n).exists())
        if leftovers:
            # Logs are appended to: a previous run's records would be judged with this one's.
            raise devcluster.ClusterError(
                f"{self.base} holds a previous run ({', '.join(leftovers)}): give an empty or new directory"
            )
        # Controllers can stop themselves at a named point (common/self_stop.py): how a fault is
        # made to land in the middle of an operation, provably.
        self.stops = self.base / "stops"
        self.stops.mkdir(parents=True, exist_ok=True)
        self.spec = await asyncio.to_thread(
            devcluster.up,
            str(self.base),
            s.controllers,
            s.brokers,
            None,
            s.session_timeout_ms,
            {"debug.self.stop.dir": str(self.stops)},
            None,
            120.0,
            True,
            s.zookeeper_nodes,
        )
        self.started = time.monotonic()
        summary: dict[str, Any] = {"seed": s.seed, "duration_s": s.duration_s, "directory": str(self.base)}
        try:
            for _ in range(s.topics):
                await self.create_topic(partitions=s.partitions)
            probe = asyncio.create_task(self.probe_serviceable())
            deadline = time.monotonic() + s.duration_s
            actions = self.actions()
            while time.monotonic() < deadline:
                _name, action = self.rng.choice(actions)
                await action()
                await asyncio.sleep(self.rng.uniform(0.5, 3.0))
            self.note("faults stop; everything is brought back")
            stopped = time.monotonic()
            await self.heal()
            unconverged = await self.converge(s.converge_timeout_s)
            probe.cancel()
            await asyncio.gather(probe, return_exceptions=True)
            if not unconverged:
                # Converged is serviceable: whatever a probe had not yet seen recover, has.
                now = self._now()
                self.recovery.probed(now, now, "")
            # From the end of the faults: bringing every process back is part of recovering.
            summary["convergence_s"] = round(time.monotonic() - stopped, 1) if not unconverged else None
            summary["converged"] = not unconverged
            summary["unconverged"] = unconverged
            # The history to judge ends here: the teardown that follows (brokers shut down one by
            # one) is not part of the run and would read as outages.
            await asyncio.to_thread(shutil.copytree, self.spec["logs"], self.base / "history")
        finally:
            await self.heal()
            await asyncio.to_thread(devcluster.down, str(self.base), 10.0)
        summary["faults"] = dict(sorted(self.faults.items()))
        summary["admin_ops"] = dict(sorted(self.admin_ops.items()))
        summary["topics_expected"] = len(self.expect.topics)
        summary.update(self.recovery.summary())
        if s.analyse:
            summary.update(await asyncio.to_thread(self.analyse))
        analysed_ok = not s.analyse or summary.get("analysis_exit_code") == 0
        violations = any(summary.get("violations", {}).values())
        summary["passed"] = bool(summary["converged"]) and analysed_ok and not violations
        if not summary["passed"]:
            summary["schedule"] = self.schedule
            summary["replay"] = f"controller-svc chaos --dir DIR --seed {s.seed} --duration-s {s.duration_s:g}"
        return summary

    def _now(self) -> float:
        return time.monotonic() - self.started

    def note(self, kind: str, **detail: Any) -> None:
        entry = {"t": round(self._now(), 2), "kind": kind, **detail}
        self.schedule.append(entry)
        log.info("chaos: %s", entry)

    def _landed(self, kind: str) -> None:
        """A fault is in place: counted, and its recovery timed from now."""
        self.faults[kind] += 1
        self.recovery.fault(self._now(), kind)

    def actions(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        return [
            ("controller_kill", self.controller_kill),
            ("controller_sigterm", self.controller_sigterm),
            ("controller_pause", self.controller_pause),
            ("broker_kill", self.broker_kill),
            ("broker_bounce", self.broker_bounce),
            ("broker_controlled_shutdown", self.broker_controlled_shutdown),
            ("broker_log_dir_failure", self.broker_log_dir_failure),
            ("lagging_replica", self.lagging_replica),
            ("zookeeper_hang", self.zookeeper_hang),
            ("zookeeper_restart", self.zookeeper_restart),
            ("controller_and_broker_kill", self.controller_and_broker_kill),
            ("controller_killed_mid_operation", self.controller_killed_mid_operation),
            ("all_controllers_down_with_admin", self.all_controllers_down_with_admin),
            ("create_topic", self.create_topic),
            ("create_topic", self.create_topic),
            ("expand_topic", self.expand_topic),
            ("delete_topic", self.delete_topic),
            ("reassign", self.reassign),
            ("reassign", self.reassign),
            ("cancel", self.cancel),
            ("preferred_election", self.preferred_election),
            ("unclean_election", self.unclean_election),
        ]

    # --- processes -------------------------------------------------------------------------

    def _nodes(self, group: str) -> list[dict[str, Any]]:
        return list(self.spec[group])

    def _running(self, group: str) -> list[dict[str, Any]]:
        return [n for n in self.spec[group] if n.get("pid") and zookeeper_launcher.pid_alive(n["pid"])]

    def _name(self, group: str, node: dict[str, Any]) -> str:
        return f"{group[:-1]}-{node['id']}"

    def _signal(self, node: dict[str, Any], sig: int) -> None:
        try:
            os.kill(node["pid"], sig)
        except ProcessLookupError:
            pass

    async def _wait_dead(self, node: dict[str, Any], timeout_s: float = 20.0) -> None:
        """Until the process is gone (SIGKILL after `timeout_s`)."""
        await asyncio.to_thread(zookeeper_launcher.stop_pid, node["pid"], 0, timeout_s)

    def _start(self, group: str, node: dict[str, Any]) -> None:
        node["pid"] = devcluster.spawn_node(
            node["command"], pathlib.Path(self.spec["logs"]) / f"{self._name(group, node)}.log"
        )
        node.pop("stopped", None)
        devcluster.write_spec(self.base, self.spec)

    def _later(self, delay_s: float, work: Callable[[], Awaitable[None]]) -> None:
        async def run() -> None:
            await asyncio.sleep(delay_s)
            await work()

        self._recoveries.append(asyncio.create_task(run()))

    async def _restart_later(self, group: str, node: dict[str, Any], delay_s: float) -> None:
        async def restart() -> None:
            if not zookeeper_launcher.pid_alive(node["pid"]):
                self._start(group, node)
                self.note("restart", node=self._name(group, node))

        self._later(delay_s, restart)

    async def _active_controller(self) -> dict[str, Any] | None:
        try:
            controller_id, _epoch = await asyncio.wait_for(devcluster.read_controller(self.spec["zookeeper"]), 5)
        except (TimeoutError, Exception):
            return None
        return next((c for c in self.spec["controllers"] if c["id"] == controller_id), None)

    async def _pick_controller(self) -> dict[str, Any] | None:
        running = [c for c in self._running("controllers") if not c.get("stopped")]
        if not running:
            return None
        active = await self._active_controller()
        if active in running and self.rng.random() < 0.6:
            return active
        return self.rng.choice(running)

    def _pick_broker(self) -> dict[str, Any] | None:
        running = [b for b in self._running("brokers") if not b.get("stopped")]
        # Keep at least two brokers up: the campaign is about recovering, not about a dead cluster.
        if len(running) <= 2:
            return None
        return self.rng.choice(running)

    # --- controller faults ---------------------------------------------------------------------

    async def controller_kill(self) -> None:
        node = await self._pick_controller()
        if node is None:
            return
        self._signal(node, signal.SIGKILL)
        await self._wait_dead(node)
        self._landed("controller_kill")
        self.note("controller_kill", node=self._name("controllers", node))
        await self._restart_later("controllers", node, self.rng.uniform(1.0, 8.0))

    async def controller_sigterm(self) -> None:
        node = await self._pick_controller()
        if node is None:
            return
        self._signal(node, signal.SIGTERM)
        await self._wait_dead(node)
        self._landed("controller_sigterm")
        self.note("controller_sigterm", node=self._name("controllers", node))
        await self._restart_later("controllers", node, self.rng.uniform(0.5, 4.0))

    async def controller_pause(self) -> None:
        """SIGSTOP past the session timeout: a zombie when it resumes."""
        node = await self._pick_controller()
        if node is None:
            return
        seconds = self.settings.session_timeout_ms / 1000.0 + self.rng.uniform(0.5, 3.0)
        self._signal(node, signal.SIGSTOP)
        node["stopped"] = True
        self._landed("controller_pause")
        self.note("controller_pause", node=self._name("controllers", node), seconds=round(seconds, 1))

        async def resume() -> None:
            self._signal(node, signal.SIGCONT)
            node.pop("stopped", None)
            self.note("resume", node=self._name("controllers", node))

        self._later(seconds, resume)

    # --- broker faults -------------------------------------------------------------------------

    async def broker_kill(self) -> None:
        node = self._pick_broker()
        if node is None:
            return
        self._signal(node, signal.SIGKILL)
        await self._wait_dead(node)
        self._landed("broker_kill")
        self.note("broker_kill", node=self._name("brokers", node))
        await self._restart_later("brokers", node, self.rng.uniform(1.0, 8.0))

    async def broker_bounce(self) -> None:
        """kill -9 and start again at once: the new process registers while the old session is
        still alive (it waits for it to expire) and the controller sees a bounce."""
        node = self._pick_broker()
        if node is None:
            return
        self._signal(node, signal.SIGKILL)
        await self._wait_dead(node)
        self._start("brokers", node)
        self._landed("broker_bounce")
        self.note("broker_bounce", node=self._name("brokers", node))

    async def broker_controlled_shutdown(self) -> None:
        node = self._pick_broker()
        if node is None:
            return
        self._signal(node, signal.SIGTERM)
        node["stopped"] = True
        self._landed("broker_controlled_shutdown")
        self.note("broker_controlled_shutdown", node=self._name("brokers", node))

        async def restart() -> None:
            await self._wait_dead(node, 30.0)
            self._start("brokers", node)
            self.note("restart", node=self._name("brokers", node))

        self._later(self.rng.uniform(1.0, 5.0), restart)

    async def _broker_rpc(self, node: dict[str, Any], method: str, request: Any) -> Any:
        async with tls.aio_channel(node["grpc"], tls.from_env(), grpc_common.CLIENT_OPTIONS) as channel:
            try:
                return await getattr(broker_pb2_grpc.BrokerControlStub(channel), method)(request, timeout=5.0)
            except grpc.aio.AioRpcError as e:
                self.note("rpc_failed", node=self._name("brokers", node), method=method, error=str(e.code()))
                return None

    async def broker_log_dir_failure(self) -> None:
        """A broker's log dir fails: its replicas there go offline (the controller moves their
        leadership); it stays failed until the broker restarts, which the heal does."""
        node = self._pick_broker()
        if node is None:
            return
        described = await devcluster.describe_broker(node["grpc"])
        if described is None or not described.log_dirs:
            return
        response = await self._broker_rpc(
            node, "FailLogDir", broker_pb2.FailLogDirRequest(log_dir=described.log_dirs[0])
        )
        if response is not None and response.error_code == 0:
            node["needs_restart"] = True
            self._landed("broker_log_dir_failure")
            self.note("broker_log_dir_failure", node=self._name("brokers", node), log_dir=described.log_dirs[0])

    async def lagging_replica(self) -> None:
        """A follower falls behind: its leader shrinks the ISR (and keeps it out until the
        leader's process restarts, which the heal does)."""
        topic = self._live_topic()
        if topic is None:
            return
        partition = self.rng.randrange(self.expect.topics[topic])
        zk = ZkClient(self.spec["zookeeper"], 10000)
        try:
            await zk.start(timeout_s=15)
            got = await zk.get_or_none(paths.partition_state_path(topic, partition))
        except ControllerError:
            return
        finally:
            await zk.close()
        if got is None:
            return
        state = codecs.decode_partition_state("state", got[0], got[1].version)
        followers = [r for r in state.isr if r != state.leader]
        leader = next((b for b in self.spec["brokers"] if b["id"] == state.leader), None)
        if not followers or leader is None or not zookeeper_launcher.pid_alive(leader["pid"]):
            return
        replica = self.rng.choice(followers)
        request = broker_pb2.SetReplicaLaggingRequest(topic=topic, partition=partition, replica=replica, lagging=True)
        response = await self._broker_rpc(leader, "SetReplicaLagging", request)
        if response is not None and response.error_code == 0:
            leader["needs_restart"] = True
            self._landed("lagging_replica")
            self.note("lagging_replica", topic=topic, partition=partition, replica=replica, leader=leader["id"])

    # --- ZooKeeper faults (one server at a time: the ensemble keeps its quorum) ----------------

    def _zk_nodes(self) -> list[dict[str, Any]]:
        return list(self.spec.get("zookeeper_nodes", []))

    async def zookeeper_hang(self) -> None:
        nodes = self._zk_nodes()
        if len(nodes) < 3 or self._zk_busy:
            return
        node = self.rng.choice(nodes)
        session_s = self.settings.session_timeout_ms / 1000.0
        seconds = self.rng.uniform(session_s / 3, session_s)
        self._zk_busy = True
        self._signal(node, signal.SIGSTOP)
        self._landed("zookeeper_hang")
        self.note("zookeeper_hang", server=node["id"], seconds=round(seconds, 1))

        async def resume() -> None:
            self._signal(node, signal.SIGCONT)
            self._zk_busy = False
            self.note("zookeeper_resume", server=node["id"])

        self._later(seconds, resume)

    async def zookeeper_restart(self) -> None:
        nodes = self._zk_nodes()
        if len(nodes) < 3 or self._zk_busy:
            return
        node = self.rng.choice(nodes)
        self._zk_busy = True
        self._signal(node, signal.SIGKILL)
        self._landed("zookeeper_restart")
        self.note("zookeeper_kill", server=node["id"])

        async def restart() -> None:
            await asyncio.to_thread(self._restart_zookeeper, node)
            self._zk_busy = False
            self.note("zookeeper_restart", server=node["id"])

        self._later(self.rng.uniform(2.0, 6.0), restart)

    def _restart_zookeeper(self, node: dict[str, Any]) -> None:
        if node.get("pid") and zookeeper_launcher.pid_alive(node["pid"]):
            return
        zk_node = zookeeper_launcher.ZooKeeperNode(
            node["id"], node["port"], pathlib.Path(node["data_dir"]), command=node["command"]
        )
        zookeeper_launcher.ZooKeeper([zk_node]).restart_node(0)
        node["pid"] = zk_node.pid
        devcluster.write_spec(self.base, self.spec)

    # --- combinations --------------------------------------------------------------------------

    async def controller_killed_mid_operation(self) -> None:
        """A broker dies and the controller is killed in the middle of handling it: between the
        partition-state write that gives the dead broker's partitions new leaders and the one
        that takes it out of the other ISRs. The controller stops itself there (its
        `debug.self_stop` record proves where) and is killed while stopped."""
        controller = await self._active_controller()
        broker = self._pick_broker()
        if controller is None or broker is None or not zookeeper_launcher.pid_alive(controller["pid"]):
            return
        node = self._name("controllers", controller)
        arm = self.stops / f"{node}.before-fenced-write"
        arm.write_text("skip=1 match=/state")
        stops_before = self._self_stops(node)
        self._signal(broker, signal.SIGKILL)
        await self._wait_dead(broker)
        landed = await self._until(
            lambda: self._self_stops(node) > stops_before, self.settings.session_timeout_ms / 1000.0 + 10.0
        )
        arm.unlink(missing_ok=True)
        self._signal(controller, signal.SIGKILL)
        await self._wait_dead(controller)
        self._landed("controller_killed_mid_operation" if landed else "controller_kill_after_broker_failure")
        broker_name = self._name("brokers", broker)
        self.note("controller_killed_mid_operation", controller=node, broker=broker_name, landed=landed)
        await self._restart_later("controllers", controller, self.rng.uniform(1.0, 5.0))
        await self._restart_later("brokers", broker, self.rng.uniform(2.0, 8.0))

    @staticmethod
    async def _until(condition: Callable[[], bool], timeout_s: float) -> bool:
        """Poll `condition` (a file the process under test writes) until true or timed out."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.2)
        return True

    def _self_stops(self, node: str) -> int:
        path = pathlib.Path(self.spec["logs"]) / f"{node}.state-change.jsonl"
        try:
            return path.read_text(errors="replace").count('"kind":"debug.self_stop"')
        except FileNotFoundError:
            return 0

    async def controller_and_broker_kill(self) -> None:
        """The active controller and a broker die together."""
        controller = await self._active_controller()
        broker = self._pick_broker()
        if controller is None or broker is None or not zookeeper_launcher.pid_alive(controller["pid"]):
            return
        self._signal(controller, signal.SIGKILL)
        self._signal(broker, signal.SIGKILL)
        await self._wait_dead(controller)
        await self._wait_dead(broker)
        self._landed("controller_and_broker_kill")
        self.note(
            "controller_and_broker_kill",
            controller=self._name("controllers", controller),
            broker=self._name("brokers", broker),
        )
        await self._restart_later("controllers", controller, self.rng.uniform(1.0, 6.0))
        await self._restart_later("brokers", broker, self.rng.uniform(1.0, 6.0))

    async def all_controllers_down_with_admin(self) -> None:
        """Every controller down (SIGTERM) while a reassignment plan or a deletion request is
        written to ZooKeeper, as kafka-reassign-partitions / kafka-topics --zookeeper do."""
        if any(c.get("stopped") for c in self.spec["controllers"]):
            return
        for node in self._running("controllers"):
            self._signal(node, signal.SIGTERM)
        for node in self.spec["controllers"]:
            await self._wait_dead(node)
        self._landed("all_controllers_down")
        zk = ZkClient(self.spec["zookeeper"], 10000)
        try:
            await zk.start(timeout_s=15)
            # A deletion leaves at least two topics, as `delete_topic` does (the convergence check
            # needs live topics to check); with two left, the plan instead.
            if self.rng.random() < 0.5 or len(self.expect.topics) <= 2:
                await self._zk_reassign(zk)
            else:
                await self._zk_delete(zk)
        except ControllerError as e:
            self.note("admin_failed", op="zookeeper_write", error=str(e))
        finally:
            await zk.close()
        self.note("all_controllers_down")
        for node in self.spec["controllers"]:
            await self._restart_later("controllers", node, self.rng.uniform(0.5, 3.0))

    async def _zk_reassign(self, zk: ZkClient) -> None:
        topic = self._live_topic()
        if topic is None or await zk.exists(paths.REASSIGN_PARTITIONS) is not None:
            return
        partition = self.rng.randrange(self.expect.topics[topic])
        target = tuple(self.rng.sample([b["id"] for b in self.spec["brokers"]], 3))
        await zk.create(
            paths.REASSIGN_PARTITIONS, codecs.encode_reassignment_plan({TopicPartition(topic, partition): target})
        )
        self.expect.plans[(topic, partition)] = target
        self.expect.reverted.pop((topic, partition), None)
        self.held.pop((topic, partition), None)
        self.admin_ops["reassign_zookeeper"] += 1
        self.note("reassign_zookeeper", topic=topic, partition=partition, target=list(target))

    async def _zk_delete(self, zk: ZkClient) -> None:
        topic = self._live_topic()
        if topic is None:
            return
        await zk.create(f"{paths.DELETE_TOPICS}/{topic}")
        self._deleted(topic)
        self.admin_ops["delete_zookeeper"] += 1
        self.note("delete_zookeeper", topic=topic)

    # --- admin operations ----------------------------------------------------------------------

    def _live_topic(self) -> str | None:
        topics = sorted(self.expect.topics)
        return self.rng.choice(topics) if topics else None

    def _deleted(self, topic: str) -> None:
        self.expect.topics.pop(topic, None)
        self.expect.deleted.add(topic)
        for key in [k for k in self.expect.plans if k[0] == topic]:
            del self.expect.plans[key]
            self.expect.reverted.pop(key, None)
            self.held.pop(key, None)

    async def _admin(self, op: str, call: Callable[[AdminClient], Awaitable[Any]]) -> Any:
        """Run an admin RPC; errors (no controller, a controller moving) are part of chaos."""
        client = AdminClient(zookeeper=self.spec["zookeeper"])
        try:
            return await asyncio.wait_for(call(client), 20.0)
        except (TimeoutError, Exception) as e:
            self.admin_ops[f"{op}_failed"] += 1
            self.note("admin_failed", op=op, error=f"{type(e).__name__}: {e}"[:200])
            return None

    async def create_topic(self, partitions: int | None = None) -> None:
        name = f"chaos-{self.settings.seed}-{self.topic_seq}"
        self.topic_seq += 1
        count = partitions or self.rng.randint(1, 10)
        rf = self.rng.choice((2, 3))
        request = controller_pb2.CreateTopicsRequest(
            topics=[controller_pb2.CreatableTopic(name=name, num_partitions=count, replication_factor=rf)]
        )
        response = await self._admin("create_topic", lambda c: c.create_topics(request))
        if response is not None and response.topics and response.topics[0].error_code == 0:
            self.expect.topics[name] = count
            self.admin_ops["create_topic"] += 1
            self.note("create_topic", topic=name, partitions=count, replication_factor=rf)
        elif response is not None:
            self.admin_ops["create_topic_refused"] += 1

    async def expand_topic(self) -> None:
        """kafka-topics --alter --partitions (--zookeeper): new partitions in the topic znode."""
        topic = self._live_topic()
        if topic is None:
            return
        zk = ZkClient(self.spec["zookeeper"], 10000)
        try:
            await zk.start(timeout_s=15)
            got = await zk.get_or_none(paths.topic_path(topic))
            if got is None:
                return
            znode = codecs.decode_topic(paths.topic_path(topic), got[0])
            rf = len(next(iter(znode.partitions.values())))
            first = max(znode.partitions) + 1
            brokers = [b["id"] for b in self.spec["brokers"]]
            added = {p: tuple(self.rng.sample(brokers, rf)) for p in range(first, first + self.rng.randint(1, 3))}
            expanded = codecs.TopicZnode(
                {**znode.partitions, **added}, znode.adding_replicas, znode.removing_replicas, znode.topic_id
            )
            await zk.set_data(paths.topic_path(topic), codecs.encode_topic(expanded), version=got[1].version)
            self.expect.topics[topic] = first + len(added)
            self.admin_ops["expand_topic"] += 1
            self.note("expand_topic", topic=topic, partitions=first + len(added))
        except ControllerError as e:
            self.note("admin_failed", op="expand_topic", error=str(e)[:200])
        finally:
            await zk.close()

    async def delete_topic(self) -> None:
        topic = self._live_topic()
        if topic is None or len(self.expect.topics) <= 2:
            return
        response = await self._admin("delete_topic", lambda c: c.delete_topics([topic]))
        if response is not None and response.topics and response.topics[0].error_code == 0:
            self._deleted(topic)
            self.admin_ops["delete_topic"] += 1
            self.note("delete_topic", topic=topic)

    async def reassign(self) -> None:
        topic = self._live_topic()
        if topic is None:
            return
        partition = self.rng.randrange(self.expect.topics[topic])
        brokers = [b["id"] for b in self.spec["brokers"]]
        target = self.rng.sample(brokers, self.rng.choice((2, 3)))
        response = await self._admin("reassign", lambda c: c.alter_reassignments([(topic, partition, target)]))
        if response is None:
            return
        codes = [p.error_code for p in response.partitions] or [response.error_code]
        if all(code == 0 for code in codes):
            self.expect.plans[(topic, partition)] = tuple(target)
            self.expect.reverted.pop((topic, partition), None)
            self.held.pop((topic, partition), None)
            self.admin_ops["reassign"] += 1
            self.note("reassign", topic=topic, partition=partition, target=target)
            if self.rng.random() < 0.5:
                await self._hold_move(topic, partition)
        else:
            self.admin_ops["reassign_refused"] += 1

    async def _hold_move(self, topic: str, partition: int) -> None:
        """Keep a move in flight until it is cancelled or the heal restarts the leader: the
        leader treats the replicas being added as lagging, so they never join the ISR and the
        reassignment cannot complete (how a slow replica copy looks to the controller)."""
        zk = ZkClient(self.spec["zookeeper"], 10000)
        try:
            await zk.start(timeout_s=15)
            # The added replicas reach the leader with phase A's LeaderAndIsr; they catch up
            # after replica.catchup.delay.ms (1 s), so mark them at once, retrying briefly.
            for _ in range(10):
                topic_got = await zk.get_or_none(paths.topic_path(topic))
                state_got = await zk.get_or_none(paths.partition_state_path(topic, partition))
                if topic_got is None or state_got is None:
                    return
                znode = codecs.decode_topic(paths.topic_path(topic), topic_got[0])
                adding = znode.adding_replicas.get(partition, ())
                if not adding:
                    return  # nothing to copy, or the move completed already
                state = codecs.decode_partition_state("state", state_got[0], state_got[1].version)
                leader = next((b for b in self.spec["brokers"] if b["id"] == state.leader), None)
                if leader is None or not self._serving(leader):
                    return
                codes = []
                for replica in adding:
                    request = broker_pb2.SetReplicaLaggingRequest(
                        topic=topic, partition=partition, replica=replica, lagging=True
                    )
                    response = await self._broker_rpc(leader, "SetReplicaLagging", request)
                    codes.append(-1 if response is None else response.error_code)
                if all(code == 0 for code in codes):
                    leader["needs_restart"] = True
                    original = tuple(r for r in znode.partitions[partition] if r not in adding)
                    self.held[(topic, partition)] = original
                    self.admin_ops["reassign_held"] += 1
                    self.note("reassign_held", topic=topic, partition=partition, adding=list(adding))
                    return
                await asyncio.sleep(0.05)  # the leader has not yet been told of the new replicas
        except ControllerError as e:
            self.note("admin_failed", op="hold_move", error=str(e)[:200])
        finally:
            await zk.close()

    async def cancel(self) -> None:
        in_flight = sorted(k for k, v in self.expect.plans.items() if v is not None)
        if not in_flight:
            return
        held = sorted(k for k in self.held if k in in_flight)
        topic, partition = self.rng.choice(held if held and self.rng.random() < 0.8 else in_flight)
        original = self.held.pop((topic, partition), None)
        response = await self._admin("cancel", lambda c: c.alter_reassignments([(topic, partition, None)]))
        if response is None:
            return
        codes = [p.error_code for p in response.partitions] or [response.error_code]
        if all(code == 0 for code in codes):
            self.expect.plans[(topic, partition)] = None
            if original is not None:
                # Cancelled as asked: back on the replicas it had before the move.
                self.expect.reverted[(topic, partition)] = original
            self.admin_ops["cancel"] += 1
            self.note("cancel", topic=topic, partition=partition, reverted_to=list(original or ()))
        else:
            # Typically NO_REASSIGNMENT_IN_PROGRESS: the move had completed; its target stands.
            self.admin_ops["cancel_refused"] += 1
            self.note("cancel_refused", topic=topic, partition=partition, codes=codes)

    async def preferred_election(self) -> None:
        response = await self._admin("preferred_election", lambda c: c.elect_leaders("preferred"))
        if response is not None:
            self.admin_ops["preferred_election"] += 1
            self.note("preferred_election")

    async def unclean_election(self) -> None:
        topic = self._live_topic()
        if topic is None:
            return
        partition = self.rng.randrange(self.expect.topics[topic])
        response = await self._admin("unclean_election", lambda c: c.elect_leaders("unclean", [(topic, partition)]))
        if response is not None:
            self.admin_ops["unclean_election"] += 1
            self.note("unclean_election", topic=topic, partition=partition)

    # --- heal, converge, analyse ---------------------------------------------------------------

    async def heal(self) -> None:
        for task in self._recoveries:
            task.cancel()
        await asyncio.gather(*self._recoveries, return_exceptions=True)
        self._recoveries.clear()
        for node in self._zk_nodes():
            self._signal(node, signal.SIGCONT)
            await asyncio.to_thread(self._restart_zookeeper, node)
        self._zk_busy = False
        for node in self.spec["brokers"]:
            # A failed log dir, or a follower marked lagging, lasts until the broker restarts.
            if node.pop("needs_restart", False) and zookeeper_launcher.pid_alive(node["pid"]):
                self._signal(node, signal.SIGCONT)
                self._signal(node, signal.SIGTERM)
                await self._wait_dead(node, 30.0)
                self._start("brokers", node)
                self.note("restart", node=self._name("brokers", node), reason="log dir or lagging replica")
        for group in ("controllers", "brokers"):
            for node in self.spec[group]:
                if node.get("pid") and zookeeper_launcher.pid_alive(node["pid"]):
                    self._signal(node, signal.SIGCONT)
                    node.pop("stopped", None)
                    continue
                if node.get("stopped"):
                    await self._wait_dead(node, 30.0)
                self._start(group, node)

    async def converge(self, timeout_s: float) -> str:
        """'' once converged, else what still differs when the time is up."""
        deadline = time.monotonic() + timeout_s
        last = "not checked"
        while time.monotonic() < deadline:
            try:
                last = await asyncio.wait_for(self.unconverged(), 30.0)
            except (TimeoutError, Exception) as e:
                last = f"{type(e).__name__}: {e}"
            if not last:
                self.note("converged")
                return ""
            await asyncio.sleep(1.0)
        self.note("not_converged", reason=last)
        return last

    # --- recovery after each fault ------------------------------------------------------------

    def _serving(self, node: dict[str, Any]) -> bool:
        """Running and not paused (a SIGSTOPped process still holds its ZooKeeper registration
        until its session expires: registered is not serving)."""
        return bool(node.get("pid")) and zookeeper_launcher.pid_alive(node["pid"]) and not node.get("stopped")

    async def probe_serviceable(self, interval_s: float = 0.5) -> None:
        """Every `interval_s`, is the cluster serviceable? Times each fault's recovery
        (chaos_recovery). One ZooKeeper session, replaced when it fails (a hung server)."""
        zk: ZkClient | None = None
        try:
            while True:
                started = self._now()
                try:
                    if zk is None:
                        zk = ZkClient(self.spec["zookeeper"], 10000)
                        await zk.start(timeout_s=10)
                    obstacle = await asyncio.wait_for(self._unserviceable(zk), 10.0)
                except (TimeoutError, Exception) as e:
                    obstacle = f"probe failed: {type(e).__name__}: {e}"
                    if zk is not None:
                        await asyncio.shield(zk.close())
                        zk = None
                self.recovery.probed(started, self._now(), obstacle[:160])
                await asyncio.sleep(interval_s)
        finally:
            if zk is not None:
                await zk.close()

    async def _unserviceable(self, zk: ZkClient) -> str:
        """'' when the cluster can serve every expected partition now, else the first obstacle."""
        topics = dict(self.expect.topics)  # the campaign goes on while we read
        got = await zk.get_or_none(paths.CONTROLLER)
        if got is None:
            return "no controller"
        controller_id = codecs.decode_controller(got[0]).broker_id
        controller = next((c for c in self.spec["controllers"] if c["id"] == controller_id), None)
        if controller is None or not self._serving(controller):
            return f"/controller names {controller_id}, which is not running"
        epoch_got = await zk.get_or_none(paths.CONTROLLER_EPOCH)
        if epoch_got is None:
            return "no /controller_epoch"
        epoch = codecs.decode_controller_epoch(epoch_got[0])
        registered = {int(b) for b in await zk.get_children_or_empty(paths.BROKER_IDS)}
        serving = {b["id"]: b for b in self.spec["brokers"] if self._serving(b) and b["id"] in registered}
        described = await asyncio.gather(*(devcluster.describe_broker(b["grpc"], 2.0) for b in serving.values()))
        roles: dict[int, dict[tuple[str, int], Any]] = {}
        failed: dict[int, set[tuple[str, int]]] = {}  # replicas on a failed log dir
        for broker_id, d in zip(serving, described, strict=True):
            if d is None:
                return f"broker {broker_id} does not answer"
            if d.controller_epoch != epoch:
                return f"broker {broker_id} is on controller epoch {d.controller_epoch}, not {epoch}"
            offline = set(d.offline_log_dirs)
            roles[broker_id] = {(r.topic, r.partition): r for r in d.roles if r.log_dir not in offline}
            failed[broker_id] = {(r.topic, r.partition) for r in d.roles if r.log_dir in offline}
        keys = [(topic, p) for topic, count in sorted(topics.items()) for p in range(count)]
        states = await zk.get_many([paths.partition_state_path(t, p) for t, p in keys])
        for key, state_got in zip(keys, states, strict=True):
            topic, partition = key
            if state_got is None:
                return f"{topic}-{partition} has no state"
            state = codecs.decode_partition_state("state", state_got[0], state_got[1].version)
            role = roles.get(state.leader, {}).get(key)
            if role is not None and role.role == "leader" and role.leader_epoch == state.leader_epoch:
                continue
            # Without unclean elections only an in-sync replica may lead: a partition whose ISR
            # is entirely on processes a fault still holds down (dead, paused, or a failed log
            # dir, which last until the heal) waits for one of them, not for the controller.
            if any(r in serving and key not in failed[r] for r in state.isr):
                return f"{topic}-{partition} has no serving leader (ZooKeeper names {state.leader})"
        return ""

    async def unconverged(self) -> str:
        zk = ZkClient(self.spec["zookeeper"], 10000)
        await zk.start(timeout_s=15)
        try:
            return await self._check(zk)
        finally:
            await zk.close()

    async def _check(self, zk: ZkClient) -> str:
        got = await zk.get_or_none(paths.CONTROLLER)
        if got is None:
            return "no controller"
        controller_id = codecs.decode_controller(got[0]).broker_id
        if controller_id not in {c["id"] for c in self.spec["controllers"]}:
            return f"/controller names {controller_id}, not one of ours"
        epoch_got = await zk.get_or_none(paths.CONTROLLER_EPOCH)
        if epoch_got is None:
            return "no /controller_epoch"
        epoch = codecs.decode_controller_epoch(epoch_got[0])
        if await zk.exists(paths.REASSIGN_PARTITIONS) is not None:
            return "a reassignment plan is left in ZooKeeper"
        deleting = await zk.get_children_or_empty(paths.DELETE_TOPICS)
        if deleting:
            return f"deletions left: {sorted(deleting)}"
        registered = {int(b) for b in await zk.get_children_or_empty(paths.BROKER_IDS)}
        brokers = {b["id"]: b for b in self.spec["brokers"]}
        if registered != set(brokers):
            return f"registered brokers {sorted(registered)}, expected {sorted(brokers)}"
        described = {}
        for broker_id, node in brokers.items():
            d = await devcluster.describe_broker(node["grpc"])
            if d is None or not d.registered:
                return f"broker {broker_id} does not answer or is not registered"
            if d.controller_epoch != epoch:
                return f"broker {broker_id} is on controller epoch {d.controller_epoch}, not {epoch}"
            described[broker_id] = {(p.topic, p.partition): p for p in d.roles}
        topics = set(await zk.get_children_or_empty(paths.BROKER_TOPICS))
        for topic in self.expect.deleted:
            if topic in topics:
                return f"deleted topic {topic} still exists"
        for topic, count in self.expect.topics.items():
            if topic not in topics:
                return f"topic {topic} is lost"
            got_topic = await zk.get_or_none(paths.topic_path(topic))
            if got_topic is None:
                return f"topic {topic} is lost"
            znode = codecs.decode_topic(paths.topic_path(topic), got_topic[0])
            if len(znode.partitions) < count:
                return f"topic {topic} has {len(znode.partitions)} partitions, expected {count}"
            if znode.adding_replicas or znode.removing_replicas:
                return f"topic {topic} is still being reassigned"
            for partition, replicas in sorted(znode.partitions.items()):
                state_got = await zk.get_or_none(paths.partition_state_path(topic, partition))
                if state_got is None:
                    return f"{topic}-{partition} has no state"
                state = codecs.decode_partition_state("state", state_got[0], state_got[1].version)
                if state.leader not in state.isr:
                    return f"{topic}-{partition}: leader {state.leader} not in ISR {list(state.isr)}"
                if not set(state.isr) <= set(replicas):
                    return f"{topic}-{partition}: ISR {list(state.isr)} outside replicas {list(replicas)}"
                if set(state.isr) != set(replicas):
                    return f"{topic}-{partition}: ISR {list(state.isr)} is not yet every replica {list(replicas)}"
                plan = self.expect.plans.get((topic, partition))
                if plan is not None and tuple(replicas) != plan:
                    return f"{topic}-{partition}: replicas {list(replicas)}, the accepted plan asked {list(plan)}"
                reverted = self.expect.reverted.get((topic, partition))
                if plan is None and reverted is not None and set(replicas) != set(reverted):
                    return f"{topic}-{partition}: replicas {list(replicas)}, a cancel reverts to {list(reverted)}"
                for replica in replicas:
                    role = described[replica].get((topic, partition))
                    if role is None or role.leader != state.leader or role.leader_epoch != state.leader_epoch:
                        return f"broker {replica}'s role for {topic}-{partition} is {role}, ZooKeeper {state}"
        return ""

    def analyse(self) -> dict[str, Any]:
        """`controller-svc analyze` on every log of the run, up to convergence."""
        if not (self.base / "history").exists():
            return {"analysis_exit_code": None, "analysis_error": "the run ended before its history was kept"}
        out = self.base / "analysis"
        result = subprocess.run(
            [sys.executable, "-m", "controller_svc", "analyze", str(self.base / "history"), "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=900,
        )
        summary_path = out / "summary.json"
        if not summary_path.exists():
            return {"analysis_exit_code": result.returncode, "analysis_error": result.stderr[-2000:]}
        analysed = json.loads(summary_path.read_text())
        return {
            "analysis_exit_code": result.returncode,
            "events": analysed["events"],
            "violations": analysed["violations"],
            "availability": analysed["availability"],
            "report": str(out / "report.html"),
        }


def run_chaos(settings: ChaosSettings) -> dict[str, Any]:
    import uvloop

    return uvloop.run(Chaos(settings).run())
