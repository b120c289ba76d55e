"""Security settings: ZooKeeper digest credentials, TLS files, secrets never shown."""

from __future__ import annotations

import pathlib

import pytest

from controller_svc.adapters.zk.client import digest_acl
from controller_svc.common import config as cfg
from controller_svc.common import tls
from controller_svc.common.zk_settings import ZkDigestAuth, digest_auth_from_config


def test_digest_id_is_zookeepers_sha1_base64() -> None:
    # echo -n kc:secret | openssl dgst -binary -sha1 | base64
    assert ZkDigestAuth("kc", "secret").digest_id == "kc:iu84DaF/EHddM26eOiMjIPVDCwY="
    assert "secret" not in repr(ZkDigestAuth("kc", "secret"))
    schemes = sorted((entry.id.scheme, entry.perms) for entry in digest_acl(ZkDigestAuth("kc", "secret")))
    assert schemes == [("digest", 31), ("world", 1)]  # all for us, read for anyone


def test_digest_credentials_from_config(tmp_path: pathlib.Path) -> None:
    assert digest_auth_from_config({}) == (None, False)
    password = tmp_path / "pw"
    password.write_text("from-file\n")
    auth, set_acl = digest_auth_from_config(
        {"zookeeper.auth.user": "kc", "zookeeper.auth.password.file": str(password), "zookeeper.set.acl": True}
    )
    assert auth == ZkDigestAuth("kc", "from-file") and set_acl
    with pytest.raises(ValueError, match=r"zookeeper\.auth\.user is empty"):
        digest_auth_from_config({"zookeeper.set.acl": True})
    with pytest.raises(ValueError, match="no password"):
        digest_auth_from_config({"zookeeper.auth.user": "kc"})
    with pytest.raises(ValueError, match=r"zookeeper\.auth\.password\.file"):
        digest_auth_from_config({"zookeeper.auth.user": "kc", "zookeeper.auth.password.file": str(tmp_path / "no")})


def test_secret_config_values_are_never_shown() -> None:
    key = next(k for k in cfg.CONTROLLER_KEYS if k.name == "zookeeper.auth.password")
    assert key.secret and key.shown("hunter2") == "<redacted>"
    loaded = cfg.load(cfg.CONTROLLER_KEYS, environ={"KCONTROLLER_ZOOKEEPER_AUTH_PASSWORD": "hunter2"})
    assert loaded["zookeeper.auth.password"] == "hunter2"


def test_tls_files_are_required_and_named(tmp_path: pathlib.Path) -> None:
    assert tls.load({"grpc.tls.enable": False}) is None
    with pytest.raises(tls.TlsConfigError, match=r"grpc\.tls\.ca\.file must be set"):
        tls.load({"grpc.tls.enable": True})
    with pytest.raises(tls.TlsConfigError, match=r"grpc\.tls\.cert\.file='.*missing\.pem'"):
        (tmp_path / "ca.pem").write_bytes(b"ca")
        tls.load(
            {
                "grpc.tls.enable": True,
                "grpc.tls.ca.file": str(tmp_path / "ca.pem"),
                "grpc.tls.cert.file": str(tmp_path / "missing.pem"),
                "grpc.tls.key.file": "x",
            }
        )
    assert tls.parse_identities(" controller-1, controller-2 ,") == frozenset({"controller-1", "controller-2"})
    assert tls.parse_identities("") is None
    files = tls.TlsFiles(b"ca", b"cert", b"very-secret-key")
    assert "very-secret-key" not in repr(files)
