from __future__ import annotations

import pathlib

import pytest

from controller_svc.adapters.zk.client import ZkClient
from controller_svc.devtools import zookeeper_launcher

pytestmark = pytest.mark.integration


async def test_three_node_ensemble_serves_and_survives_one_node_loss(tmp_path: pathlib.Path) -> None:
    ensemble = zookeeper_launcher.start(tmp_path, nodes=3, tick_ms=500)
    try:
        assert len(ensemble.pids) == 3
        modes = [zookeeper_launcher.four_letter_word("127.0.0.1", n.client_port, b"srvr") for n in ensemble.nodes]
        assert sum(b"Mode: leader" in m for m in modes) == 1
        assert sum(b"Mode: follower" in m for m in modes) == 2
        client = ZkClient(ensemble.connect, 10000)
        await client.start(timeout_s=20)
        try:
            await client.create("/kept", b"x")
            ensemble.stop_node(0)
            assert (await client.get("/kept"))[0] == b"x"
        finally:
            await client.close()
    finally:
        ensemble.stop()
    assert not any(zookeeper_launcher.pid_alive(p) for p in ensemble.pids)


def test_free_ports_are_never_handed_out_twice() -> None:
    # A cluster's nodes get their ports before any of them binds: a repeat would make two
    # servers race for one port (seen as "Address already in use" at start-up).
    ports = [zookeeper_launcher.free_port() for _ in range(600)]
    assert len(set(ports)) == len(ports)
