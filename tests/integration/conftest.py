from __future__ import annotations

import asyncio
import itertools
import pathlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from controller_svc import devcluster, zookeeper_launcher
from tests.integration.harness import Cluster

# Short enough that failover tests are quick, long enough for a loaded 2-core CI machine.
SESSION_TIMEOUT_MS = 4000
_chroots = itertools.count(1)


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[zookeeper_launcher.ZooKeeper]:
    base = tempfile.mkdtemp(prefix="kc-zk-")
    zk = zookeeper_launcher.start(base, nodes=1, tick_ms=500)
    yield zk
    zk.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def chroot_connect(zookeeper: zookeeper_launcher.ZooKeeper, request: pytest.FixtureRequest) -> str:
    """A connect string with a chroot of its own for this test."""
    name = request.node.name.replace("[", "_").replace("]", "").replace("/", "_")
    return f"{zookeeper.connect}/t{next(_chroots)}-{name}"


ClusterFactory = Callable[..., Any]


@pytest.fixture
async def cluster_factory(
    chroot_connect: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> AsyncIterator[ClusterFactory]:
    started: list[Cluster] = []

    async def make(controllers: int = 3, brokers: int = 3, wait: bool = True, **kwargs: Any) -> Cluster:
        directory = tmp_path / f"cluster{len(started)}"
        spec = await asyncio.to_thread(
            devcluster.up,
            str(directory),
            controllers,
            brokers,
            chroot_connect,
            SESSION_TIMEOUT_MS,
            kwargs.get("controller_overrides"),
            kwargs.get("broker_overrides"),
            90.0,
            wait,
        )
        cluster = Cluster(directory, spec, SESSION_TIMEOUT_MS)
        started.append(cluster)
        return cluster

    yield make
    for cluster in started:
        try:
            await asyncio.to_thread(devcluster.down, str(cluster.dir), 5.0)
        except devcluster.ClusterError:
            pass
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:  # keep the cluster's logs of a failed test
            keep = pathlib.Path("test-logs") / request.node.name
            shutil.copytree(cluster.logs, keep, dirs_exist_ok=True)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, "rep_" + report.when, report)
    return report
