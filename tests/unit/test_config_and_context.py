from __future__ import annotations

import pathlib

import pytest

from controller_svc.common import config as cfg
from controller_svc.common.model import BrokerInfo, EndPoint
from controller_svc.common.zk_settings import parse_connect_string
from controller_svc.core.context import diff_brokers


def test_defaults_file_environment_and_overrides(tmp_path: pathlib.Path) -> None:
    file = tmp_path / "c.properties"
    file.write_text("# comment\nzookeeper.connect=zk1:2181,zk2:2181/kafka\ncontroller.id = 4\n")
    config = cfg.load(
        cfg.CONTROLLER_KEYS,
        str(file),
        {"controller.id": "5"},
        environ={"KCONTROLLER_ZOOKEEPER_SESSION_TIMEOUT_MS": "9000"},
    )
    assert config["zookeeper.connect"] == "zk1:2181,zk2:2181/kafka"
    assert config.int("controller.id") == 5
    assert config.int("zookeeper.session.timeout.ms") == 9000
    assert config.int("controller.socket.timeout.ms") == 30000


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"zookeeper.session.timeout.ms": "soon"}, "zookeeper.session.timeout.ms"),
        ({"zookeeper.session.timeout.ms": "0"}, "must be > 0"),
        ({"grpc.listen": "nowhere"}, "grpc.listen"),
        ({"zookeeper.connect": "a:b"}, "zookeeper.connect"),
        ({"no.such.key": "1"}, "unknown config 'no.such.key'"),
    ],
)
def test_bad_config_names_the_key(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(cfg.ConfigError, match=message.replace(".", r"\.")):
        cfg.load(cfg.CONTROLLER_KEYS, None, overrides, environ={})


def test_bad_properties_file(tmp_path: pathlib.Path) -> None:
    file = tmp_path / "bad.properties"
    file.write_text("just words\n")
    with pytest.raises(cfg.ConfigError, match=r"bad\.properties:1"):
        cfg.load(cfg.CONTROLLER_KEYS, str(file), environ={})
    with pytest.raises(cfg.ConfigError, match="cannot read"):
        cfg.load(cfg.CONTROLLER_KEYS, str(tmp_path / "missing"), environ={})


def test_connect_string() -> None:
    assert parse_connect_string("a:1,b:2/x/y") == ("a:1,b:2", "/x/y")
    assert parse_connect_string("a:1") == ("a:1", None)
    for bad in ("", "/chroot", "a", "a:x"):
        with pytest.raises(ValueError):
            parse_connect_string(bad)


def _broker(broker_id: int, epoch: int, port: int = 9092) -> BrokerInfo:
    return BrokerInfo(broker_id, (EndPoint("PLAINTEXT", "h", port, "PLAINTEXT"),), None, epoch)


def test_broker_diff_detects_new_dead_bounced_and_moved() -> None:
    known = {1: _broker(1, 10), 2: _broker(2, 20), 3: _broker(3, 30), 4: _broker(4, 40)}
    current = {1: _broker(1, 10), 2: _broker(2, 25), 4: _broker(4, 40, port=9999), 5: _broker(5, 50)}
    diff = diff_brokers(known, current)
    assert diff.new == {5} and diff.dead == {3} and diff.bounced == {2} and diff.changed_endpoints == {4}
    assert not diff_brokers(known, dict(known))


def test_chaos_refuses_a_directory_that_holds_a_cluster(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Bad input to `controller-svc chaos`: a clear error and exit 2, nothing started."""
    from controller_svc.cli.main import main

    (tmp_path / "cluster.json").write_text("{}")
    assert main(["chaos", "--dir", str(tmp_path), "--duration-s", "1"]) == 2
    assert "cluster.json exists" in capsys.readouterr().err


def test_chaos_refuses_a_directory_that_holds_a_previous_run(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Its logs would be appended to and judged with the new run's: exit 2, nothing started."""
    from controller_svc.cli.main import main

    (tmp_path / "cluster.json.down").write_text("{}")
    (tmp_path / "logs").mkdir()
    assert main(["chaos", "--dir", str(tmp_path), "--duration-s", "1"]) == 2
    assert "holds a previous run (logs)" in capsys.readouterr().err
