"""Issue 6 with real clients: grpcurl against both services of a live cluster, Prometheus
scrapes of every controller and broker before and after a failover."""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
import shutil
import signal
import subprocess
import sys
from typing import Any

from tests.integration.harness import brokers_agree_with_controller, create_topic, eventually, scrape


def grpcurl(*args: str, data: dict[str, Any] | None = None) -> str:
    binary = shutil.which("grpcurl") or str(pathlib.Path(sys.executable).parent / "grpcurl")
    command = [binary, "-plaintext", *(["-d", json.dumps(data)] if data is not None else []), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, f"{' '.join(command)}: {result.stderr}"
    return result.stdout


async def test_grpcurl_lists_describes_and_calls_both_services(cluster_factory: Any) -> None:
    cluster = await cluster_factory(controllers=2, brokers=2)
    snap = await cluster.converged()
    assert (await create_topic(cluster, "g", partitions=2, replication_factor=2)).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "g", [1, 2]), 30, what="g online")
    active = cluster.controller(snap.controller_id)["grpc"]
    broker = cluster.broker(1)["grpc"]

    services = await asyncio.to_thread(grpcurl, active, "list")
    assert {"kcontroller.v1.Controller", "grpc.health.v1.Health"} <= set(services.split())
    described = await asyncio.to_thread(grpcurl, active, "describe", "kcontroller.v1.Controller")
    for rpc in ("DescribeCluster", "CreateTopics", "ElectLeaders", "ControlledShutdown"):
        assert f"rpc {rpc}" in described
    cluster_view = json.loads(
        await asyncio.to_thread(grpcurl, active, "kcontroller.v1.Controller/DescribeCluster", data={})
    )
    assert cluster_view.get("responder_active") is True, cluster_view
    assert cluster_view["controller_epoch"] == snap.controller_epoch
    elected = json.loads(
        await asyncio.to_thread(
            grpcurl,
            active,
            "kcontroller.v1.Controller/ElectLeaders",
            data={"election_type": "PREFERRED", "partitions": [{"topic": "g", "partition": 0}]},
        )
    )
    (result,) = elected["partitions"]
    assert result["topic"] == "g" and result.get("error_code", 0) in (0, 84)  # NONE or ELECTION_NOT_NEEDED

    services = await asyncio.to_thread(grpcurl, broker, "list")
    assert "kcontroller.v1.BrokerControl" in services.split()
    assert "rpc DescribeBroker" in await asyncio.to_thread(grpcurl, broker, "describe", "kcontroller.v1.BrokerControl")
    described_broker = json.loads(
        await asyncio.to_thread(grpcurl, broker, "kcontroller.v1.BrokerControl/DescribeBroker", data={})
    )
    assert described_broker["broker_id"] == 1
    assert described_broker["controller_epoch"] == snap.controller_epoch
    health = json.loads(
        await asyncio.to_thread(
            grpcurl, broker, "grpc.health.v1.Health/Check", data={"service": "kcontroller.v1.BrokerControl"}
        )
    )
    assert health["status"] == "SERVING"

    # The readable table of the whole cluster.
    table = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "controller_svc", "describe", "--dir", str(cluster.dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert table.returncode == 0, table.stderr
    assert f"controller  {snap.controller_id}  epoch {snap.controller_epoch}" in table.stdout
    assert "topics 1  partitions 2  offline 0  under-replicated 0" in table.stdout
    rows = [line.split() for line in table.stdout.splitlines() if line.strip().startswith(("1 ", "2 "))]
    assert sorted((int(r[0]), int(r[-2])) for r in rows) == [(1, 2), (2, 2)]  # broker, partitions


async def test_metrics_after_a_failover_show_the_new_controller_and_epoch(cluster_factory: Any) -> None:
    cluster = await cluster_factory(controllers=3, brokers=2, controller_overrides={"log.format": "json"})
    first = await cluster.converged()
    assert (await create_topic(cluster, "m", partitions=4, replication_factor=2)).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "m", [1, 2]), 30, what="m online")
    active_metric = "kafka_controller_kafkacontroller_activecontrollercount"

    async def controller_metrics(ids: list[int]) -> dict[int, dict[str, float]]:
        return {i: await asyncio.to_thread(scrape, cluster.controller(i)["metrics"]) for i in ids}

    before = await controller_metrics([1, 2, 3])
    assert sum(m[active_metric] for m in before.values()) == 1
    assert before[first.controller_id][active_metric] == 1
    assert before[first.controller_id]["kcontroller_controller_epoch"] == first.controller_epoch
    assert before[first.controller_id]["kafka_controller_kafkacontroller_globalpartitioncount"] == 4
    assert before[first.controller_id]["kafka_controller_kafkacontroller_offlinepartitionscount"] == 0

    cluster.kill(cluster.controller(first.controller_id))
    second = await cluster.converged(min_epoch=first.controller_epoch + 1)
    survivors = [i for i in (1, 2, 3) if i != first.controller_id]

    async def one_active() -> bool:
        scraped = await controller_metrics(survivors)
        return sum(m[active_metric] for m in scraped.values()) == 1

    await eventually(one_active, 20, what="exactly one active controller in the metrics")
    after = await controller_metrics(survivors)
    new = after[second.controller_id]
    assert new[active_metric] == 1
    assert new["kcontroller_controller_epoch"] == second.controller_epoch
    # Kafka's timers and histograms as the JMX exporter shows them: `_count` and quantile gauges.
    assert new["kafka_controller_controllerstats_controllerchangerateandtimems_count"] >= 1
    assert new['kafka_controller_controllerstats_controllerchangerateandtimems{quantile="0.999"}'] > 0
    assert new["kafka_controller_controllereventmanager_eventqueuetimems_count"] >= 1
    assert 'kafka_controller_controllereventmanager_eventqueuetimems{quantile="0.99"}' in new
    for broker_id in (1, 2):
        assert (
            new[f'kafka_controller_controllerchannelmanager_requestrateandqueuetimems_count{{broker_id="{broker_id}"}}']
            >= 1
        )
        assert (
            f'kafka_controller_controllerchannelmanager_requestrateandqueuetimems{{broker_id="{broker_id}",quantile="0.50"}}'
            in new
        )
    assert "kafka_controller_controllerstats_uncleanleaderelections_total" in new
    assert not [k for k in new if k.split("{")[0].endswith("_created")]  # no series the JMX export lacks
    assert new["kafka_controller_kafkacontroller_globaltopiccount"] == 1
    assert any(re.match(r"kafka_controller_controllerchannelmanager_queuesize\{", k) for k in new)

    # JSON process logs: every line names its node and the epoch it works under; the new
    # controller's election line already carries the new epoch.
    text = (pathlib.Path(cluster.logs) / f"controller-{second.controller_id}.log").read_text()
    complete = text[: text.rfind("\n") + 1]  # the process is still writing: only whole lines
    log_lines = [
        json.loads(line)
        for line in complete.splitlines()
        if line.startswith("{")  # (gRPC's C core may write its own lines to stderr)
    ]
    assert log_lines and all(line["node"] == f"controller-{second.controller_id}" for line in log_lines)
    elected = [line for line in log_lines if "elected with epoch" in line["message"]]
    assert elected[-1]["controller_epoch"] == second.controller_epoch
    assert {"ts", "level", "logger", "message"} <= set(elected[-1])

    leaders = 0.0
    described = None
    for broker_id in (1, 2):
        broker = await asyncio.to_thread(scrape, cluster.broker(broker_id)["metrics"])
        described = await cluster.describe_broker(broker_id)
        assert described is not None
        assert broker["kcontroller_broker_controller_epoch"] == second.controller_epoch
        assert broker["kcontroller_broker_epoch"] == described.broker_epoch
        assert broker["kcontroller_broker_registered"] == 1
        assert broker["kafka_server_replicamanager_partitioncount"] == 4
        leaders += broker["kafka_server_replicamanager_leadercount"]
    assert leaders == 4

    # A request from the dead controller's epoch is rejected, and counted by error code.
    described = await cluster.describe_broker(1)
    response = await cluster.send_update_metadata(
        1, first.controller_id, first.controller_epoch, int(described.broker_epoch) if described else 0
    )
    assert response.error_code == 11
    broker = await asyncio.to_thread(scrape, cluster.broker(1)["metrics"])
    # The exposition sorts labels by name.
    labels = 'api="UpdateMetadata",code="11",error="STALE_CONTROLLER_EPOCH"'
    rejected = "kcontroller_broker_rejected_requests_total{" + labels + "}"
    assert broker[rejected] >= 1


async def test_a_resigned_controller_reports_zero_for_the_active_controller_gauges(cluster_factory: Any) -> None:
    """Kafka's KafkaController gauges read 0 off the active controller, so summing them over
    controllers (as dashboards do) counts an offline partition once, also after a failover."""
    cluster = await cluster_factory(controllers=2, brokers=2)
    first = await cluster.converged()
    assert (await create_topic(cluster, "lonely", assignment={0: [2]})).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "lonely", [2]), 30, what="lonely online")
    cluster.kill(cluster.broker(2))  # its only replica: the partition goes offline
    offline = "kafka_controller_kafkacontroller_offlinepartitionscount"
    active = "kafka_controller_kafkacontroller_activecontrollercount"
    partitions = "kafka_controller_kafkacontroller_globalpartitioncount"

    async def gauges(controller_id: int) -> tuple[float, float, float]:
        scraped = await asyncio.to_thread(scrape, cluster.controller(controller_id)["metrics"])
        return scraped[active], scraped[offline], scraped[partitions]

    async def offline_on_first() -> bool:
        return await gauges(first.controller_id) == (1, 1, 1)

    await eventually(offline_on_first, 30, what="the offline partition in the active controller's metrics")

    # The active controller becomes a zombie (stopped past its session timeout): the other one
    # takes over; the zombie wakes up, resigns and must not go on reporting what it saw.
    zombie = cluster.controller(first.controller_id)
    cluster.signal(zombie, signal.SIGSTOP)
    try:
        second = await cluster.converged(min_epoch=first.controller_epoch + 1, brokers=[1])
    finally:
        cluster.signal(zombie, signal.SIGCONT)
    assert second.controller_id != first.controller_id

    async def resigned() -> bool:
        return any(
            r["kind"] == "controller.resigned" and r["controller_epoch"] == first.controller_epoch
            for r in cluster.records(f"controller-{first.controller_id}")
        )

    await eventually(resigned, 30, what="the zombie to resign")

    async def follow_the_active_controller() -> bool:
        assert await gauges(first.controller_id) == (0, 0, 0)
        assert await gauges(second.controller_id) == (1, 1, 1)
        return True

    await eventually(follow_the_active_controller, 20, what="the gauges to follow the active controller")
