"""A broker's registration when ZooKeeper leaves requests unanswered (a hung server of the
ensemble, a lost reply): it keeps trying instead of ending the process. The chaos campaign
found brokers exiting with "registration failed: ... TimeoutError" while one ZooKeeper server
was stopped, and staying down."""

from __future__ import annotations

from broker_stub.registration import BrokerRegistration
from controller_svc.adapters.zk import paths
from tests.sim.cluster import SimCluster


async def test_a_registration_whose_create_reply_is_lost_finds_its_own_znode() -> None:
    cluster = SimCluster(brokers=2)
    await cluster.brokers[2].start()  # the top-level paths exist
    broker = cluster.brokers[1]
    await broker.zk.start()
    broker.zk.lose_next_write_replies(1)  # the create is applied, its reply never arrives
    registration = BrokerRegistration(broker.zk, broker.info, 5.0)  # type: ignore[arg-type]
    epoch = await registration.register()
    assert cluster.model.landed["write_reply_lost"] == 1
    assert registration.unanswered == 1
    node = cluster.model.nodes[paths.broker_path(1)]
    assert epoch == node.czxid and node.ephemeral_owner == broker.zk.session_id


async def test_a_registration_that_gets_no_answer_tries_again() -> None:
    cluster = SimCluster(brokers=1)
    broker = cluster.brokers[1]
    await broker.zk.start()
    broker.zk.fail_next_writes(3)  # the first requests (top-level paths, then the create) time out
    registration = BrokerRegistration(broker.zk, broker.info, 5.0)  # type: ignore[arg-type]
    await registration.ensure_top_level_paths()
    epoch = await registration.register()
    assert registration.unanswered == 3
    assert epoch == cluster.model.nodes[paths.broker_path(1)].czxid
