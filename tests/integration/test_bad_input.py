"""Issue 3, bad input: a clear error (RPC error code, log line, metric); nothing else disturbed."""

from __future__ import annotations

import urllib.request

import pytest

from controller_svc.adapters.zk import paths
from controller_svc.common.errors import ErrorCode
from tests.integration.harness import brokers_agree_with_controller, create_topic, eventually, partitions

pytestmark = pytest.mark.integration

MALFORMED_TOPICS = {
    "bad-json": b'{"version":1,"partitions":',
    "bad-partition-id": b'{"version":1,"partitions":{"-1":[1,2]}}',
    "non-numeric-id": b'{"version":1,"partitions":{"zero":[1,2]}}',
    "duplicate-replicas": b'{"version":1,"partitions":{"0":[1,1]}}',
    "empty-replicas": b'{"version":1,"partitions":{"0":[]}}',
}


def scrape(cluster, controller_id: int) -> str:  # type: ignore[no-untyped-def]
    address = cluster.controller(controller_id)["metrics"]
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        return str(response.read().decode())


def metric_value(text: str, name: str, labels: str = "") -> float:
    prefix = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith(prefix + " "):
            return float(line.split()[-1])
    return 0.0


async def test_malformed_topic_znodes_are_reported_and_skipped(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=2)
    snap = await cluster.converged()
    zk = await cluster.zk()
    try:
        for name, data in MALFORMED_TOPICS.items():
            await zk.create(paths.topic_path(name), data)
        await zk.create(paths.topic_path("good"), b'{"version":1,"partitions":{"0":[1,2]}}')
        # Replicas on a broker that never registered: accepted, that replica stays offline.
        await zk.create(paths.topic_path("ghost-broker"), b'{"version":1,"partitions":{"0":[1,9]}}')

        async def good_online() -> bool:
            current = await partitions(cluster, "good")
            return bool(current) and current[("good", 0)].leader == 1

        await eventually(good_online, 30, what="the good topic to come online next to the bad ones")
        current = await partitions(cluster)
        assert {t for t, _ in current} == {"good", "ghost-broker"}
        assert current[("ghost-broker", 0)].leader == 1 and list(current[("ghost-broker", 0)].offline_replicas) == [9]
        log_text = (cluster.dir / "logs" / f"controller-{snap.controller_id}.log").read_text()
        for name in MALFORMED_TOPICS:
            assert f"ignoring topic {name}" in log_text
        assert "not registered" in log_text
        metrics = scrape(cluster, snap.controller_id)
        assert metric_value(metrics, "kcontroller_corrupt_znodes_total", 'kind="topic"') == len(MALFORMED_TOPICS)

        # A partition state that does not parse: reported at failover; that partition stays
        # leaderless rather than being overwritten; the rest of the cluster is unaffected.
        await zk.set_data(paths.partition_state_path("good", 0), b"{garbage")
    finally:
        await zk.close()
    cluster.kill(cluster.controller(snap.controller_id))
    cluster.start_node(cluster.controller(snap.controller_id))
    await cluster.converged(min_epoch=snap.controller_epoch + 1)

    async def reported() -> bool:
        text = (cluster.dir / "logs" / f"controller-{snap.controller_id}.log").read_text()
        return "ignoring state of good-0" in text

    await eventually(reported, 30, what="the corrupt partition state to be reported")
    assert (await partitions(cluster))[("ghost-broker", 0)].leader == 1
    zk = await cluster.zk()
    try:
        assert (await zk.get(paths.partition_state_path("good", 0)))[0] == b"{garbage"
    finally:
        await zk.close()


@pytest.mark.parametrize(
    ("name", "partitions_", "replication_factor", "assignment", "code"),
    [
        ("bad/name", 1, 1, None, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("..", 1, 1, None, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("x" * 250, 1, 1, None, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("zero-partitions", 0, 1, None, ErrorCode.INVALID_PARTITIONS),
        ("too-wide", 1, 3, None, ErrorCode.INVALID_REPLICATION_FACTOR),
        ("zero-rf", 1, 0, None, ErrorCode.INVALID_REPLICATION_FACTOR),
        ("unknown-broker", -1, -1, {0: [1, 7]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ("dup-replicas", -1, -1, {0: [1, 1]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ("gap", -1, -1, {0: [1], 2: [2]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ],
)
async def test_invalid_create_topics_requests_get_kafka_error_codes(
    cluster_factory, name: str, partitions_: int, replication_factor: int, assignment, code: ErrorCode
) -> None:
    cluster = await cluster_factory(controllers=1, brokers=2)
    snap = await cluster.converged()
    result = await create_topic(cluster, name, partitions_, replication_factor, assignment=assignment)
    assert result.error_code == code, result
    assert result.error_message
    # Nothing was written, and the controller still serves.
    zk = await cluster.zk()
    try:
        assert await zk.get_children(paths.BROKER_TOPICS) == []
    finally:
        await zk.close()
    ok = await create_topic(cluster, "fine", 1, 2)
    assert ok.error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "fine", [1, 2]), 30, what="fine online")
    text = scrape(cluster, snap.controller_id)
    assert metric_value(text, "kcontroller_admin_request_errors_total", f'api="CreateTopics",error="{code.name}"') == 1
    log_text = (cluster.dir / "logs" / f"controller-{snap.controller_id}.log").read_text()
    assert f"CreateTopics {name} refused: {code.name}" in log_text


async def test_duplicate_topic_is_refused(cluster_factory) -> None:
    cluster = await cluster_factory(controllers=1, brokers=1)
    await cluster.converged()
    assert (await create_topic(cluster, "dup", 1, 1)).error_code == 0
    again = await create_topic(cluster, "dup", 1, 1)
    assert again.error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    collide = await create_topic(cluster, "d.up", 1, 1)
    assert collide.error_code == 0  # 'd.up' and 'dup' do not collide
    collide = await create_topic(cluster, "d_up", 1, 1)
    assert collide.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
