"""Hand-written cluster histories with answers worked out by hand, to the millisecond."""

from __future__ import annotations

import pathlib

from controller_svc.analytics.synthetic import HistoryWriter

C1, C2 = "controller-1", "controller-2"


def _request(
    out: HistoryWriter,
    controller: str,
    epoch: int,
    broker: int,
    api: str,
    correlation: int,
    sent: int,
    applied: int,
    rtt_ms: float,
    queue_ms: float = 0.5,
    partitions: int = 1,
    controller_id: int | None = None,
) -> None:
    cid = controller_id if controller_id is not None else int(controller.split("-")[1])
    out.record(
        sent,
        controller,
        "request.sent",
        broker=broker,
        api=api,
        correlation_id=correlation,
        partitions=partitions,
        controller_epoch=epoch,
    )
    out.record(
        applied,
        f"broker-{broker}",
        "request.received",
        api=api,
        controller_id=cid,
        controller_epoch=epoch,
        broker_epoch=100 + broker,
        correlation_id=correlation,
        result="applied",
        error=0,
    )
    out.record(
        applied + 1,
        controller,
        "request.completed",
        broker=broker,
        api=api,
        correlation_id=correlation,
        partitions=partitions,
        controller_epoch=epoch,
        queue_ms=queue_ms,
        rtt_ms=rtt_ms,
        error=0,
    )


def _role(
    out: HistoryWriter,
    ts: int,
    broker: int,
    topic: str,
    partition: int,
    role: str,
    leader: int,
    leader_epoch: int,
    epoch: int,
    reason: str | None = None,
) -> None:
    """The broker applied a role (`reason`: why it stopped a replica, when it did)."""
    out.record(
        ts,
        f"broker-{broker}",
        "partition.role_changed",
        topic=topic,
        partition=partition,
        role=role,
        leader=leader,
        leader_epoch=leader_epoch,
        isr=[],
        controller_epoch=epoch,
        **({} if reason is None else {"reason": reason}),
    )


def _elected(
    out: HistoryWriter,
    ts: int,
    controller: str,
    epoch: int,
    topic: str,
    partition: int,
    leader: int,
    leader_epoch: int,
    isr: list[int],
    prev_isr: list[int],
    strategy: str,
    unclean: bool = False,
) -> None:
    out.record(
        ts,
        controller,
        "partition.leader_elected",
        topic=topic,
        partition=partition,
        leader=leader,
        leader_epoch=leader_epoch,
        isr=isr,
        prev_isr=prev_isr,
        strategy=strategy,
        unclean=unclean,
        controller_epoch=epoch,
    )


def _offline(
    out: HistoryWriter,
    ts: int,
    controller: str,
    epoch: int,
    topic: str,
    partition: int,
    leader_epoch: int,
    isr: list[int],
    prev_leader: int,
) -> None:
    """The controller set the partition's leader to -1 (no replica of its ISR alive)."""
    out.record(
        ts,
        controller,
        "partition.offline",
        topic=topic,
        partition=partition,
        leader=-1,
        leader_epoch=leader_epoch,
        isr=isr,
        prev_leader=prev_leader,
        controller_epoch=epoch,
    )


def clean_failover(directory: pathlib.Path) -> None:
    """Controller 1 (epoch 1) is killed; controller 2 (epoch 2) sees /controller vacant at 6990,
    is elected at 7000, and brokers 1, 2, 3 apply its UpdateMetadata at 7005, 7010, 7020.
    Broker 1 dies (12000): t-0 moves to 2 (applied 12007); gone-0 (only on 1) goes to -1 and
    its topic is deleted at 15000. Broker 2 dies (20000): t-0 moves to 3 (applied 20004); t-2
    (only on 2) is offline until broker 2 returns and applies leadership at 25015.

    Every process writes node.alive; the last ones before the faults: controller 1 at 2000 (it
    was killed then), broker 1 at 11500, broker 2 at 19600. Intervals start at the dead leader's
    broker's last sign of life, failovers at the lost controller's.

    Offline intervals: t-0 [11500, 12007], t-0 [19600, 20004], t-2 [19600, 25015],
    gone-0 [11500, 15000] (topic deleted); detected 500, 500, 400 and 400 ms after they began.
    One failover: last sign of life 2000, lost 6990 (detection 4990), elected 7000, converged 7020.
    UpdateMetadata round trips to broker 1: 1, 2 and 10 ms.
    """
    with HistoryWriter(directory) as out:
        for b in (1, 2, 3):
            out.record(1000, f"broker-{b}", "broker.registered", broker_id=b, broker_epoch=100 + b)
        out.record(1010, C1, "controller.elected", controller_id=1, controller_epoch=1, vacancy_ts=1005)
        for b in (1, 2, 3):
            _request(out, C1, 1, b, "UpdateMetadata", b, 1011, 1012, rtt_ms=1.0 if b == 1 else 3.0)
        out.record(1015, C1, "controller.failover_completed", controller_id=1, controller_epoch=1, load_ms=2.0)
        _elected(out, 1020, C1, 1, "t", 0, 1, 0, [1, 2, 3], [], "new")
        _elected(out, 1020, C1, 1, "t", 2, 2, 0, [2], [], "new")
        _elected(out, 1020, C1, 1, "gone", 0, 1, 0, [1], [], "new")
        _request(out, C1, 1, 1, "LeaderAndIsr", 10, 1021, 1022, rtt_ms=1.0, partitions=2)
        _role(out, 1022, 1, "t", 0, "leader", 1, 0, 1)
        _role(out, 1022, 1, "gone", 0, "leader", 1, 0, 1)
        _request(out, C1, 1, 2, "LeaderAndIsr", 11, 1021, 1022, rtt_ms=1.0, partitions=2)
        _role(out, 1022, 2, "t", 0, "follower", 1, 0, 1)
        _role(out, 1022, 2, "t", 2, "leader", 2, 0, 1)
        _request(out, C1, 1, 3, "LeaderAndIsr", 12, 1021, 1022, rtt_ms=1.0)
        _role(out, 1022, 3, "t", 0, "follower", 1, 0, 1)
        _request(out, C1, 1, 1, "UpdateMetadata", 13, 1030, 1031, rtt_ms=2.0)
        out.record(1500, C1, "node.alive")
        out.record(2000, C1, "node.alive")

        # kill -9 of controller 1; controller 2 takes over.
        out.record(7000, C2, "controller.elected", controller_id=2, controller_epoch=2, vacancy_ts=6990)
        _request(out, C2, 2, 1, "UpdateMetadata", 1, 7001, 7005, rtt_ms=10.0)
        _request(out, C2, 2, 2, "UpdateMetadata", 2, 7001, 7010, rtt_ms=9.0)
        _request(out, C2, 2, 3, "UpdateMetadata", 3, 7001, 7020, rtt_ms=19.0)
        out.record(7002, C2, "controller.failover_completed", controller_id=2, controller_epoch=2, load_ms=1.5)

        # Broker 1 dies.
        out.record(11500, "broker-1", "node.alive")
        out.record(12000, C2, "broker.change", new=[], dead=[1], bounced=[], controller_epoch=2)
        _elected(out, 12000, C2, 2, "t", 0, 2, 1, [2, 3], [1, 2, 3], "offline")
        _offline(out, 12000, C2, 2, "gone", 0, 1, isr=[1], prev_leader=1)
        _request(out, C2, 2, 2, "LeaderAndIsr", 4, 12001, 12007, rtt_ms=6.0)
        _role(out, 12007, 2, "t", 0, "leader", 2, 1, 2)
        _request(out, C2, 2, 3, "LeaderAndIsr", 5, 12001, 12006, rtt_ms=5.0)
        _role(out, 12006, 3, "t", 0, "follower", 2, 1, 2)
        out.record(15000, C2, "topic.deleted", topic="gone", controller_epoch=2)

        # Broker 2 dies; t-2 has no other replica.
        out.record(19600, "broker-2", "node.alive")
        out.record(20000, C2, "broker.change", new=[], dead=[2], bounced=[], controller_epoch=2)
        _elected(out, 20000, C2, 2, "t", 0, 3, 2, [3], [2, 3], "offline")
        _offline(out, 20000, C2, 2, "t", 2, 1, isr=[2], prev_leader=2)
        _request(out, C2, 2, 3, "LeaderAndIsr", 6, 20001, 20004, rtt_ms=3.0)
        _role(out, 20004, 3, "t", 0, "leader", 3, 2, 2)

        # Broker 2 returns; t-2 gets its leader back.
        out.record(25000, "broker-2", "broker.registered", broker_id=2, broker_epoch=202)
        out.record(25005, C2, "broker.change", new=[2], dead=[], bounced=[], controller_epoch=2)
        _elected(out, 25010, C2, 2, "t", 2, 2, 2, [2], [2], "offline")
        _request(out, C2, 2, 2, "LeaderAndIsr", 7, 25011, 25015, rtt_ms=4.0)
        _role(out, 25015, 2, "t", 2, "leader", 2, 2, 2)
        _role(out, 25015, 2, "t", 0, "follower", 3, 2, 2)


def violations(directory: pathlib.Path) -> dict[str, list[tuple[str, int]]]:
    """Every invariant broken on purpose. Returns, per invariant, the (file name, line) of each
    offending record that must be cited (the last record of each violation)."""
    cited: dict[str, list[tuple[str, int]]] = {}
    with HistoryWriter(directory) as out:
        # single_controller_per_epoch: epoch 1 won twice (controller-1 line 1, controller-2 line 1) ...
        out.record(100, C1, "controller.elected", controller_id=1, controller_epoch=1)
        out.record(105, C2, "controller.elected", controller_id=2, controller_epoch=1)
        # ... and an election going backwards: epoch 3 then epoch 2 (controller-1 lines 2 and 3).
        out.record(200, C1, "controller.elected", controller_id=1, controller_epoch=3)
        out.record(300, C1, "controller.elected", controller_id=1, controller_epoch=2)
        cited["single_controller_per_epoch"] = [
            ("controller-2.state-change.jsonl", 1),
            ("controller-1.state-change.jsonl", 3),
        ]

        # stale_controller_epoch_applied: broker-1 applies epoch 3, then epoch 2 (line 2); a rejected
        # epoch-1 request and a later epoch-3 request are fine.
        def received(ts: int, epoch: int, controller: int, result: str) -> None:
            out.record(
                ts,
                "broker-1",
                "request.received",
                api="UpdateMetadata",
                controller_id=controller,
                controller_epoch=epoch,
                broker_epoch=101,
                correlation_id=ts,
                result=result,
                error=0 if result == "applied" else 11,
            )

        received(400, 3, 1, "applied")
        received(410, 2, 1, "applied")
        received(420, 1, 1, "rejected")
        received(430, 3, 1, "applied")
        cited["stale_controller_epoch_applied"] = [("broker-1.state-change.jsonl", 2)]

        # leader_epoch_regression on broker-2: 5, 5 (line 2), 4 (line 3); deleted; 0 again is fine.
        _role(out, 500, 2, "t", 0, "follower", 1, 5, 3)
        _role(out, 510, 2, "t", 0, "leader", 2, 5, 3)
        _role(out, 520, 2, "t", 0, "follower", 1, 4, 3)
        _role(out, 530, 2, "t", 0, "deleted", -1, -2, 3)
        _role(out, 540, 2, "t", 0, "follower", 1, 0, 3)
        _role(out, 550, 2, "t", 1, "stopped", 1, 7, 3)  # stopped keeps its epoch: not a regression
        _role(out, 560, 2, "t", 1, "follower", 1, 8, 3)
        # A restarted broker-3 may re-apply epoch 3 (its memory is gone), not go below it (line 4).
        _role(out, 570, 3, "t", 2, "follower", 1, 3, 3)
        out.record(575, "broker-3", "broker.started", broker_id=3)
        _role(out, 580, 3, "t", 2, "follower", 1, 3, 3)
        _role(out, 585, 3, "t", 2, "follower", 1, 2, 3)
        cited["leader_epoch_regression"] = [
            ("broker-2.state-change.jsonl", 2),
            ("broker-2.state-change.jsonl", 3),
            ("broker-3.state-change.jsonl", 4),
        ]

        # unclean_election_without_permission: a clean election of 3 from ISR [1, 2] (line 4 of
        # controller-1); an unclean one and a new partition's are fine.
        _elected(out, 600, C1, 3, "t", 5, 3, 4, [3], [1, 2], "offline")
        _elected(out, 610, C1, 3, "t", 6, 3, 4, [3], [1, 2], "offline", unclean=True)
        _elected(out, 620, C1, 3, "t", 7, 3, 0, [3], [], "new")
        cited["unclean_election_without_permission"] = [("controller-1.state-change.jsonl", 4)]
    return cited


MALFORMED = [
    (b'{"ts":1000,"node":"broker-1","kind":"broker.registered","broker_id":1,"broker_epoch":7}', None),
    (b"not json at all", "not a JSON object with ts, node and kind"),
    (b'{"ts":1001,"node":"broker-1","kind":"some.future_kind","anything":[1,2]}', None),
    (b'{"ts":"soon","node":"broker-1","kind":"broker.shutdown"}', "ts missing or not an integer"),
    (b'{"ts":1002,"node":"broker-1","kind":"partition.role_changed","topic":"t"}', "partition.role_changed without"),
    (b"", "empty line"),
    (
        b'{"ts":1003,"node":"broker-1","kind":"partition.role_changed","topic":"t","partition":0,"role":"boss",'
        b'"leader":1,"leader_epoch":1}',
        "role boss is not one of",
    ),
    (
        b'{"ts":1004,"node":"broker-1","kind":"request.received","api":"UpdateMetadata","controller_id":1,'
        b'"controller_epoch":"one","broker_epoch":7,"result":"applied","error":0}',
        "controller_epoch",
    ),
    (b'{"ts":1005,"node":"broker-1","kind":"broker.shutdown","broker_id":1,"broker_epoch":7}', None),
]


def malformed(directory: pathlib.Path) -> None:
    """broker-1's log: valid lines 1, 3 and 9, malformed lines 2, 4, 5, 6, 7 and 8."""
    with HistoryWriter(directory) as out:
        for line, _reason in MALFORMED:
            out.raw("broker-1", line)


def edge_cases(directory: pathlib.Path) -> None:
    """Topic deleted and recreated, a broker restart, a zombie controller, an unfinished failover.

    r-0 (only on broker 1) loses its leader at 1000 and its topic is deleted at 2000: one
    interval [1000, 2000] ended by the deletion. r is recreated on broker 2 (leader epoch 0
    again); broker 2 dies at 4000 (leader -1 at epoch 1), restarts, and applies leadership at
    epoch 2 at 5004: one interval [4000, 5004]. A loss and a regain in the same millisecond
    (q-0 at 5500, applied by broker 3 in that millisecond at epoch 1): [5500, 5500].
    Controller 1 (epoch 1) is paused; controller 2 is elected at 6000 (vacancy seen at 5990) and
    records live brokers [2, 3], both apply at 6003 and 6004; controller 1 resigns late, at 7000:
    superseded at 6000. Controller 2 is killed; controller 3 is elected at 8000 (vacancy 7990)
    with live brokers [2, 3]; only broker 2 applies: not converged, broker 3 missing.
    """
    c3 = "controller-3"
    with HistoryWriter(directory) as out:
        out.record(100, C1, "controller.elected", controller_id=1, controller_epoch=1, vacancy_ts=95)
        _elected(out, 110, C1, 1, "r", 0, 1, 0, [1], [], "new")
        _role(out, 112, 1, "r", 0, "leader", 1, 0, 1)
        _elected(out, 120, C1, 1, "q", 0, 2, 0, [2, 3], [], "new")
        _role(out, 122, 2, "q", 0, "leader", 2, 0, 1)
        out.record(1000, C1, "broker.change", new=[], dead=[1], bounced=[], controller_epoch=1)
        _offline(out, 1000, C1, 1, "r", 0, 1, isr=[1], prev_leader=1)
        out.record(2000, C1, "topic.deleted", topic="r", controller_epoch=1)
        _elected(out, 3000, C1, 1, "r", 0, 2, 0, [2], [], "new")
        _role(out, 3005, 2, "r", 0, "leader", 2, 0, 1)
        out.record(4000, C1, "broker.change", new=[], dead=[2], bounced=[], controller_epoch=1)
        _offline(out, 4000, C1, 1, "r", 0, 1, isr=[2], prev_leader=2)
        _elected(out, 4000, C1, 1, "q", 0, 3, 1, [3], [2, 3], "offline")
        _role(out, 4002, 3, "q", 0, "leader", 3, 1, 1)
        out.record(4500, "broker-2", "broker.started", broker_id=2)
        out.record(4501, "broker-2", "broker.registered", broker_id=2, broker_epoch=900)
        _elected(out, 5000, C1, 1, "r", 0, 2, 2, [2], [2], "offline")
        _role(out, 5004, 2, "r", 0, "leader", 2, 2, 1)
        _role(out, 5004, 2, "q", 0, "follower", 3, 1, 1)
        # Same millisecond: broker 3's log sorts before the controller's by file name.
        _role(out, 5500, 3, "q", 0, "leader", 3, 2, 1)
        out.record(5500, C1, "broker.change", new=[], dead=[], bounced=[3], controller_epoch=1)
        _elected(out, 5500, C1, 1, "q", 0, 3, 2, [3], [3], "offline")

        out.record(6000, C2, "controller.elected", controller_id=2, controller_epoch=2, vacancy_ts=5990)
        _request(out, C2, 2, 2, "UpdateMetadata", 1, 6001, 6003, rtt_ms=2.0)
        out.record(
            6002,
            C2,
            "controller.failover_completed",
            controller_id=2,
            controller_epoch=2,
            load_ms=1.0,
            live_brokers=[2, 3],
        )
        _request(out, C2, 2, 3, "UpdateMetadata", 2, 6002, 6004, rtt_ms=2.0)  # sent after the completion record
        out.record(7000, C1, "controller.resigned", controller_id=1, controller_epoch=1, reason="session expired")

        out.record(8000, c3, "controller.elected", controller_id=3, controller_epoch=3, vacancy_ts=7990)
        out.record(
            8001,
            c3,
            "controller.failover_completed",
            controller_id=3,
            controller_epoch=3,
            load_ms=1.0,
            live_brokers=[2, 3],
        )
        _request(out, c3, 3, 2, "UpdateMetadata", 1, 8002, 8003, rtt_ms=1.0)
        out.record(
            8002, c3, "request.sent", broker=3, api="UpdateMetadata", correlation_id=2, partitions=1, controller_epoch=3
        )


def overlapping_losses(directory: pathlib.Path) -> None:
    """Two losses in one offline interval, the later one's fault first; an interval still open.

    Broker 2 dies silently at 2400 (its last record). Broker 1 (last sign of life 2900) is seen
    dead at 3000: p-0 goes to broker 2 at leader epoch 1 (not yet known dead), p-1 (only on 1)
    to leader -1 and stays offline, p-2 to broker 3, which applies it at 3004. Broker 2 is seen
    dead at 9000: p-0 goes to broker 3 at epoch 2, applied at 9005. A late leader role from
    broker 2 at epoch 1 (9003) is not above the losses' epochs and ends nothing.

    Offline intervals: p-0 [2400, 9005] (detected 3000: its start is broker 2's fault, the
    second loss's), p-1 [2900, open), p-2 [2900, 3004].
    """
    with HistoryWriter(directory) as out:
        for b in (1, 2, 3):
            out.record(1000, f"broker-{b}", "broker.registered", broker_id=b, broker_epoch=100 + b)
        out.record(1010, C1, "controller.elected", controller_id=1, controller_epoch=1, vacancy_ts=1005)
        _elected(out, 1020, C1, 1, "p", 0, 1, 0, [1, 2, 3], [], "new")
        _elected(out, 1020, C1, 1, "p", 1, 1, 0, [1], [], "new")
        _elected(out, 1020, C1, 1, "p", 2, 1, 0, [1, 3], [], "new")
        for partition in (0, 1, 2):
            _role(out, 1022, 1, "p", partition, "leader", 1, 0, 1)
        _role(out, 1022, 2, "p", 0, "follower", 1, 0, 1)
        _role(out, 1022, 3, "p", 0, "follower", 1, 0, 1)
        _role(out, 1022, 3, "p", 2, "follower", 1, 0, 1)
        out.record(2400, "broker-2", "node.alive")
        out.record(2900, "broker-1", "node.alive")
        out.record(2950, "broker-3", "node.alive")

        out.record(3000, C1, "broker.change", new=[], dead=[1], bounced=[], controller_epoch=1)
        _elected(out, 3000, C1, 1, "p", 0, 2, 1, [2, 3], [1, 2, 3], "offline")
        _offline(out, 3000, C1, 1, "p", 1, 1, isr=[1], prev_leader=1)
        _elected(out, 3000, C1, 1, "p", 2, 3, 1, [3], [1, 3], "offline")
        _role(out, 3004, 3, "p", 2, "leader", 3, 1, 1)

        out.record(9000, C1, "broker.change", new=[], dead=[2], bounced=[], controller_epoch=1)
        _elected(out, 9000, C1, 1, "p", 0, 3, 2, [3], [2, 3], "offline")
        _role(out, 9003, 2, "p", 0, "leader", 2, 1, 1)
        _role(out, 9005, 3, "p", 0, "leader", 3, 2, 1)


def log_dir_failure(directory: pathlib.Path) -> None:
    """A leader's log dir fails: l-0 (on brokers 1 and 2) is led by broker 1 at epoch 0 until
    broker 1 stops it at 2000 for a failed log dir; the controller elects broker 2 at epoch 1,
    which applies it at 2012. A follower's failed log dir (broker 2's replica of m-0) and a
    leader's replica stopped for another reason (m-1's deletion of a replica) lose nothing.

    Offline intervals: l-0 [2000, 2012], cause leader_log_dir_failed.
    """
    with HistoryWriter(directory) as out:
        for b in (1, 2):
            out.record(1000, f"broker-{b}", "broker.registered", broker_id=b, broker_epoch=100 + b)
        out.record(1010, C1, "controller.elected", controller_id=1, controller_epoch=1, vacancy_ts=1005)
        _elected(out, 1020, C1, 1, "l", 0, 1, 0, [1, 2], [], "new")
        _elected(out, 1020, C1, 1, "m", 0, 1, 0, [1, 2], [], "new")
        _elected(out, 1020, C1, 1, "m", 1, 1, 0, [1, 2], [], "new")
        for topic, partition in (("l", 0), ("m", 0), ("m", 1)):
            _role(out, 1022, 1, topic, partition, "leader", 1, 0, 1)
            _role(out, 1023, 2, topic, partition, "follower", 1, 0, 1)
        _role(out, 1500, 2, "m", 0, "stopped", 1, 0, 1, reason="log_dir_failure")
        _role(out, 1600, 1, "m", 1, "stopped", 1, 0, 1, reason="replica_deleted")
        _role(out, 2000, 1, "l", 0, "stopped", 1, 0, 1, reason="log_dir_failure")
        _elected(out, 2010, C1, 1, "l", 0, 2, 1, [2], [1, 2], "offline")
        _role(out, 2012, 2, "l", 0, "leader", 2, 1, 1)
