from __future__ import annotations

import asyncio
import itertools
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from controller_svc.devtools import devcluster, zookeeper_launcher
from tests.integration.harness import Cluster

# Short enough that failover tests are quick, long enough for a loaded 2-core CI machine.
SESSION_TIMEOUT_MS = 4000
# Brokers' wait between ControlledShutdown attempts (Kafka's default 5 s): the last broker of a
# cluster stopped at a test's end is told it still leads and retries before exiting anyway,
# which held 43 of the tier's teardowns for the 5 s grace before SIGKILL.
BROKER_DEFAULTS = {"controlled.shutdown.retry.backoff.ms": "500"}
_chroots = itertools.count(1)
# The state-change logs of every cluster the tests started: analysed together at the end of the run.
_histories: list[pathlib.Path] = []
HISTORY_ANALYSIS = pathlib.Path("test-logs") / "integration-history-analysis"


@pytest.fixture(scope="session", autouse=True)
def histories_have_no_violations() -> Iterator[None]:
    """After the last integration test: every cluster's logs through the Spark invariant
    checker (`controller-svc analyze --cluster-by dir`), which must find zero violations."""
    yield
    existing = [str(p) for p in _histories if p.is_dir()]
    if not existing:
        return
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "controller_svc",
            "analyze",
            *existing,
            "--out",
            str(HISTORY_ANALYSIS),
            "--cluster-by",
            "dir",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    if result.returncode == 0:
        return
    if result.returncode == 1 and result.stdout.lstrip().startswith("{"):
        summary = json.loads(result.stdout)
        broken = {
            name: {k: v for k, v in cluster["violations"].items() if v}
            for name, cluster in summary["clusters"].items()
            if any(cluster["violations"].values())
        }
        raise AssertionError(
            f"invariant violations in the integration tests' cluster histories: {json.dumps(broken, indent=1)}; "
            f"see {HISTORY_ANALYSIS}/report.html"
        )
    raise AssertionError(f"analysing the integration histories failed ({result.returncode}): {result.stderr[-4000:]}")


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
        session_timeout_ms = kwargs.get("session_timeout_ms", SESSION_TIMEOUT_MS)
        spec = await asyncio.to_thread(
            devcluster.up,
            str(directory),
            controllers,
            brokers,
            chroot_connect,
            session_timeout_ms,
            kwargs.get("controller_overrides"),
            {**BROKER_DEFAULTS, **(kwargs.get("broker_overrides") or {})},
            90.0,
            wait,
        )
        cluster = Cluster(directory, spec, session_timeout_ms)
        started.append(cluster)
        _histories.append(pathlib.Path(cluster.logs))
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
