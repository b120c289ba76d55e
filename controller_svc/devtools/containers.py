"""The container images and deploy/compose.yaml's cluster, with podman (issue 14).

`build_images()` makes the two images the compose file needs, with or without a registry:
- a base image: the registry's `python:3.11-slim-bookworm` when asked for, otherwise Debian
  bookworm made from Debian's packages with mmdebstrap and `podman import`ed. The same for
  ZooKeeper (Debian's zookeeper package behind deploy/zookeeper/entrypoint.sh). Made bases are
  tagged with a hash of what goes into them, so a machine makes each once;
- the project's wheels' dependencies built on the host (`pip wheel`) into deploy/wheelhouse, so
  the Dockerfile's pip needs no network (`PIP_NO_INDEX=1`), as in an air-gapped pipeline;
- the Dockerfile built in Docker's image format (the OCI format drops HEALTHCHECK).

podman runs with its own containers.conf (`podman_env()`): the runc runtime (crun fails on
this kernel's hybrid cgroups), netavark with aardvark-dns (services find each other by name)
and rlimits no higher than the caller's own, which an unprivileged sandbox refuses to raise.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "compose.yaml"
WHEELHOUSE = ROOT / "deploy" / "wheelhouse"
ZOOKEEPER_CONTEXT = ROOT / "deploy" / "zookeeper"
REGISTRY_BASE = "python:3.11-slim-bookworm"
SUITE = "bookworm"
# Debian packages of the made bases: Python with its venv module and useradd for the
# Dockerfile; ZooKeeper with nc for compose's health check.
PYTHON_PACKAGES = ("python3", "python3-venv", "passwd", "ca-certificates")
ZOOKEEPER_PACKAGES = ("zookeeper", "netcat-openbsd")
NODE_IMAGE = "localhost/kcontroller:local"
ZOOKEEPER_IMAGE = "localhost/kcontroller-zookeeper:local"
TOOLS = ("podman", "runc", "mmdebstrap", "podman-compose")


class ContainerError(RuntimeError):
    """A container tool is missing or one of its commands failed."""


@dataclasses.dataclass(frozen=True)
class Images:
    node: str
    zookeeper: str

    def compose_env(self) -> dict[str, str]:
        """The variables deploy/compose.yaml reads its images from."""
        return {"KCONTROLLER_IMAGE": self.node, "ZOOKEEPER_IMAGE": self.zookeeper}


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def podman_env(state_dir: pathlib.Path | None = None) -> dict[str, str]:
    """os.environ with CONTAINERS_CONF pointing at this module's podman configuration."""
    directory = state_dir or pathlib.Path(tempfile.gettempdir()) / "kcontroller-podman"
    directory.mkdir(parents=True, exist_ok=True)
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    nofile = min(nofile, 65536) if nofile != resource.RLIM_INFINITY else 65536
    # Even the caller's own NPROC is refused in some sandboxes; well below it is not.
    nproc = min(nproc // 2, 8192) if nproc != resource.RLIM_INFINITY else 8192
    conf = directory / "containers.conf"
    conf.write_text(
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "[engine]\n"
        'runtime = "runc"\n'
        "[network]\n"
        'network_backend = "netavark"\n'
    )
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def run(argv: list[str], env: dict[str, str], timeout_s: float = 900, check: bool = True) -> str:
    """Run a tool; its output on success, a ContainerError with its output on failure."""
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError as e:
        raise ContainerError(f"{argv[0]} is not installed (`./dev setup` installs it)") from e
    except subprocess.TimeoutExpired as e:
        raise ContainerError(f"{' '.join(argv[:3])} took more than {timeout_s:.0f} s") from e
    if check and done.returncode != 0:
        raise ContainerError(f"{' '.join(argv[:4])} failed ({done.returncode}): {(done.stderr or done.stdout)[-2000:]}")
    return done.stdout


def image_exists(name: str, env: dict[str, str]) -> bool:
    return subprocess.run(["podman", "image", "exists", name], env=env).returncode == 0


def made_base(name: str, packages: tuple[str, ...], env: dict[str, str], log: bool = True) -> str:
    """A Debian bookworm image of `packages` (mmdebstrap, minbase), imported into podman once
    per machine: its tag is a hash of the suite and the package list."""
    digest = hashlib.sha256(" ".join((SUITE, *packages)).encode()).hexdigest()[:12]
    image = f"localhost/{name}:{SUITE}-{digest}"
    if image_exists(image, env):
        return image
    if log:
        print(f"== making {image} from Debian's packages ({', '.join(packages)})", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="kc-base-") as scratch:
        tarball = pathlib.Path(scratch) / "base.tar"
        run(
            [
                "mmdebstrap",
                "--quiet",
                "--variant=minbase",
                f"--include={','.join(packages)}",
                SUITE,
                str(tarball),
            ],
            env,
        )
        run(["podman", "import", "--quiet", str(tarball), image], env)
    return image


def wheelhouse(python: str = sys.executable) -> pathlib.Path:
    """Wheels of the runtime dependencies and the pinned build tools, made on this host."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = ROOT / "deploy" / "build-requirements.txt"
    argv = [python, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(WHEELHOUSE), "-r", str(requirements)]
    run([*argv, *project["dependencies"]], dict(os.environ))
    return WHEELHOUSE


def build_images(base: str = "local", env: dict[str, str] | None = None, log: bool = True) -> Images:
    """Both images of deploy/compose.yaml. `base`: "local" (made from Debian's packages, no
    registry, no network in the build) or "registry" (python:3.11-slim-bookworm, PyPI)."""
    env = env or podman_env()
    build = ["podman", "build", "--quiet", "--format", "docker"]
    if base == "registry":
        run([*build, "--build-arg", f"BASE_IMAGE={REGISTRY_BASE}", "-t", NODE_IMAGE, str(ROOT)], env)
        return Images(NODE_IMAGE, "docker.io/library/zookeeper:3.8")
    if base != "local":
        raise ContainerError(f"unknown base {base!r}: local or registry")
    python_base = made_base("kcontroller-base", PYTHON_PACKAGES, env, log)
    zookeeper_base = made_base("kcontroller-zookeeper-base", ZOOKEEPER_PACKAGES, env, log)
    wheelhouse()
    if log:
        print(f"== building {NODE_IMAGE} and {ZOOKEEPER_IMAGE}", file=sys.stderr)
    offline = ["--build-arg", f"BASE_IMAGE={python_base}", "--build-arg", "PIP_NO_INDEX=1"]
    run([*build, *offline, "-t", NODE_IMAGE, str(ROOT)], env)
    run([*build, "--build-arg", f"BASE_IMAGE={zookeeper_base}", "-t", ZOOKEEPER_IMAGE, str(ZOOKEEPER_CONTEXT)], env)
    return Images(NODE_IMAGE, ZOOKEEPER_IMAGE)


def compose(project: str, images: Images, *args: str, env: dict[str, str] | None = None, timeout_s: float = 300) -> str:
    """podman-compose on deploy/compose.yaml with the images' variables."""
    full_env = {**(env or podman_env()), **images.compose_env()}
    return run(["podman-compose", "-p", project, "-f", str(COMPOSE), *args], full_env, timeout_s)


def container(project: str, service: str) -> str:
    """podman-compose 1.0's container name for a service."""
    return f"{project}_{service}_1"


def cli_in(project: str, service: str, *args: str) -> list[str]:
    """`controller-svc ARGS` run inside a service's container."""
    return ["podman", "exec", container(project, service), "controller-svc", *args]


def create_topic(project: str, service: str, topic: str, partitions: int, replication_factor: int) -> list[str]:
    """CreateTopics from inside `service`'s container, the controller found through zk1."""
    return cli_in(
        project,
        service,
        "topics",
        "create",
        "--zookeeper",
        "zk1:2181",
        "--topic",
        topic,
        "--partitions",
        str(partitions),
        "--replication-factor",
        str(replication_factor),
    )


DEMO_PROJECT = "kcontroller-demo"


def run_container_demo(base: str = "local", wait_s: float = 180.0) -> int:
    """`controller-svc demo --containers`: build the images, start deploy/compose.yaml's cluster,
    create a topic from inside a controller container, show `describe`; the cluster stays up."""
    import time

    missing = missing_tools()
    if missing:
        print(f"error: {', '.join(missing)} not installed (`./dev setup` installs them)", file=sys.stderr)
        return 2
    env = podman_env()
    try:
        images = build_images(base, env)
        print(f"== starting deploy/compose.yaml as project {DEMO_PROJECT}", file=sys.stderr)
        compose(DEMO_PROJECT, images, "up", "-d", "--no-build", env=env)
        exec_describe = cli_in(DEMO_PROJECT, "controller-1", "describe")
        deadline = time.monotonic() + wait_s
        while True:
            shown = run([*exec_describe, "--zookeeper", "zk1:2181"], env, 30, check=False)
            if shown.count(":9092") == 3:
                break
            if time.monotonic() > deadline:
                raise ContainerError(f"the cluster was not up after {wait_s:.0f} s:\n{shown}")
            time.sleep(2)
        run(create_topic(DEMO_PROJECT, "controller-1", "demo", partitions=6, replication_factor=3), env, 60)
        time.sleep(3)
        print(run([*exec_describe, "--zookeeper", "zk1:2181"], env, 30))
    except ContainerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    compose_cmd = (
        f"CONTAINERS_CONF={env['CONTAINERS_CONF']} KCONTROLLER_IMAGE={images.node} "
        f"ZOOKEEPER_IMAGE={images.zookeeper} podman-compose -p {DEMO_PROJECT} -f {COMPOSE}"
    )
    print(f"The cluster runs as containers. Stop it with:\n  {compose_cmd} down -v", file=sys.stderr)
    return 0
