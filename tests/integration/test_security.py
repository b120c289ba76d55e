"""Mutual TLS on both gRPC services: a whole cluster with it on, and the callers it refuses."""

from __future__ import annotations

import json
import pathlib
import signal
import subprocess
from typing import Any

import aiozk
import grpc
import pytest

from controller_svc.common import tls
from controller_svc.common.zk_settings import parse_connect_string
from tests.integration.harness import brokers_agree_with_controller, create_topic, eventually, partitions


def openssl(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def issue(directory: pathlib.Path, ca: str, name: str) -> None:
    """A certificate for `name` (CN and DNS name; valid for 127.0.0.1) signed by `ca`."""
    (directory / f"{name}.ext").write_text(
        f"subjectAltName=DNS:{name},IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n"
    )
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        "-subj",
        f"/CN={name}",
        cwd=directory,
    )
    openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        f"{ca}.pem",
        "-CAkey",
        f"{ca}.key",
        "-CAcreateserial",
        "-out",
        f"{name}.pem",
        "-days",
        "2",
        "-extfile",
        f"{name}.ext",
        cwd=directory,
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    directory = tmp_path_factory.mktemp("pki")
    for ca in ("ca", "other-ca"):
        openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{ca}.key",
            "-out",
            f"{ca}.pem",
            "-days",
            "2",
            "-subj",
            f"/CN={ca}",
            cwd=directory,
        )
    for name in ("controller", "broker", "admin", "intruder"):
        issue(directory, "ca", name)
    issue(directory, "other-ca", "stranger")
    return directory


def files(pki: pathlib.Path, name: str, ca: str = "ca") -> tls.TlsFiles:
    return tls.TlsFiles(
        ca=(pki / f"{ca}.pem").read_bytes(),
        cert=(pki / f"{name}.pem").read_bytes(),
        key=(pki / f"{name}.key").read_bytes(),
    )


async def update_metadata(address: str, credentials: tls.TlsFiles | None) -> Any:
    from kcontroller.v1 import broker_pb2, broker_pb2_grpc

    async with tls.aio_channel(address, credentials) as channel:
        return await broker_pb2_grpc.BrokerControlStub(channel).UpdateMetadata(
            broker_pb2.UpdateMetadataRequest(controller_id=1, controller_epoch=99, broker_epoch=0), timeout=5
        )


async def create_topics(address: str, credentials: tls.TlsFiles | None) -> Any:
    from kcontroller.v1 import controller_pb2, controller_pb2_grpc

    async with tls.aio_channel(address, credentials) as channel:
        return await controller_pb2_grpc.ControllerStub(channel).CreateTopics(
            controller_pb2.CreateTopicsRequest(topics=[controller_pb2.CreatableTopic(name="x", num_partitions=1)]),
            timeout=5,
        )


async def test_cluster_with_mutual_tls_identities_and_zookeeper_acls(
    cluster_factory: Any, pki: pathlib.Path, monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    # The test process (launcher probes, admin client, health checks) is the admin.
    monkeypatch.setenv("KCONTROLLER_GRPC_TLS_ENABLE", "true")
    monkeypatch.setenv("KCONTROLLER_GRPC_TLS_CA_FILE", str(pki / "ca.pem"))
    monkeypatch.setenv("KCONTROLLER_GRPC_TLS_CERT_FILE", str(pki / "admin.pem"))
    monkeypatch.setenv("KCONTROLLER_GRPC_TLS_KEY_FILE", str(pki / "admin.key"))

    # ZooKeeper: every process authenticates with the cluster's digest identity (the password
    # from a file) and creates its znodes readable by anyone, writable only by that identity.
    password_file = tmp_path / "zk-password"
    password_file.write_text("s3cret-zk-password\n")
    zookeeper_security = {
        "zookeeper.set.acl": "true",
        "zookeeper.auth.user": "kcontroller",
        "zookeeper.auth.password.file": str(password_file),
    }

    def identity(name: str) -> dict[str, str]:
        return {
            "grpc.tls.cert.file": str(pki / f"{name}.pem"),
            "grpc.tls.key.file": str(pki / f"{name}.key"),
            **zookeeper_security,
        }

    cluster = await cluster_factory(
        controllers=2,
        brokers=2,
        controller_overrides={
            **identity("controller"),
            "controller.admin.identities": "admin",
            "controller.broker.identities": "broker",
        },
        broker_overrides={**identity("broker"), "broker.controller.identities": "controller,admin"},
    )
    snap = await cluster.converged()
    assert (await create_topic(cluster, "secure", partitions=2, replication_factor=2)).error_code == 0
    await eventually(lambda: brokers_agree_with_controller(cluster, "secure", [1, 2]), 30, what="secure online")

    broker = cluster.broker(1)["grpc"]
    controller = cluster.controller(snap.controller_id)["grpc"]
    # No client certificate, or one from another CA: the handshake fails.
    for credentials in (None, files(pki, "stranger", ca="other-ca")):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await update_metadata(broker, credentials)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    # A certificate of the cluster's CA, but not a controller's: refused by the broker.
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await update_metadata(broker, files(pki, "intruder"))
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # A broker's certificate may not use the controller's admin RPCs.
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await create_topics(controller, files(pki, "broker"))
    assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # The controller's own identity is accepted by the broker (fenced by epoch, not refused).
    response = await update_metadata(broker, files(pki, "controller"))
    assert response.error_code in (11, 77)

    # Controlled shutdown over mutual TLS with the broker's identity: its leaderships move first.
    before = await partitions(cluster, "secure")
    assert any(p.leader == 2 for p in before.values())  # round-robin: each broker leads one partition
    cluster.signal(cluster.broker(2), signal.SIGTERM)

    async def moved() -> bool:
        return all(p.leader == 1 for p in (await partitions(cluster, "secure")).values())

    await eventually(moved, 30, what="broker 2's leaderships to move before it exits")

    async def shut_down_cleanly() -> bool:
        return any(r["kind"] == "broker.controlled_shutdown_succeeded" for r in cluster.records("broker-2"))

    await eventually(shut_down_cleanly, 30, what="broker 2's controlled shutdown record")

    # An unauthenticated ZooKeeper client reads everything and changes nothing.
    servers, chroot = parse_connect_string(cluster.zookeeper)
    outsider = aiozk.ZKClient(servers, chroot=chroot)
    await outsider.start()
    try:
        assert json.loads(await outsider.get_data("/controller"))["brokerid"] == snap.controller_id
        acl = await outsider.get_acl("/controller")
        assert {entry.id.scheme for entry in acl} == {"digest", "world"}
        for path in ("/controller_epoch", "/brokers/ids/1", "/brokers/topics/secure/partitions/0/state"):
            with pytest.raises(aiozk.exc.NoAuth):
                await outsider.set_data(path, b"{}")
        for path in ("/controller", "/brokers/ids/1"):
            with pytest.raises(aiozk.exc.NoAuth):
                await outsider.delete(path)
        with pytest.raises(aiozk.exc.NoAuth):
            await outsider.create("/brokers/ids/9", b"{}", ephemeral=True)
    finally:
        await outsider.close()
    # The cluster itself still writes: broker 2 comes back and is registered again.
    cluster.start_node(cluster.broker(2))
    await eventually(lambda: brokers_agree_with_controller(cluster, "secure", [1, 2]), 60, what="broker 2 back")
