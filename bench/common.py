"""Shared benchmark plumbing: a real local cluster, bulk topic creation, log parsing."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from typing import Any

from controller_svc.adapters.admin_client import AdminClient
from controller_svc.devtools import devcluster
from kcontroller.v1 import controller_pb2


def start_cluster(
    controllers: int,
    brokers: int,
    session_timeout_ms: int = 10000,
    zookeeper_heap_mb: int = 1024,
    **overrides: str,
) -> tuple[str, dict[str, Any]]:
    directory = tempfile.mkdtemp(prefix="kc-bench-")
    spec = devcluster.up(
        directory,
        controllers,
        brokers,
        session_timeout_ms=session_timeout_ms,
        controller_overrides={"controller.socket.timeout.ms": "120000", **overrides},
        broker_overrides={"replica.catchup.delay.ms": "1000"},
        wait_s=180,
        zookeeper_heap_mb=zookeeper_heap_mb,
    )
    return directory, spec


class Profiler:
    """py-spy sampling processes of the cluster while an operation runs (`--profile DIR`):
    raw collapsed stacks per process, summarised by `bench.profile_summary`. Idle threads are
    left out, so the samples are where the CPU went."""

    def __init__(self, directory: str | None) -> None:
        self.directory = pathlib.Path(directory) if directory else None
        self._running: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, pid: int, rate: int = 250) -> None:
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        out = self.directory / f"{name}.txt"
        command = ["py-spy", "record", "--pid", str(pid), "--format", "raw", "--rate", str(rate), "--output", str(out)]
        venv_spy = pathlib.Path(sys.executable).with_name("py-spy")
        if venv_spy.exists():
            command[0] = str(venv_spy)
        elif shutil.which("py-spy") is None:
            raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
        self._running.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def stop(self) -> None:
        for process in self._running:
            process.send_signal(2)  # SIGINT: py-spy writes its output and exits
        for process in self._running:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        self._running.clear()


def stop_cluster(directory: str) -> None:
    devcluster.down(directory, grace_s=10)


async def create_partitions(
    spec: dict[str, Any], partitions: int, replication_factor: int, per_topic: int = 1000
) -> list[str]:
    client = AdminClient(zookeeper=spec["zookeeper"], timeout_s=600)
    topics = []
    remaining = partitions
    index = 0
    while remaining > 0:
        count = min(per_topic, remaining)
        name = f"bench-{index:04d}"
        topics.append(name)
        request = controller_pb2.CreateTopicsRequest(
            topics=[
                controller_pb2.CreatableTopic(name=name, num_partitions=count, replication_factor=replication_factor)
            ]
        )
        response = await client.create_topics(request)
        if response.error_code or response.topics[0].error_code:
            raise RuntimeError(f"creating {name} failed: {response}")
        remaining -= count
        index += 1
    return topics


async def wait_all_led(spec: dict[str, Any], partitions: int, timeout_s: float = 900, rf: int = 3) -> None:
    """Until the controller has every partition and none offline, and the brokers together
    hold every replica and lead every partition. Counts only, from both sides: at 1M
    partitions a full description costs the controller seconds of its loop and each broker
    seconds of CPU (five at once once cost a broker its ZooKeeper session)."""
    client = AdminClient(zookeeper=spec["zookeeper"], timeout_s=600)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        description = await client.describe_cluster(include_partitions=False)
        if description.partition_count == partitions and description.offline_partition_count == 0:
            counts = await asyncio.gather(
                *(devcluster.describe_broker(b["grpc"], 60, counts_only=True) for b in spec["brokers"])
            )
            if all(c is not None for c in counts):
                roles = sum(c.role_count for c in counts if c is not None)
                led = sum(c.leader_count for c in counts if c is not None)
                if roles == partitions * rf and led == partitions:
                    return
        await asyncio.sleep(1.0)
    raise TimeoutError("the cluster did not bring every partition online")


def records(logs: str, kinds: Iterable[str] | None = None) -> list[dict[str, Any]]:
    wanted = set(kinds) if kinds else None
    result = []
    for path in sorted(pathlib.Path(logs).glob("*.state-change.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if wanted is not None and not any(f'"kind":"{k}"' in line for k in wanted):
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                result.append(record)
    return sorted(result, key=lambda r: r["ts"])


class CpuMeter:
    """CPU time (user + system, from /proc) each process of the cluster spends between `start`
    and `stop`. On a machine with fewer cores than busy processes, this, not a sampling
    profile (which counts a thread waiting for a core as running), says where the time went."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.pids: dict[str, int] = {f"controller-{c['id']}": c["pid"] for c in spec["controllers"]}
        self.pids.update({f"broker-{b['id']}": b["pid"] for b in spec["brokers"]})
        if spec.get("zookeeper_pid"):
            self.pids["zookeeper"] = spec["zookeeper_pid"]
        self._started: dict[str, float] = {}
        self._last: dict[str, float] = {}

    @staticmethod
    def _cpu_s(pid: int) -> float | None:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def start(self) -> None:
        self._started = {name: cpu for name, pid in self.pids.items() if (cpu := self._cpu_s(pid)) is not None}
        self._last = dict(self._started)

    def poll(self) -> None:
        """Note every process's figure now: a process that exits before `stop` is counted up to
        its last poll."""
        for name, pid in self.pids.items():
            if (cpu := self._cpu_s(pid)) is not None:
                self._last[name] = cpu

    @staticmethod
    def threads_ms(pid: int) -> dict[str, float]:
        """CPU so far of each thread of a process, by the kernel's thread name (the main
        thread as `main`; threads of one name added up)."""
        by_name: dict[str, float] = {}
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return by_name
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii", errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            name = "main" if tid == str(pid) else text.partition("(")[2].rpartition(")")[0]
            fields = text.rpartition(")")[2].split()
            ms = (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")
            by_name[name] = by_name.get(name, 0.0) + ms
        return by_name

    def stop(self) -> dict[str, float]:
        """Milliseconds of CPU per process since `start`, and their total."""
        self.poll()
        spent = {}
        for name, before in self._started.items():
            spent[name] = round((self._last[name] - before) * 1000, 1)
        spent["total"] = round(sum(spent.values()), 1)
        return spent


def log_timeline_ms(logs: str, since_ts_ms: float, broker_id: int) -> dict[str, float]:
    """Milliseconds after `since_ts_ms` at which each step around broker `broker_id`'s departure
    was logged: the controller hearing of it (a controlled shutdown request or the broker
    change), its first and last leader elected, the first and last request it sent, the last
    request to another broker completed, every other broker's first LeaderAndIsr completed (the
    new leaders applied), and, for a controlled shutdown, the broker told it succeeded and
    deregistering. Where the time goes, read from the logs alone."""
    kinds = [
        "broker.controlled_shutdown",
        "broker.change",
        "partition.leader_elected",
        "request.sent",
        "request.completed",
        "broker.controlled_shutdown_succeeded",
        "broker.shutdown",
    ]
    after = [r for r in records(logs, kinds) if r["ts"] >= since_ts_ms]
    marks: dict[str, float] = {}

    def mark(name: str, chosen: list[dict[str, Any]], last: bool = False) -> None:
        if chosen:
            marks[name] = round((chosen[-1] if last else chosen[0])["ts"] - since_ts_ms, 1)

    mark("controller_heard", [r for r in after if r["kind"] in ("broker.controlled_shutdown", "broker.change")])
    elected = [r for r in after if r["kind"] == "partition.leader_elected"]
    mark("first_leader_elected", elected)
    mark("last_leader_elected", elected, last=True)
    sent = [r for r in after if r["kind"] == "request.sent"]
    mark("first_request_sent", sent)
    mark("last_request_sent", sent, last=True)
    completed = [r for r in after if r["kind"] == "request.completed" and r["broker"] != broker_id]
    mark("last_request_to_others_completed", completed, last=True)
    # Every other broker's first LeaderAndIsr answered after the departure: the one carrying
    # the moved leaderships (later ones belong to what follows, the deregistration's broker
    # change). When the last of them landed, every new leader had applied its leadership.
    first_leader_and_isr: dict[int, dict[str, Any]] = {}
    for r in completed:
        if r["api"] == "LeaderAndIsr":
            first_leader_and_isr.setdefault(r["broker"], r)
    mark("new_leaders_applied", sorted(first_leader_and_isr.values(), key=lambda r: r["ts"]), last=True)
    mark("broker_told_success", [r for r in after if r["kind"] == "broker.controlled_shutdown_succeeded"])
    mark("broker_deregistered", [r for r in after if r["kind"] == "broker.shutdown"])
    return marks


def machine() -> dict[str, Any]:
    """What a result was measured on: core count, the commit (with a mark if the tree was dirty)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        # Results written by an earlier benchmark of the same session do not make the code dirty.
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        if changed:
            commit += "-dirty"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "commit": commit,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def summary_of_runs(benchmark: str, results: list[dict[str, Any]], keys: list[str]) -> dict[str, Any]:
    """min / median / max of `keys` over repeated runs (each on a fresh cluster): on a shared
    2-core machine one run's figure can be 30% off the next one's."""
    summary: dict[str, Any] = {"benchmark": benchmark, "summary": True, "runs": len(results)}
    for key in keys:
        values = sorted(float(r[key]) for r in results if r.get(key) is not None)
        if values:
            summary[key] = {"min": values[0], "median": statistics.median(values), "max": values[-1]}
    return summary


def emit(result: dict[str, Any]) -> None:
    result.setdefault("machine", machine())
    print(json.dumps(result, indent=2, sort_keys=True), flush=True)


def print_report(report: dict[str, Any], out: str | None) -> None:
    """Prints a benchmark's report as JSON, and writes the same text to `out` when given."""
    text = json.dumps(report, indent=1)
    if out:
        pathlib.Path(out).write_text(text + "\n")
    print(text)


def save(path: str, results: list[dict[str, Any]]) -> None:
    """Write a run's results as committed under bench/results/ (JSON list, one per size)."""
    target = pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")


class LogTail:
    """Reads new state-change records as they are appended (cheap polling, no RPC load on the
    processes being measured)."""

    def __init__(self, logs: str) -> None:
        self.logs = pathlib.Path(logs)
        self.offsets: dict[pathlib.Path, int] = {}

    def skip_existing(self) -> None:
        for path in self.logs.glob("*.state-change.jsonl"):
            self.offsets[path] = path.stat().st_size

    def new_records(self, kinds: Iterable[str]) -> list[dict[str, Any]]:
        wanted = [f'"kind":"{k}"' for k in kinds]
        result = []
        for path in sorted(self.logs.glob("*.state-change.jsonl")):
            with open(path, "rb") as f:
                f.seek(self.offsets.get(path, 0))
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1  # only whole lines
            self.offsets[path] = self.offsets.get(path, 0) + end
            for line in chunk[:end].decode("utf-8", errors="replace").splitlines():
                if any(w in line for w in wanted):
                    try:
                        result.append(json.loads(line))
                    except ValueError:
                        continue
        return result
