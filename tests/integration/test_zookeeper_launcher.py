from __future__ import annotations

import pathlib
import signal
import subprocess
import sys
import time

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


def test_a_group_is_given_one_grace_period_not_one_per_process() -> None:
    # Brokers that all keep retrying controlled shutdown (none can hand its leaders to another)
    # made `cluster down` wait a grace period per broker before killing the next.
    ignores_sigterm = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(120)"
    )
    stubborn = [subprocess.Popen([sys.executable, "-c", ignores_sigterm], stdout=subprocess.PIPE) for _ in range(3)]
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    everyone = [*stubborn, polite]
    try:
        for process in stubborn:
            assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        # The grace period on a virtual clock, which starts once the polite process is gone:
        # the seconds it counts are then those spent waiting on the stubborn ones.
        virtual_s = [0.0]

        def sleep(seconds: float) -> None:
            if polite.poll() is None:
                time.sleep(seconds)
            else:
                virtual_s[0] += seconds

        killed = zookeeper_launcher.stop_pids(
            [p.pid for p in everyone],
            signal.SIGTERM,
            timeout=1.0,
            processes={p.pid: p for p in everyone},
            clock=lambda: virtual_s[0],
            sleep=sleep,
        )
        assert sorted(killed) == sorted(p.pid for p in stubborn)
        assert polite.returncode == -signal.SIGTERM
        assert [p.returncode for p in stubborn] == [-signal.SIGKILL] * 3
        assert virtual_s[0] < 1.5, f"waited {virtual_s[0]:.2f} virtual s for a 1 s grace period"
    finally:
        for process in everyone:
            if process.poll() is None:
                process.kill()
                process.wait()
