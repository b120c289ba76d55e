"""Synthetic cluster histories in the state-change format of contract 5, with known answers.

`HistoryWriter` writes records node by node; `generate` plays a whole cluster: topic creation,
broker failures and returns, controller failovers, preferred elections, each with the
controller's requests, the brokers' applications and role changes, as the real processes log
them. It can inject each invariant violation a given number of times, and reports what an
analysis must find. Used by the pipeline tests and by bench/analytics.py (10M events).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from controller_svc.analytics import schema

ALIVE_INTERVAL_MS = 500


class HistoryWriter:
    """Appends records to `<dir>/<node>.state-change.jsonl`, buffered per node."""

    def __init__(self, directory: str | pathlib.Path, flush_every: int = 20_000) -> None:
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[bytes]] = {}
        self._buffers: dict[str, list[bytes]] = {}
        self._flush_every = flush_every
        self.count = 0

    def record(self, ts: int, node: str, kind: str, **fields: Any) -> None:
        entry: dict[str, Any] = {"ts": ts, "node": node, "kind": kind}
        entry.update(fields)
        self.raw(node, orjson.dumps(entry))
        self.count += 1

    def raw(self, node: str, line: bytes) -> None:
        """A line as is: for malformed input."""
        buffer = self._buffers.setdefault(node, [])
        buffer.append(line + b"\n")
        if len(buffer) >= self._flush_every:
            self._flush(node)

    def _flush(self, node: str) -> None:
        buffer = self._buffers.get(node)
        if not buffer:
            return
        handle = self._files.get(node)
        if handle is None:
            handle = self._files[node] = open(self.directory / f"{node}.state-change.jsonl", "ab")  # noqa: SIM115
        handle.write(b"".join(buffer))
        buffer.clear()

    def close(self) -> None:
        for node in list(self._buffers):
            self._flush(node)
        for handle in self._files.values():
            handle.close()
        self._files.clear()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


@dataclass
class Expected:
    """What an analysis of a generated history must report."""

    events: int = 0
    failovers: int = 0
    elections: int = 0
    offline_intervals: int = 0
    violations: dict[str, int] = field(default_factory=lambda: {name: 0 for name in schema.INVARIANTS})

    def as_json(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "failovers": self.failovers,
            "elections": self.elections,
            "offline_intervals": self.offline_intervals,
            "violations": dict(self.violations),
        }


def differences(summary: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """Where an analysis' summary (contract 6) disagrees with a generated history's known
    answers (`Expected.as_json()`): the violations by invariant, the failovers and the offline
    intervals; empty when it agrees."""
    found = {
        "violations": summary["violations"],
        "failovers": summary["availability"]["failovers"],
        "offline_intervals": summary["availability"]["offline_intervals"],
    }
    return [f"{name}: {found[name]} instead of {expected[name]}" for name in found if found[name] != expected[name]]


@dataclass
class _Partition:
    topic: str
    index: int
    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]


class _Cluster:
    """The generator's model of a cluster: one controller at a time, brokers that fail and return."""

    def __init__(self, out: HistoryWriter, brokers: int, controllers: int, rng: random.Random, start_ms: int) -> None:
        self.out = out
        self.rng = rng
        self.now = start_ms
        self.brokers = list(range(1, brokers + 1))
        self.controllers = list(range(1, controllers + 1))
        self.alive = set(self.brokers)
        self.broker_epochs = {b: 100 + b for b in self.brokers}
        self.next_broker_epoch = 1000
        self.controller = 0
        self.epoch = 0
        self.correlation = 0
        self.partitions: list[_Partition] = []
        self.expected = Expected()
        self.pending_claim_injection = 0
        self.controller_of_epoch: dict[int, int] = {}
        # Controller processes that are down (a kill -9 until the next election), silent meanwhile.
        self.down_controllers: set[int] = set()

    def tick(self, ms: int = 1) -> int:
        self.now += ms
        return self.now

    def pass_time(self, ms: int) -> None:
        """Time passes: every live process writes node.alive every ALIVE_INTERVAL_MS, as the real
        ones do (controller_svc.common.loop_monitor), so a dead one's last sign of life is known."""
        end = self.now + ms
        while self.now + ALIVE_INTERVAL_MS < end:
            self.tick(ALIVE_INTERVAL_MS)
            for broker in sorted(self.alive):
                self.out.record(self.now, f"broker-{broker}", "node.alive")
            for controller in self.controllers:
                if controller not in self.down_controllers:
                    self.out.record(self.now, f"controller-{controller}", "node.alive")
        self.now = end

    @property
    def cnode(self) -> str:
        return f"controller-{self.controller}"

    # --- controller ------------------------------------------------------------------------

    def elect(self, controller: int, vacancy_ts: int | None) -> None:
        self.controller = controller
        self.epoch += 1
        self.controller_of_epoch[self.epoch] = controller
        self.expected.elections += 1
        start = self.tick()
        self.out.record(
            start,
            self.cnode,
            "controller.elected",
            controller_id=controller,
            controller_epoch=self.epoch,
            vacancy_ts=vacancy_ts,
        )
        self.update_metadata(sorted(self.alive), len(self.partitions))
        self.out.record(
            self.tick(),
            self.cnode,
            "controller.failover_completed",
            controller_id=controller,
            controller_epoch=self.epoch,
            load_ms=3.5,
            total_ms=float(self.now - start),
            partitions=len(self.partitions),
        )

    def fail_over(self, clean: bool) -> None:
        """The active controller resigns (clean) or dies (kill -9); a standby takes over."""
        old = self.controller
        if clean:
            self.out.record(
                self.tick(),
                self.cnode,
                "controller.resigned",
                controller_id=old,
                controller_epoch=self.epoch,
                reason="shutdown",
            )
            vacancy = self.tick()
        else:
            self.down_controllers.add(old)
            self.pass_time(self.rng.randint(4000, 6500))  # the dead controller's session expires
            vacancy = self.tick()
        self.tick(self.rng.randint(1, 20))
        self.expected.failovers += 1
        self.elect(self.rng.choice([c for c in self.controllers if c != old]), vacancy)
        self.down_controllers.discard(old)  # restarted: a standby again

    def send(
        self, broker: int, api: str, partitions: int, apply: Iterable[_Partition] = (), role_for: Any = None
    ) -> None:
        """One control request: sent, applied by the broker (with its role changes), completed."""
        self.correlation += 1
        correlation = self.correlation
        self.out.record(
            self.tick(0),
            self.cnode,
            "request.sent",
            broker=broker,
            api=api,
            correlation_id=correlation,
            partitions=partitions,
            controller_epoch=self.epoch,
        )
        queue_ms = round(self.rng.expovariate(1 / 0.4), 3)
        rtt_ms = round(1.0 + self.rng.expovariate(1 / 3.0) + partitions * 0.002, 3)
        bnode = f"broker-{broker}"
        controller_id = self.controller
        if self.pending_claim_injection and api == "UpdateMetadata":
            # Injected: a broker applies a request naming another controller for the current epoch.
            self.pending_claim_injection -= 1
            controller_id = next(c for c in self.controllers if c != self.controller)
            self.expected.violations[schema.SINGLE_CONTROLLER_PER_EPOCH] += 1
        self.out.record(
            self.tick(),
            bnode,
            "request.received",
            api=api,
            controller_id=controller_id,
            controller_epoch=self.epoch,
            broker_epoch=self.broker_epochs[broker],
            correlation_id=correlation,
            result="applied",
            error=0,
        )
        for p in apply:
            self.out.record(
                self.now,
                bnode,
                "partition.role_changed",
                topic=p.topic,
                partition=p.index,
                role=role_for(p) if role_for else ("leader" if p.leader == broker else "follower"),
                leader=p.leader,
                leader_epoch=p.leader_epoch,
                isr=p.isr,
                controller_epoch=self.epoch,
            )
        self.out.record(
            self.tick(),
            self.cnode,
            "request.completed",
            broker=broker,
            api=api,
            correlation_id=correlation,
            partitions=partitions,
            controller_epoch=self.epoch,
            queue_ms=queue_ms,
            rtt_ms=rtt_ms,
            error=0,
            attempts=1,
        )

    def update_metadata(self, brokers: list[int], partitions: int) -> None:
        for broker in brokers:
            self.send(broker, "UpdateMetadata", partitions)

    def leader_and_isr(self, changed: list[_Partition]) -> None:
        """LeaderAndIsr to every live replica of the changed partitions, then UpdateMetadata to all."""
        per_broker: dict[int, list[_Partition]] = {}
        for p in changed:
            for replica in p.replicas:
                if replica in self.alive:
                    per_broker.setdefault(replica, []).append(p)
        for broker, parts in sorted(per_broker.items()):
            self.send(broker, "LeaderAndIsr", len(parts), parts)
        self.update_metadata(sorted(self.alive), len(changed))

    def elect_partition(self, p: _Partition, leader: int, isr: list[int], strategy: str, prev_isr: list[int]) -> None:
        p.leader, p.leader_epoch, p.isr = leader, p.leader_epoch + 1, isr
        self.out.record(
            self.tick(0),
            self.cnode,
            "partition.leader_elected",
            topic=p.topic,
            partition=p.index,
            leader=leader,
            leader_epoch=p.leader_epoch,
            isr=isr,
            prev_isr=prev_isr,
            strategy=strategy,
            unclean=False,
            controller_epoch=self.epoch,
        )

    # --- scenarios ---------------------------------------------------------------------------

    def create_topic(self, name: str, count: int, replication: int) -> None:
        created = []
        for i in range(count):
            start = (len(self.partitions) + i) % len(self.brokers)
            replicas = [self.brokers[(start + k) % len(self.brokers)] for k in range(replication)]
            p = _Partition(name, i, replicas, replicas[0], -1, [])
            self.elect_partition(p, replicas[0], list(replicas), "new", [])
            created.append(p)
        self.partitions.extend(created)
        self.leader_and_isr(created)

    def broker_fails(self, broker: int) -> None:
        """Kill -9 of a broker: after its session expires the controller moves its leaders
        (one offline interval each) and shrinks the ISRs it was in."""
        self.alive.discard(broker)
        self.pass_time(self.rng.randint(4000, 6000))
        self.out.record(
            self.tick(), self.cnode, "broker.change", new=[], dead=[broker], bounced=[], controller_epoch=self.epoch
        )
        changed: list[_Partition] = []
        for p in self.partitions:
            if broker not in p.isr:
                continue
            prev_isr = list(p.isr)
            isr = [r for r in p.isr if r != broker]
            if p.leader == broker:
                self.elect_partition(p, isr[0], isr, "offline", prev_isr)
                self.expected.offline_intervals += 1
            else:
                p.leader_epoch += 1  # ReplicaStateMachine's removeReplicasFromIsr bumps the leader epoch
                p.isr = isr
            changed.append(p)
        self.leader_and_isr(changed)

    def broker_returns(self, broker: int) -> None:
        self.pass_time(self.rng.randint(500, 3000))
        self.next_broker_epoch += 1
        self.broker_epochs[broker] = self.next_broker_epoch
        bnode = f"broker-{broker}"
        self.out.record(self.tick(), bnode, "broker.started", broker_id=broker)
        self.out.record(self.tick(), bnode, "broker.registered", broker_id=broker, broker_epoch=self.next_broker_epoch)
        self.alive.add(broker)
        self.out.record(
            self.tick(), self.cnode, "broker.change", new=[broker], dead=[], bounced=[], controller_epoch=self.epoch
        )
        mine = [p for p in self.partitions if broker in p.replicas]
        self.update_metadata(sorted(self.alive), len(self.partitions))
        self.send(broker, "LeaderAndIsr", len(mine), mine)
        # The follower catches up; the leader expands the ISR (no leader epoch change).
        self.tick(self.rng.randint(100, 400))
        for p in mine:
            p.isr = [*p.isr, broker]
            self.out.record(
                self.now,
                f"broker-{p.leader}",
                "partition.isr_changed",
                topic=p.topic,
                partition=p.index,
                isr=p.isr,
                zk_version=p.leader_epoch + 1,
                reason="caught_up",
                controller_epoch=self.epoch,
            )

    def preferred_election(self) -> None:
        moved = []
        for p in self.partitions:
            preferred = p.replicas[0]
            if p.leader != preferred and preferred in p.isr and preferred in self.alive:
                self.elect_partition(p, preferred, list(p.isr), "preferred", list(p.isr))
                moved.append(p)
        if moved:
            self.leader_and_isr(moved)

    # --- injected violations ------------------------------------------------------------------

    def inject_unclean(self) -> None:
        p = self.rng.choice([p for p in self.partitions if p.leader in self.alive])
        fabricated = [r for r in p.isr if r != p.leader] or [r for r in self.brokers if r != p.leader][:1]
        p.leader_epoch += 1
        self.out.record(
            self.tick(0),
            self.cnode,
            "partition.leader_elected",
            topic=p.topic,
            partition=p.index,
            leader=p.leader,
            leader_epoch=p.leader_epoch,
            isr=p.isr,
            prev_isr=fabricated,
            strategy="preferred",
            unclean=False,
            controller_epoch=self.epoch,
        )
        self.leader_and_isr([p])
        self.expected.violations[schema.UNCLEAN_ELECTION_WITHOUT_PERMISSION] += 1

    def inject_leader_epoch_regression(self) -> None:
        p = self.rng.choice([p for p in self.partitions if p.leader in self.alive])
        follower = next((r for r in p.isr if r != p.leader and r in self.alive), None)
        if follower is None:
            return
        self.out.record(
            self.tick(),
            f"broker-{follower}",
            "partition.role_changed",
            topic=p.topic,
            partition=p.index,
            role="follower",
            leader=p.leader,
            leader_epoch=p.leader_epoch - 1,
            isr=p.isr,
            controller_epoch=self.epoch,
        )
        self.expected.violations[schema.LEADER_EPOCH_REGRESSION] += 1

    def inject_stale_epoch(self) -> None:
        if self.epoch < 2:
            return
        broker = self.rng.choice(sorted(self.alive))
        self.out.record(
            self.tick(),
            f"broker-{broker}",
            "request.received",
            api="UpdateMetadata",
            controller_id=self.controller_of_epoch[self.epoch - 1],
            controller_epoch=self.epoch - 1,
            broker_epoch=self.broker_epochs[broker],
            correlation_id=0,
            result="applied",
            error=0,
        )
        self.expected.violations[schema.STALE_CONTROLLER_EPOCH_APPLIED] += 1


def generate(
    directory: str | pathlib.Path,
    events: int,
    brokers: int = 12,
    partitions: int = 3000,
    controllers: int = 3,
    seed: int = 1,
    inject: dict[str, int] | None = None,
    start_ms: int = 1_700_000_000_000,
) -> Expected:
    """Writes a history of about `events` records (it stops after the scenario that crosses it)."""
    rng = random.Random(seed)
    inject = dict(inject or {})
    with HistoryWriter(directory) as out:
        cluster = _Cluster(out, brokers, controllers, rng, start_ms)
        for broker in cluster.brokers:
            out.record(cluster.tick(), f"broker-{broker}", "broker.started", broker_id=broker)
            out.record(
                cluster.tick(),
                f"broker-{broker}",
                "broker.registered",
                broker_id=broker,
                broker_epoch=cluster.broker_epochs[broker],
            )
        cluster.elect(1, cluster.now)
        per_topic = 100
        for t in range(max(1, partitions // per_topic)):
            cluster.create_topic(f"topic-{t:04d}", min(per_topic, partitions), min(3, brokers))
        injections = [name for name, n in inject.items() for _ in range(n)]
        rng.shuffle(injections)
        rounds = 0
        while out.count < events or injections:
            rounds += 1
            cluster.pass_time(rng.randint(1000, 30_000))
            roll = rng.random()
            if roll < 0.12:
                cluster.fail_over(clean=rng.random() < 0.3)
            elif roll < 0.75:
                victim = rng.choice(sorted(cluster.alive))
                cluster.broker_fails(victim)
                cluster.broker_returns(victim)
            else:
                cluster.preferred_election()
            if injections and (out.count >= events * len(injections) / (len(injections) + 1) or rounds % 3 == 0):
                kind = injections.pop()
                if kind == schema.SINGLE_CONTROLLER_PER_EPOCH:
                    cluster.fail_over(clean=True)  # a fresh epoch, so each injection is its own violation
                    cluster.pending_claim_injection = 1
                    cluster.update_metadata(sorted(cluster.alive)[:1], 0)
                elif kind == schema.UNCLEAN_ELECTION_WITHOUT_PERMISSION:
                    cluster.inject_unclean()
                elif kind == schema.LEADER_EPOCH_REGRESSION:
                    cluster.inject_leader_epoch_regression()
                elif kind == schema.STALE_CONTROLLER_EPOCH_APPLIED:
                    if cluster.epoch < 2:
                        cluster.fail_over(clean=True)
                    cluster.inject_stale_epoch()
                else:
                    raise ValueError(f"unknown invariant {kind!r}")
        cluster.expected.events = out.count
        return cluster.expected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write a synthetic cluster history (state-change logs)")
    parser.add_argument("--dir", required=True)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--brokers", type=int, default=12)
    parser.add_argument("--partitions", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    expected = generate(args.dir, args.events, args.brokers, args.partitions, seed=args.seed)
    print(json.dumps(expected.as_json()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
