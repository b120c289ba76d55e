"""The container artefacts checked without an engine: the Dockerfile passes hadolint, the image's
exact entrypoint serves (health check included) and stops on SIGTERM outside a container, and
the compose file names only commands and settings that exist. The image itself is built and the
compose cluster run in test_container_cluster.py."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
from typing import Any

import pytest
import yaml

from controller_svc.devtools import zookeeper_launcher
from tests.integration.harness import eventually, read_records

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "deploy" / "compose.yaml"
BIN = pathlib.Path(sys.executable).parent


def tool(name: str) -> str:
    found = shutil.which(name) or str(BIN / name)
    assert pathlib.Path(found).exists(), f"{name} is not installed (./dev setup installs it)"
    return found


def runtime_stage() -> dict[str, Any]:
    """ENV, HEALTHCHECK, ENTRYPOINT and CMD of the Dockerfile's last stage (exec forms)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    last = text[text.rindex("\nFROM ") :]
    result: dict[str, Any] = {"env": {}}
    for line in last.splitlines():
        instruction, _, rest = line.strip().partition(" ")
        if instruction == "ENV":
            result["env"].update(dict(re.findall(r"(\w+)=(\S+)", rest)))
        elif instruction == "HEALTHCHECK":
            result["healthcheck"] = json.loads(rest[rest.index("CMD") + 3 :].strip())
        elif instruction in ("ENTRYPOINT", "CMD", "USER"):
            result[instruction.lower()] = json.loads(rest) if instruction != "USER" else rest
    return result


def test_dockerfile_passes_hadolint() -> None:
    result = subprocess.run([tool("hadolint"), str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_image_is_non_root_with_exec_form_entrypoint_and_health_check() -> None:
    stage = runtime_stage()
    assert stage["user"] not in ("", "0", "root")
    assert isinstance(stage["entrypoint"], list) and stage["entrypoint"] == ["controller-svc"]
    assert stage["healthcheck"] == ["controller-svc", "health"]
    assert DOCKERFILE.read_text().count("\nFROM ") + DOCKERFILE.read_text().startswith("FROM ") >= 2  # multi-stage


async def test_image_entrypoints_serve_and_sigterm_runs_controlled_shutdown(
    chroot_connect: str, tmp_path: pathlib.Path
) -> None:
    """The image's default command (a controller) and compose's broker-1 service, each with the
    image's HEALTHCHECK. Only addresses differ from the containers: tests share one host."""
    stage = runtime_stage()
    compose = yaml.safe_load(COMPOSE.read_text())["services"]
    logs = tmp_path / "logs"

    def node_env(service_env: dict[str, Any]) -> tuple[dict[str, str], str]:
        grpc_port, metrics_port = zookeeper_launcher.free_port(), zookeeper_launcher.free_port()
        env = {
            **os.environ,
            **stage["env"],
            **{k: str(v) for k, v in service_env.items()},
            "KCONTROLLER_GRPC_LISTEN": f"127.0.0.1:{grpc_port}",
            "KCONTROLLER_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
            "KCONTROLLER_HEALTH_ADDRESS": f"127.0.0.1:{grpc_port}",
            "KCONTROLLER_ZOOKEEPER_CONNECT": chroot_connect,
            "KCONTROLLER_STATE_CHANGE_LOG_DIR": str(logs),
            "KCONTROLLER_ZOOKEEPER_SESSION_TIMEOUT_MS": "6000",
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        return env, f"127.0.0.1:{grpc_port}"

    async def start(argv: list[str], env: dict[str, str]) -> asyncio.subprocess.Process:
        # The services advertise their container hostnames; here the loopback address.
        return await asyncio.create_subprocess_exec(
            *argv,
            "--override",
            "grpc.advertised.host=127.0.0.1",
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )

    async def healthy(env: dict[str, str]) -> bool:
        check = await asyncio.create_subprocess_exec(
            *stage["healthcheck"], env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        return await check.wait() == 0

    controller_env, _ = node_env({})
    broker_service = compose["broker-1"]
    broker_env, _ = node_env(broker_service["environment"])
    controller = await start([*stage["entrypoint"], *stage["cmd"]], controller_env)
    broker: asyncio.subprocess.Process | None = None
    try:
        await eventually(lambda: healthy(controller_env), 60, what="the controller's HEALTHCHECK to pass")
        assert not await healthy(broker_env)  # nothing listens there yet: the check fails
        broker = await start([*broker_service["entrypoint"], *broker_service["command"]], broker_env)
        await eventually(lambda: healthy(broker_env), 60, what="the broker's HEALTHCHECK to pass")

        async def broker_got_metadata() -> bool:
            return any(
                r["kind"] == "request.received" and r["api"] == "UpdateMetadata" and r["result"] == "applied"
                for r in read_records(logs, "broker-1")
            )

        await eventually(broker_got_metadata, 30, what="the controller's UpdateMetadata at the broker")
        # SIGTERM reaches the broker itself (exec form): it runs a controlled shutdown and exits 0.
        broker.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(broker.wait(), 45) == 0
        kinds = [r["kind"] for r in read_records(logs, "broker-1")]
        # Requests in flight at deregistration may still be recorded after broker.shutdown.
        assert "broker.controlled_shutdown_succeeded" in kinds and "broker.shutdown" in kinds, kinds[-10:]
        assert kinds.index("broker.controlled_shutdown_succeeded") < kinds.index("broker.shutdown")
        controller.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(controller.wait(), 30) == 0
        assert "controller.resigned" in [r["kind"] for r in read_records(logs, "controller-1")]
    finally:
        for process in (controller, broker):
            if process is not None and process.returncode is None:
                process.kill()
                await process.wait()


def test_compose_file_has_the_cluster_and_only_existing_commands() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services: dict[str, Any] = compose["services"]
    # The images are variables with the registry's images as defaults (no registry: `controller-svc
    # image build` sets them).
    zookeepers = [name for name, s in services.items() if s.get("image") == "${ZOOKEEPER_IMAGE:-zookeeper:3.8}"]
    controllers = [name for name in services if name.startswith("controller-")]
    brokers = [name for name in services if name.startswith("broker-")]
    assert (len(zookeepers), len(controllers), len(brokers)) == (3, 3, 3)
    entrypoint = runtime_stage()["entrypoint"]
    for name in controllers + brokers:
        service = services[name]
        argv = [*(service.get("entrypoint") or entrypoint), *service["command"]]
        # The exact command of the service, validated by the program itself.
        result = subprocess.run(
            [str(BIN / argv[0]), *argv[1:], "--check-config"],
            env={**os.environ, **{k: str(v) for k, v in service["environment"].items()}},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, f"{name}: {result.stdout}{result.stderr}"
        assert "configuration OK" in result.stdout
        assert service["environment"]["KCONTROLLER_ZOOKEEPER_CONNECT"] == "zk1:2181,zk2:2181,zk3:2181"
    for name in brokers:
        # Controlled shutdown (30 s by default) must finish before Docker's SIGKILL.
        grace = int(str(services[name]["stop_grace_period"]).rstrip("s"))
        assert grace > 30, name


@pytest.mark.parametrize("bad", ["zookeeper.session.timeout.ms=-1", "grpc.listen=nowhere", "no.such.key=1"])
def test_bad_configuration_names_the_key_and_exits_2(bad: str) -> None:
    result = subprocess.run(
        [str(BIN / "controller-svc"), "controller", "--override", bad, "--check-config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert bad.split("=")[0] in result.stderr


def test_demo_base_without_containers_is_refused() -> None:
    result = subprocess.run(
        [str(BIN / "controller-svc"), "demo", "--base", "registry"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "--base" in result.stderr and "--containers" in result.stderr
