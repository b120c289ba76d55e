"""Start and stop a local ZooKeeper (standalone or a 3-node ensemble on localhost ports)
from the installed package (Debian's `zookeeper`; or ZOOKEEPER_HOME / ZOOKEEPER_CLASSPATH).

Used by the tests, the demo and `controller-svc cluster up`.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

DEBIAN_JAR = "/usr/share/java/zookeeper.jar"
DEBIAN_CONF = "/etc/zookeeper/conf"


class ZooKeeperLaunchError(RuntimeError):
    pass


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


# Ports this process has handed out: a port is free when checked but only taken when the server
# binds it, so two nodes of one cluster could otherwise be given the same port.
_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port for a server we are about to start, never one this process handed out before.
    Chosen below the kernel's ephemeral range: ports handed out there are also taken by
    outgoing connections (ZooKeeper clients, gRPC channels) between our check and the bind."""
    if len(_handed_out) > 8000:  # a long-lived launcher: forget the oldest generation
        _handed_out.clear()
    low, _high = _ephemeral_range()
    if low > 12000:
        for _ in range(50):
            port = random.randrange(10000, low - 1)
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise OSError(f"no free port on {host}")


def classpath() -> str:
    explicit = os.environ.get("ZOOKEEPER_CLASSPATH")
    if explicit:
        return explicit
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(str(p) for p in pathlib.Path(home).glob("lib/*.jar"))
        jars += sorted(str(p) for p in pathlib.Path(home).glob("*.jar"))
        if jars:
            return os.pathsep.join(jars)
    if os.path.exists(DEBIAN_JAR):
        # The Debian jar's manifest names its dependencies in /usr/share/java.
        return os.pathsep.join([DEBIAN_CONF, DEBIAN_JAR])
    raise ZooKeeperLaunchError(
        "ZooKeeper is not installed: install Debian's package (apt-get install -y zookeeper) "
        "or set ZOOKEEPER_HOME to an unpacked Apache ZooKeeper release"
    )


def java() -> str:
    found = shutil.which("java")
    if found is None:
        raise ZooKeeperLaunchError("no java on PATH (Debian: apt-get install -y default-jre-headless)")
    return found


def four_letter_word(host: str, port: int, word: bytes, timeout: float = 1.0) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word)
        chunks = []
        while True:
            data = s.recv(4096)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks)


def is_serving(host: str, port: int) -> bool:
    """`ruok` says the process is up; `srvr` says it has joined a quorum and serves."""
    try:
        if four_letter_word(host, port, b"ruok") != b"imok":
            return False
        return b"Mode:" in four_letter_word(host, port, b"srvr")
    except OSError:
        return False


@dataclasses.dataclass
class ZooKeeperNode:
    server_id: int
    client_port: int
    data_dir: pathlib.Path
    process: subprocess.Popen[bytes] | None = None
    pid: int | None = None
    command: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ZooKeeper:
    nodes: list[ZooKeeperNode]
    host: str = "127.0.0.1"

    @property
    def connect(self) -> str:
        return ",".join(f"{self.host}:{n.client_port}" for n in self.nodes)

    @property
    def pids(self) -> list[int]:
        return [n.pid for n in self.nodes if n.pid is not None]

    def stop_node(self, index: int, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        node = self.nodes[index]
        if node.pid is not None:
            stop_pid(node.pid, sig, timeout, node.process)
            node.pid = None
            node.process = None

    def stop(self, timeout: float = 10.0) -> None:
        """Every server at once, one grace period for all."""
        running = [n for n in self.nodes if n.pid is not None]
        stop_pids(
            [n.pid for n in running if n.pid is not None],
            signal.SIGTERM,
            timeout,
            processes={n.pid: n.process for n in running if n.pid is not None and n.process is not None},
        )
        for node in running:
            node.pid = None
            node.process = None

    def restart_node(self, index: int, detach: bool = True, wait_s: float = 60.0) -> None:
        """Start a stopped server again with its own configuration and data (it rejoins the
        ensemble), and wait until it serves."""
        node = self.nodes[index]
        if node.pid is not None and pid_alive(node.pid):
            return
        _spawn(node, detach)
        _wait_serving(node, wait_s)
        if detach:
            node.process = None


def _spawn(node: ZooKeeperNode, detach: bool) -> None:
    log_file = open(node.data_dir / "zookeeper.log", "ab")  # noqa: SIM115 - handed to the child
    node.process = subprocess.Popen(
        node.command,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=detach,
        cwd=node.data_dir,
    )
    log_file.close()
    node.pid = node.process.pid


def _wait_serving(node: ZooKeeperNode, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while not is_serving("127.0.0.1", node.client_port):
        if node.process is not None and node.process.poll() is not None:
            raise ZooKeeperLaunchError(
                f"ZooKeeper {node.server_id} exited with {node.process.returncode}; "
                f"see {node.data_dir / 'zookeeper.log'}"
            )
        if time.monotonic() > deadline:
            raise ZooKeeperLaunchError(
                f"ZooKeeper {node.server_id} did not serve on port {node.client_port} within {wait_s:.0f} s"
            )
        time.sleep(0.1)


def stop_pid(
    pid: int, sig: int = signal.SIGTERM, timeout: float = 10.0, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Signal `pid`, wait up to `timeout`, then SIGKILL."""
    stop_pids([pid], sig, timeout, processes={pid: process} if process is not None else None)


def stop_pids(
    pids: Sequence[int],
    sig: int = signal.SIGTERM,
    timeout: float = 10.0,
    processes: Mapping[int, subprocess.Popen[bytes]] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[int]:
    """Signal every pid, wait until all have exited or `timeout` has passed, then SIGKILL the
    rest: one grace period for the group, not one per process (stopping them in turn made a
    cluster whose brokers all kept retrying controlled shutdown take a grace period per broker).
    `processes`: the Popen of pids started by this process (reaped through it). Returns the pids
    that had to be killed. `clock` and `sleep` measure the grace period (a test's virtual clock)."""
    known = processes or {}
    alive = []
    for pid in pids:
        try:
            os.kill(pid, sig)
            alive.append(pid)
        except ProcessLookupError:
            pass
    deadline = clock() + timeout
    while alive and clock() < deadline:
        alive = [pid for pid in alive if _alive(pid, known.get(pid))]
        if alive:
            sleep(0.05)
    killed = []
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass
    while any(_alive(pid, known.get(pid)) for pid in killed):
        time.sleep(0.05)  # not the grace period's clock: a killed process is gone in moments
    return killed


def pid_alive(pid: int) -> bool:
    return _alive(pid, None)


def _alive(pid: int, process: subprocess.Popen[bytes] | None) -> bool:
    if process is not None:
        return process.poll() is None
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not reaped by its parent) counts as dead.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _config(node: ZooKeeperNode, peers: Sequence[tuple[int, int, int]], tick_ms: int) -> str:
    lines = [
        f"tickTime={tick_ms}",
        f"dataDir={node.data_dir}",
        f"clientPort={node.client_port}",
        "clientPortAddress=127.0.0.1",
        "initLimit=20",
        "syncLimit=10",
        "maxClientCnxns=0",
        "admin.enableServer=false",
        "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,conf,wchs",
        f"minSessionTimeout={max(2 * tick_ms, 1000)}",
        "maxSessionTimeout=120000",
        "autopurge.purgeInterval=0",
    ]
    for server_id, peer_port, election_port in peers:
        lines.append(f"server.{server_id}=127.0.0.1:{peer_port}:{election_port}")
    return "\n".join(lines) + "\n"


def start(
    base_dir: str | os.PathLike[str],
    nodes: int = 1,
    tick_ms: int = 500,
    detach: bool = False,
    wait_s: float = 60.0,
    heap_mb: int = 1024,
) -> ZooKeeper:
    """Start a standalone ZooKeeper (nodes=1) or an ensemble on free localhost ports,
    each with its own data directory under `base_dir`, and wait until it serves."""
    base = pathlib.Path(base_dir)
    base.mkdir(parents=True, exist_ok=True)
    cp = classpath()
    java_bin = java()
    zk_nodes = [ZooKeeperNode(i + 1, free_port(), base / f"zk-{i + 1}") for i in range(nodes)]
    peers = [(n.server_id, free_port(), free_port()) for n in zk_nodes] if nodes > 1 else []
    main_class = (
        "org.apache.zookeeper.server.ZooKeeperServerMain"
        if nodes == 1
        else "org.apache.zookeeper.server.quorum.QuorumPeerMain"
    )
    ensemble = ZooKeeper(zk_nodes)
    try:
        for node in zk_nodes:
            node.data_dir.mkdir(parents=True, exist_ok=True)
            if nodes > 1:
                (node.data_dir / "myid").write_text(f"{node.server_id}\n")
            cfg = node.data_dir / "zoo.cfg"
            cfg.write_text(_config(node, peers, tick_ms))
            node.command = [
                java_bin,
                f"-Xmx{heap_mb}m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                f"-Dzookeeper.log.dir={node.data_dir}",
                "-Dzookeeper.admin.enableServer=false",
                "-cp",
                cp,
                main_class,
                str(cfg),
            ]
            _spawn(node, detach)
        for node in zk_nodes:
            _wait_serving(node, wait_s)
    except BaseException:
        ensemble.stop(timeout=2)
        raise
    if detach:
        # The launcher exits; nobody will wait() for these children through Popen.
        for node in zk_nodes:
            node.process = None
    return ensemble
