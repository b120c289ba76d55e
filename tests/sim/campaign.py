"""Seeded fault campaigns on the simulated cluster, in virtual time.

One seed decides everything: the initial topics and a schedule of steps, each an admin
operation, a fault or a pause, separated by virtual time. After every step the safety
invariants are checked; after the last, the faults are healed (every broker and controller
back) and the cluster must converge: one active controller that /controller names, every
partition led, brokers on its epoch with the leaders and epochs ZooKeeper holds, no
reassignment or deletion left. Same seed, same trace (within one interpreter; string hashing
is seeded per process, so replay with the PYTHONHASHSEED the run printed).

    python -m tests.sim.campaign --seeds 500            # a search: reports seeds/s and failures
    python -m tests.sim.campaign --seed 17 --trace      # replay one seed, printing its steps
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import json
import logging
import os
import random
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from controller_svc.adapters.zk import codecs, paths
from controller_svc.adapters.zk.client import CheckOp, CreateOp, SetDataOp
from controller_svc.common.model import TopicPartition
from controller_svc.controller import events as ev
from tests.sim.cluster import SimCluster
from tests.sim.virtual_clock import StuckError, VirtualClock, new_virtual_loop

BROKERS = (1, 2, 3, 4)
CONTROLLERS = (1, 2)


@dataclass
class Outcome:
    seed: int
    trace: list[str] = field(default_factory=list)
    failure: str | None = None
    virtual_s: float = 0.0
    # What the faults did where they landed (e.g. a paused controller's write refused).
    landed: collections.Counter[str] = field(default_factory=collections.Counter)

    def replay_command(self) -> str:
        return (
            f"PYTHONHASHSEED={os.environ.get('PYTHONHASHSEED', '?')} "
            f"python -m tests.sim.campaign --seed {self.seed} --trace"
        )


class Campaign:
    def __init__(self, seed: int, steps: int, clock: VirtualClock) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.steps = steps
        self.clock = clock
        self.cluster = SimCluster(brokers=len(BROKERS), session_timeout_ms=6000, auto_leader_rebalance_enable=False)
        self.trace: list[str] = []
        self.topics: set[str] = set()
        self.topic_seq = 0
        # Per broker incarnation: the highest controller epoch and leader epochs it applied.
        self.seen_epochs: dict[tuple[int, int], int] = {}
        self.seen_leader_epochs: dict[tuple[int, int, TopicPartition], int] = {}
        # Where an unclean election is allowed: topics whose config enables it (the campaign
        # only ever turns it on) and partitions an explicit unclean ElectLeaders named.
        self.unclean_topics: set[str] = set()
        self.unclean_requested: set[TopicPartition] = set()
        self.violations: list[str] = []
        # The replica sets of each topic when its deletion started: the deletion must remove
        # every one of them from its broker.
        self.deleting_replicas: dict[str, dict[int, set[int]]] = {}
        self.strays: set[tuple[int, int, TopicPartition]] = set()
        self.cluster.model.on_commit = self.check_commit
        self.cluster.on_record = self.check_record
        if self.rng.random() < 0.5:
            # Requests and replies take their time: deliveries to different brokers, and those of
            # two controllers to one broker, interleave in orders an instant delivery never shows.
            delays = random.Random(seed * 7919 + 1)
            self.cluster.delivery_delay = lambda: delays.choice((0.0, 0.0, 0.0, 0.01, 0.05, 0.3))

    def log(self, text: str) -> None:
        self.trace.append(f"t={self.clock.now - 1000.0:8.3f} {text}")

    # --- the run ----------------------------------------------------------------------------------

    async def run(self) -> None:
        cluster = self.cluster
        await cluster.start_brokers()
        for controller_id in CONTROLLERS:
            await cluster.start_controller(controller_id)
        for _ in range(self.rng.randint(1, 3)):
            await self.create_topic()
        await self.pause(1.0)
        for _ in range(self.steps):
            action = self.rng.choice(self.actions())
            await action()
            await self.pause(self.rng.choice((0.0, 0.05, 0.3, 1.0, 3.0)))
        await self.heal()
        await self.converge()

    def actions(self) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        return [
            self.create_topic,
            self.kill_broker,
            self.kill_broker,
            self.restart_broker,
            self.restart_broker,
            self.bounce_broker,
            self.stop_controller,
            self.kill_controller,
            self.start_controller,
            self.expire_controller_session,
            self.lose_write_reply,
            self.pause_controller,
            self.pause_controller_mid_write,
            self.hang_reads,
            self.bump_controller_epoch,
            self.controlled_shutdown,
            self.reassign,
            self.cancel,
            self.delete_topic,
            self.preferred_election,
            self.expand_partitions,
            self.enable_unclean_election,
            self.unclean_election,
        ]

    async def pause(self, seconds: float) -> None:
        deadline = self.clock.now + seconds
        while True:
            self.check_safety()
            if self.clock.now >= deadline:
                return
            await asyncio.sleep(min(0.05, deadline - self.clock.now))

    # --- admin operations ---------------------------------------------------------------------------

    async def create_topic(self) -> None:
        name = f"t{self.topic_seq}"
        self.topic_seq += 1
        rf = self.rng.choice((1, 2, 3))
        assignment = {p: self.rng.sample(BROKERS, rf) for p in range(self.rng.randint(1, 4))}
        self.log(f"create topic {name} {assignment}")
        await self.cluster.create_topic(name, assignment)
        self.topics.add(name)

    async def reassign(self) -> None:
        if not self.topics or paths.REASSIGN_PARTITIONS in self.cluster.model.nodes:
            return
        topic = self.rng.choice(sorted(self.topics))
        if paths.topic_path(topic) not in self.cluster.model.nodes:
            return
        partitions = codecs.decode_topic("t", self.cluster.model.nodes[paths.topic_path(topic)].data).partitions
        partition = self.rng.choice(sorted(partitions))
        target = self.rng.sample(BROKERS, self.rng.choice((1, 2, 3)))
        self.log(f"reassign {topic}-{partition} to {target} (ZooKeeper plan)")
        plan = {"version": 1, "partitions": [{"topic": topic, "partition": partition, "replicas": target}]}
        admin = await self.cluster.admin()
        await admin.create(paths.REASSIGN_PARTITIONS, json.dumps(plan).encode())
        await admin.close()

    async def cancel(self) -> None:
        active = self.cluster.active()
        if active is None or not active.context.partitions_being_reassigned:
            return
        tp = self.rng.choice(sorted(active.context.partitions_being_reassigned))
        self.log(f"cancel the reassignment of {tp} (API)")
        reply = asyncio.get_running_loop().create_future()
        active.events.put(ev.ApiPartitionReassignment(reply=reply, requests=((tp.topic, tp.partition, None),)))

    async def delete_topic(self) -> None:
        if not self.topics:
            return
        topic = self.rng.choice(sorted(self.topics))
        self.log(f"delete topic {topic}")
        admin = await self.cluster.admin()
        if f"{paths.DELETE_TOPICS}/{topic}" not in self.cluster.model.nodes:
            await admin.create(f"{paths.DELETE_TOPICS}/{topic}")
        await admin.close()
        self.topics.discard(topic)

    async def preferred_election(self) -> None:
        active = self.cluster.active()
        if active is None:
            return
        self.log("preferred leader election of every partition (API)")
        reply = asyncio.get_running_loop().create_future()
        active.events.put(ev.ElectLeaders(reply=reply, partitions=(), election_type="preferred"))

    def _live_topic(self) -> str | None:
        """A topic that exists in ZooKeeper and is not being deleted."""
        candidates = [
            t
            for t in sorted(self.topics)
            if paths.topic_path(t) in self.cluster.model.nodes
            and f"{paths.DELETE_TOPICS}/{t}" not in self.cluster.model.nodes
        ]
        return self.rng.choice(candidates) if candidates else None

    async def expand_partitions(self) -> None:
        """kafka-topics --alter --partitions: new partitions written into the topic znode."""
        topic = self._live_topic()
        if topic is None:
            return
        path = paths.topic_path(topic)
        node = self.cluster.model.nodes[path]
        znode = codecs.decode_topic(path, node.data)
        rf = len(znode.partitions[min(znode.partitions)])
        first = max(znode.partitions) + 1
        added = {p: tuple(self.rng.sample(BROKERS, rf)) for p in range(first, first + self.rng.randint(1, 2))}
        self.log(f"add partitions to {topic}: {added}")
        admin = await self.cluster.admin()
        expanded = dataclasses.replace(znode, partitions={**znode.partitions, **added})
        await admin.set_data(path, codecs.encode_topic(expanded), version=node.version)
        await admin.close()

    async def enable_unclean_election(self) -> None:
        """kafka-configs: unclean.leader.election.enable=true for a topic, and its notification."""
        topic = self._live_topic()
        if topic is None:
            return
        self.log(f"enable unclean leader election for {topic}")
        self.unclean_topics.add(topic)
        admin = await self.cluster.admin()
        config = json.dumps({"version": 1, "config": {"unclean.leader.election.enable": "true"}}).encode()
        config_path = f"{paths.CONFIG_TOPICS}/{topic}"
        if config_path in self.cluster.model.nodes:
            await admin.set_data(config_path, config)
        else:
            await admin.create(config_path, config)
        note = json.dumps({"version": 2, "entity_path": f"topics/{topic}"}).encode()
        await admin.create(f"{paths.CONFIG_CHANGES}/config_change_", note, sequential=True)
        await admin.close()

    async def unclean_election(self) -> None:
        active = self.cluster.active()
        topic = self._live_topic()
        if active is None or topic is None:
            return
        partitions = sorted(codecs.decode_topic("t", self.cluster.model.nodes[paths.topic_path(topic)].data).partitions)
        tp = TopicPartition(topic, self.rng.choice(partitions))
        self.log(f"unclean leader election of {tp} (API)")
        self.unclean_requested.add(tp)
        reply = asyncio.get_running_loop().create_future()
        active.events.put(ev.ElectLeaders(reply=reply, partitions=((tp.topic, tp.partition),), election_type="unclean"))

    # --- faults -----------------------------------------------------------------------------------

    def _pause_target(self) -> int | None:
        """Mostly the active controller (a zombie matters there), sometimes a standby."""
        if not self.cluster.controllers:
            return None
        active = self.cluster.active()
        if active is not None and self.rng.random() < 0.8:
            return active.id
        return self.rng.choice(sorted(self.cluster.controllers))

    async def pause_controller(self) -> None:
        """SIGSTOP past the session timeout, then SIGCONT: a zombie that resumes believing it
        is still the controller, with requests queued to brokers under its old epoch."""
        controller_id = self._pause_target()
        if controller_id is None:
            return
        seconds = self.rng.choice((2.0, 6.5, 9.0))
        self.log(f"pause controller {controller_id} for {seconds} s (session timeout 6 s)")
        self.cluster.controllers[controller_id].zk.pause(seconds)  # type: ignore[attr-defined]

    async def pause_controller_mid_write(self) -> None:
        """The controller stops just as it writes (a GC pause between deciding and writing);
        the write goes out when it resumes, after its session expired and another controller
        took over: it must be refused."""
        controller_id = self._pause_target()
        if controller_id is None:
            return
        self.log(f"controller {controller_id} pauses for 8 s at its next write")
        self.cluster.controllers[controller_id].zk.pause_at_next_write(8.0)  # type: ignore[attr-defined]

    async def hang_reads(self) -> None:
        """The ZooKeeper server a controller reads from hangs for up to a third of the session
        timeout; the client answers the reads from another server when it moves there."""
        controller_id = self._pause_target()
        if controller_id is None:
            return
        seconds = self.rng.choice((0.2, 1.0, 2.0))
        self.log(f"the ZooKeeper server controller {controller_id} reads from hangs for {seconds} s")
        self.cluster.controllers[controller_id].zk.hang_reads(seconds)  # type: ignore[attr-defined]

    async def bump_controller_epoch(self) -> None:
        """An operator (or a controller this simulation does not run) moves /controller_epoch."""
        node = self.cluster.model.nodes.get(paths.CONTROLLER_EPOCH)
        if node is None:
            return
        epoch = codecs.decode_controller_epoch(node.data) + 1
        self.log(f"/controller_epoch bumped to {epoch} behind the controllers' backs")
        admin = await self.cluster.admin()
        await admin.set_data(paths.CONTROLLER_EPOCH, codecs.encode_controller_epoch(epoch))
        await admin.close()

    async def controlled_shutdown(self) -> None:
        """SIGTERM of a broker: ControlledShutdown to the controller (as broker_stub does), then
        its session closes whatever the answer."""
        running = self._brokers(True)
        active = self.cluster.active()
        if not running or active is None:
            return
        broker_id = self.rng.choice(running)
        broker = self.cluster.brokers[broker_id]
        self.log(f"controlled shutdown of broker {broker_id}")
        reply = asyncio.get_running_loop().create_future()
        epoch = broker.state.broker_epoch
        active.events.put(ev.ControlledShutdown(reply=reply, broker_id=broker_id, broker_epoch=epoch))
        try:
            await asyncio.wait_for(asyncio.shield(reply), 5.0)
        except (TimeoutError, Exception):
            pass
        await broker.stop()

    def _brokers(self, running: bool) -> list[int]:
        return [b for b in BROKERS if self.cluster.brokers[b].running == running]

    async def kill_broker(self) -> None:
        running = self._brokers(True)
        if running:
            broker = self.rng.choice(running)
            self.log(f"kill -9 broker {broker}")
            await self.cluster.brokers[broker].kill()

    async def restart_broker(self) -> None:
        dead = self._brokers(False)
        if dead:
            broker = self.rng.choice(dead)
            self.log(f"restart broker {broker}")
            await self.cluster.brokers[broker].restart(self.cluster)

    async def bounce_broker(self) -> None:
        running = self._brokers(True)
        if running:
            broker = self.rng.choice(running)
            self.log(f"fast bounce of broker {broker}")
            await self.cluster.brokers[broker].kill()
            await self.cluster.brokers[broker].restart(self.cluster)

    async def stop_controller(self) -> None:
        if self.cluster.controllers:
            controller_id = self.rng.choice(sorted(self.cluster.controllers))
            self.log(f"SIGTERM controller {controller_id}")
            await self.cluster.stop_controller(controller_id)

    async def kill_controller(self) -> None:
        if self.cluster.controllers:
            controller_id = self.rng.choice(sorted(self.cluster.controllers))
            self.log(f"kill -9 controller {controller_id} (its session expires in 6 s)")
            await self.cluster.kill_controller(controller_id)

    async def start_controller(self) -> None:
        stopped = [c for c in CONTROLLERS if c not in self.cluster.controllers]
        if stopped:
            controller_id = self.rng.choice(stopped)
            self.log(f"start controller {controller_id}")
            await self.cluster.start_controller(controller_id)

    async def expire_controller_session(self) -> None:
        if self.cluster.controllers:
            controller_id = self.rng.choice(sorted(self.cluster.controllers))
            zk = self.cluster.controllers[controller_id].zk
            if zk.expire():  # type: ignore[attr-defined]
                self.log(f"session of controller {controller_id} expires; a new one follows")
                asyncio.get_running_loop().call_later(0.1, lambda: asyncio.ensure_future(zk.renew()))  # type: ignore[attr-defined]

    async def lose_write_reply(self) -> None:
        active = self.cluster.active()
        if active is not None:
            self.log("the active controller's next write is applied but its reply lost")
            active.zk.lose_next_write_replies(1)  # type: ignore[attr-defined]

    # --- checks -----------------------------------------------------------------------------------

    def check_commit(self, session: int, ops: Any) -> None:
        try:
            self._check_commit(session, ops)
        except Exception as e:
            self.violations.append(f"the commit check failed: {e!r}")

    def _check_commit(self, session: int, ops: Any) -> None:
        """What a controller's session commits: the election multi, its endpoint, the release of
        /controller, or a write behind the fence of the current epoch by the session that holds
        /controller; a partition state it writes names the current controller epoch."""
        controller_id = self.cluster.controllers_session(session)
        if controller_id is None:
            return
        model = self.cluster.model
        first = ops[0]
        if any(op.path in (paths.CONTROLLER, paths.CONTROLLER_EPOCH) and not isinstance(op, CheckOp) for op in ops):
            return  # the election (or creating epoch 0, or releasing /controller)
        if all(op.path.startswith(paths.CONTROLLER_ENDPOINTS) for op in ops):
            return
        owner = model.nodes.get(paths.CONTROLLER)
        epoch_node = model.nodes[paths.CONTROLLER_EPOCH]
        if not (isinstance(first, CheckOp) and first.path == paths.CONTROLLER_EPOCH):
            self.violations.append(f"controller {controller_id} committed an unfenced write: {ops}")
        elif owner is None or owner.ephemeral_owner != session:
            self.violations.append(f"controller {controller_id} committed a write without holding /controller: {ops}")
        epoch = codecs.decode_controller_epoch(epoch_node.data)
        for op in ops:
            if op.path.endswith("/state") and isinstance(op, CreateOp | SetDataOp):
                state = codecs.decode_partition_state(op.path, op.data, 0)
                if state.controller_epoch != epoch:
                    self.violations.append(
                        f"controller {controller_id} wrote {op.path} with epoch {state.controller_epoch}, "
                        f"current {epoch}"
                    )

    def check_record(self, node: str, kind: str, fields: dict[str, Any]) -> None:
        if kind == "topic.deletion_started":
            znode = self.cluster.model.nodes.get(paths.topic_path(fields["topic"]))
            if znode is not None:
                replicas = self.deleting_replicas.setdefault(fields["topic"], {})
                for partition, assigned in codecs.decode_topic("t", znode.data).partitions.items():
                    replicas.setdefault(partition, set()).update(assigned)
        if kind == "partition.leader_elected" and fields.get("unclean"):
            tp = TopicPartition(fields["topic"], fields["partition"])
            if fields["topic"] not in self.unclean_topics and tp not in self.unclean_requested:
                self.violations.append(f"{node}: unclean election of {tp} without permission")

    def check_safety(self) -> None:
        self.cluster.safety()
        assert not self.violations, self.violations[0]
        for broker in self.cluster.brokers.values():
            if not broker.running:
                continue
            incarnation = (broker.broker_id, broker.state.broker_epoch)
            before = self.seen_epochs.get(incarnation, 0)
            assert broker.state.controller_epoch >= before, f"broker {broker.broker_id} went back to an older epoch"
            self.seen_epochs[incarnation] = broker.state.controller_epoch
            for tp, role in broker.state.roles.items():
                key = (broker.broker_id, broker.state.broker_epoch, tp)
                if role.role in ("leader", "follower"):
                    assert role.leader_epoch >= self.seen_leader_epochs.get(key, -1), (
                        f"broker {broker.broker_id} applied an older leader epoch of {tp}"
                    )
                    self.seen_leader_epochs[key] = role.leader_epoch

    async def heal(self) -> None:
        self.log("heal: every broker and controller back, no more faults")
        for controller in self.cluster.controllers.values():
            controller.zk._fail_next = controller.zk._lose_next = 0  # type: ignore[attr-defined]
            controller.zk._pause_at_next_write_s = 0.0  # type: ignore[attr-defined]
        for broker in BROKERS:
            if not self.cluster.brokers[broker].running:
                await self.cluster.brokers[broker].restart(self.cluster)
        for controller_id in CONTROLLERS:
            if controller_id not in self.cluster.controllers:
                await self.cluster.start_controller(controller_id)

    async def converge(self, limit_s: float = 120.0) -> None:
        deadline = self.clock.now + limit_s
        last = "not checked yet"
        while self.clock.now < deadline:
            self.check_safety()
            last = self.unconverged()
            if not last:
                self.log("converged")
                return
            await asyncio.sleep(0.25)
        raise AssertionError(f"no convergence within {limit_s:.0f} virtual s: {last}")

    def unconverged(self) -> str:
        """What still differs from a converged cluster ('' when converged)."""
        cluster = self.cluster
        active = cluster.active()
        if active is None:
            return "no active controller"
        controller_node = cluster.model.nodes.get(paths.CONTROLLER)
        if controller_node is None or codecs.decode_controller(controller_node.data).broker_id != active.id:
            return "/controller does not name the active controller"
        if paths.REASSIGN_PARTITIONS in cluster.model.nodes or active.context.partitions_being_reassigned:
            return f"reassignments left: {sorted(map(str, active.context.partitions_being_reassigned))}"
        deleting = cluster.model.nodes.get(paths.DELETE_TOPICS)
        if deleting is not None and deleting.children:
            return f"deletions left: {sorted(deleting.children)}"
        for path, node in cluster.model.nodes.items():
            if path.startswith(paths.BROKER_TOPICS + "/") and path.count("/") == 3:
                topic = path.rsplit("/", 1)[1]
                for partition in codecs.decode_topic(path, node.data).partitions:
                    if paths.partition_state_path(topic, partition) not in cluster.model.nodes:
                        return f"{topic}-{partition} has no state in ZooKeeper"
        for broker in cluster.brokers.values():
            for tp in broker.state.roles:
                # A deleted topic's replicas are gone from every broker that was one of its
                # replicas when the deletion started: the deletion completes only once each
                # answered StopReplica(delete=true). A replica moved off a broker earlier by a
                # reassignment whose controller died before sending that StopReplica stays there
                # as a stray until the broker restarts, as in Kafka's ZooKeeper mode (KAFKA-14616
                # fixed it for KRaft only): counted, not failed.
                if paths.topic_path(tp.topic) not in cluster.model.nodes:
                    if broker.broker_id in self.deleting_replicas.get(tp.topic, {}).get(tp.partition, set()):
                        return f"broker {broker.broker_id} still holds {tp} of a deleted topic"
                    self.strays.add((broker.broker_id, broker.state.broker_epoch, tp))
        epoch = active.context.epoch
        for broker in cluster.brokers.values():
            if broker.state.controller_epoch != epoch:
                return f"broker {broker.broker_id} is on epoch {broker.state.controller_epoch}, not {epoch}"
        for path, node in cluster.model.nodes.items():
            if not path.endswith("/state"):
                continue
            topic, partition = path.split("/")[3], int(path.split("/")[5])
            tp = TopicPartition(topic, partition)
            state = codecs.decode_partition_state(path, node.data, node.version)
            if state.leader < 0:
                return f"{tp} has no leader (isr {list(state.isr)})"
            replicas = cluster.replicas_in_zookeeper(tp)
            for replica in replicas:
                role = cluster.brokers[replica].state.roles.get(tp)
                if role is None or role.leader != state.leader or role.leader_epoch != state.leader_epoch:
                    return f"broker {replica} has {role} for {tp}, ZooKeeper {state}"
            if set(state.isr) != set(replicas):
                return f"{tp}: ISR {list(state.isr)} is not yet every replica {list(replicas)}"
            for broker in cluster.brokers.values():
                cached = broker.state.metadata.get(tp)
                if cached is None or (cached.leader, cached.leader_epoch) != (state.leader, state.leader_epoch):
                    return f"broker {broker.broker_id}'s metadata of {tp} is {cached}, ZooKeeper {state}"
                if tuple(cached.replicas) != tuple(replicas) or set(cached.isr) != set(state.isr):
                    return f"broker {broker.broker_id}'s metadata of {tp} has {cached}, ZooKeeper {state} {replicas}"
        return ""


def run_seed(seed: int, steps: int = 25) -> Outcome:
    clock = VirtualClock()
    loop = new_virtual_loop(clock)
    campaign = Campaign(seed, steps, clock)
    outcome = Outcome(seed, campaign.trace)

    async def main() -> None:
        try:
            await campaign.run()
        finally:
            await campaign.cluster.stop_all()

    try:
        loop.run_until_complete(main())
        outcome.landed.update(campaign.cluster.model.landed)
        outcome.landed["warm_takeover_checked"] += campaign.cluster.warm_takeovers_checked
        if campaign.strays:
            outcome.landed["stray_replica_left_after_a_move"] += len(campaign.strays)
    except AssertionError as e:
        outcome.failure = str(e)
    except StuckError as e:
        outcome.failure = f"stuck: {e}; last steps: {campaign.trace[-3:]}"
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        clock.real_deadline = float("inf")
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
    outcome.virtual_s = clock.now - 1000.0
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds, from --first")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--seed", type=str, help="run only this seed (or a comma-separated list)")
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--trace", action="store_true", help="print every step of the run")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    if args.seed is not None:
        seeds = [int(s) for s in args.seed.split(",")]
    else:
        seeds = list(range(args.first, args.first + args.seeds))
    started = time.monotonic()
    failures = []
    landed: collections.Counter[str] = collections.Counter()
    for seed in seeds:
        outcome = run_seed(seed, args.steps)
        landed.update(outcome.landed)
        if args.trace:
            print("\n".join(outcome.trace))
        if outcome.failure is not None:
            failures.append(outcome)
            print(f"seed {seed} FAILED: {outcome.failure}\n  replay: {outcome.replay_command()}", file=sys.stderr)
    elapsed = time.monotonic() - started
    print(
        json.dumps(
            {
                "seeds": len(seeds),
                "failed": [o.seed for o in failures],
                "seeds_per_s": round(len(seeds) / elapsed, 1) if elapsed else None,
                "steps": args.steps,
                # How often each fault reached the point it is about (summed over the seeds).
                "landed": dict(sorted(landed.items())),
                "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
            }
        )
    )
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
