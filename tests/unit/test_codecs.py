from __future__ import annotations

import json
import random

import orjson
import pytest

from controller_svc.adapters.zk import codecs
from controller_svc.common.errors import CorruptZnodeError
from controller_svc.common.model import BrokerInfo, EndPoint, LeaderIsrAndControllerEpoch, TopicPartition


def test_controller_znode_is_kafkas_json() -> None:
    assert codecs.encode_controller(1, 1620000000000) == b'{"version":1,"brokerid":1,"timestamp":"1620000000000"}'
    assert codecs.decode_controller(b'{"version":1,"brokerid":3,"timestamp":"5"}').broker_id == 3


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"garbage",
        b"[1]",
        b'{"version":1}',
        b'{"brokerid":"1"}',
        b'{"brokerid":true}',
        b'{"brokerid":1,"timestamp":"x"}',
        b"\xff\xfe",
    ],
)
def test_corrupt_controller_znode(data: bytes) -> None:
    with pytest.raises(CorruptZnodeError, match="/controller"):
        codecs.decode_controller(data)


def test_controller_epoch() -> None:
    assert codecs.encode_controller_epoch(12) == b"12"
    assert codecs.decode_controller_epoch(b"12") == 12
    for bad in (b"", b"seven", b"1.5", b"-1"):
        with pytest.raises(CorruptZnodeError):
            codecs.decode_controller_epoch(bad)


def test_broker_registration_version_5_round_trip() -> None:
    info = BrokerInfo(3, (EndPoint("PLAINTEXT", "h", 9092, "PLAINTEXT"),), None, epoch=-1)
    data = codecs.encode_broker_registration(info, 1620000000000)
    assert data == (
        b'{"version":5,"host":"h","port":9092,"jmx_port":-1,"timestamp":"1620000000000",'
        b'"endpoints":["PLAINTEXT://h:9092"],"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"rack":null,"features":{}}'
    )
    decoded = codecs.decode_broker_registration(3, data, broker_epoch=77)
    assert decoded == BrokerInfo(3, info.endpoints, None, epoch=77)


def test_broker_registration_older_versions_and_listeners() -> None:
    v1 = codecs.decode_broker_registration(1, b'{"version":1,"host":"a","port":1}', 5)
    assert v1.endpoints == (EndPoint("PLAINTEXT", "a", 1, "PLAINTEXT"),)
    v4 = codecs.decode_broker_registration(
        2,
        json.dumps(
            {
                "version": 4,
                "endpoints": ["CLIENT://b:9093", "CTRL://[::1]:9094"],
                "listener_security_protocol_map": {"CLIENT": "SSL", "CTRL": "PLAINTEXT"},
                "rack": "r1",
            }
        ).encode(),
        6,
    )
    assert v4.rack == "r1"
    assert v4.control_endpoint() == EndPoint("CTRL", "::1", 9094, "PLAINTEXT")
    with pytest.raises(CorruptZnodeError):
        codecs.decode_broker_registration(2, b'{"version":4,"endpoints":["nonsense"]}', 1)


def test_partition_state_round_trip() -> None:
    state = LeaderIsrAndControllerEpoch(leader=1, leader_epoch=4, isr=(1, 2), zk_version=9, controller_epoch=2)
    data = codecs.encode_partition_state(state)
    assert data == b'{"controller_epoch":2,"leader":1,"version":1,"leader_epoch":4,"isr":[1,2]}'
    assert codecs.decode_partition_state("/p", data, 9) == state
    offline = LeaderIsrAndControllerEpoch(leader=-1, leader_epoch=2147483647, isr=(), zk_version=0, controller_epoch=7)
    assert codecs.encode_partition_state(offline) == (
        b'{"controller_epoch":7,"leader":-1,"version":1,"leader_epoch":2147483647,"isr":[]}'
    )
    with pytest.raises(CorruptZnodeError):
        codecs.decode_partition_state("/p", b'{"leader":1}', 0)


def test_states_decoded_a_batch_at_a_time_equal_states_decoded_one_by_one() -> None:
    rng = random.Random(5)
    states = [
        LeaderIsrAndControllerEpoch(
            rng.randint(-1, 9),
            rng.randint(0, 2**31 - 1),
            tuple(rng.sample(range(1, 10), rng.randint(0, 4))),
            rng.randint(0, 50),
            rng.randint(1, 40),
        )
        for _ in range(300)
    ]
    datas = [codecs.encode_partition_state(s) for s in states]
    # Kafka's older writers put the fields in another order; a field more is ignored by both.
    datas[7] = b'{"isr":[3,1],"leader_epoch":2,"version":1,"leader":3,"controller_epoch":5,"extra":[1.5]}'
    versions = [s.zk_version for s in states]
    one_by_one = [codecs.decode_partition_state("/p", d, v) for d, v in zip(datas, versions, strict=True)]
    assert codecs.decode_partition_states(datas, versions) == one_by_one
    assert one_by_one[:7] + one_by_one[8:] == states[:7] + states[8:]
    assert codecs.decode_partition_states([], []) == []


@pytest.mark.parametrize(
    "corrupt",
    [
        b"{not json",
        b"",
        b"[]",
        b'"state"',
        b"1",
        b"null",
        b'{"leader":1}',
        b'{"controller_epoch":1,"leader":true,"version":1,"leader_epoch":0,"isr":[1]}',
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0.0,"isr":[1]}',
        b'{"controller_epoch":"1","leader":1,"version":1,"leader_epoch":0,"isr":[1]}',
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,true]}',
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2.0]}',
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[[1]]}',
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":{"1":1}}',
        b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":null}',
    ],
)
def test_a_batch_with_any_corrupt_state_is_left_to_the_one_by_one_decoder(corrupt: bytes) -> None:
    good = codecs.encode_partition_state(LeaderIsrAndControllerEpoch(1, 0, (1, 2), 0, 1))
    assert codecs.decode_partition_states([good, corrupt, good], [0, 0, 0]) is None
    assert codecs.decode_partition_states([good, good], [0, 0]) is not None
    with pytest.raises(CorruptZnodeError):
        codecs.decode_partition_state("/p", corrupt, 0)


def test_equal_replica_lists_of_a_topic_share_one_tuple() -> None:
    rng = random.Random(3)
    partitions = {str(p): rng.choice([[1, 2, 3], [2, 3, 1], [3, 1, 2], [4]]) for p in range(200)}
    znode = codecs.decode_topic("/t", json.dumps({"version": 2, "partitions": partitions}).encode())
    assert znode.partitions == {int(p): tuple(r) for p, r in partitions.items()}
    assert list(znode.partitions) == list(range(200))
    by_value: dict[tuple[int, ...], int] = {}
    for replicas in znode.partitions.values():
        assert by_value.setdefault(replicas, id(replicas)) == id(replicas)
    assert len(by_value) == 4


@pytest.mark.parametrize("key", [" 1", "+1", "1_0", "-0", "01", "1.0", "", "0x1"])
def test_a_partition_id_in_any_but_the_canonical_spelling_is_corrupt(key: str) -> None:
    data = json.dumps({"version": 2, "partitions": {"0": [1], key: [2]}}).encode()
    with pytest.raises(CorruptZnodeError):
        codecs.decode_topic("/t", data)


@pytest.mark.parametrize("replicas", [[1, True], [1.0], ["1"], [[1]], None, {"1": 1}, 1])
def test_a_replica_list_of_anything_but_integers_is_corrupt(replicas: object) -> None:
    data = json.dumps({"version": 2, "partitions": {"0": [1], "1": replicas}}).encode()
    with pytest.raises(CorruptZnodeError):
        codecs.decode_topic("/t", data)


@pytest.mark.parametrize(
    ("data", "partitions"),
    [
        (b'{"version":1,"partitions":{"0":[1,2],"1":[2,3]}}', {0: (1, 2), 1: (2, 3)}),
        (b'{"version":2,"partitions":{"0":[1]},"adding_replicas":{},"removing_replicas":{}}', {0: (1,)}),
        (
            b'{"version":3,"topic_id":"abc","partitions":{"0":[1]},"adding_replicas":{"0":[1]},"removing_replicas":{}}',
            {0: (1,)},
        ),
    ],
)
def test_topic_versions_1_to_3(data: bytes, partitions: dict[int, tuple[int, ...]]) -> None:
    assert codecs.decode_topic("/brokers/topics/t", data).partitions == partitions


@pytest.mark.parametrize(
    "data",
    [
        b"{",
        b'{"partitions":{"-1":[1]}}',
        b'{"partitions":{"x":[1]}}',
        b'{"partitions":{"0":["a"]}}',
        b'{"partitions":[1]}',
    ],
)
def test_corrupt_topic(data: bytes) -> None:
    with pytest.raises(CorruptZnodeError):
        codecs.decode_topic("/brokers/topics/t", data)


def test_admin_requests_and_notifications_have_their_kafka_shapes() -> None:
    plan = {TopicPartition("t", 1): (3, 1), TopicPartition("t", 0): (2,)}
    data = codecs.encode_reassignment_plan(plan)
    assert json.loads(data) == {
        "version": 1,
        "partitions": [
            {"topic": "t", "partition": 0, "replicas": [2]},
            {"topic": "t", "partition": 1, "replicas": [3, 1]},
        ],
    }
    good, bad = codecs.decode_reassignment_plan(data)
    assert dict(good) == plan and bad == []
    good, bad = codecs.decode_reassignment_plan(b'{"partitions":[{"topic":"t","partition":"0","replicas":[1]}]}')
    assert good == [] and len(bad) == 1
    election = b'{"version":1,"partitions":[{"topic":"t","partition":2}]}'
    assert codecs.decode_preferred_election("/p", election) == [TopicPartition("t", 2)]
    for malformed in (b"nope", b'{"partitions":{}}', b'{"partitions":[{"topic":1,"partition":2}]}'):
        with pytest.raises(CorruptZnodeError):
            codecs.decode_preferred_election("/p", malformed)
    assert json.loads(codecs.encode_topic_config({"a": "b"})) == {"version": 1, "config": {"a": "b"}}
    assert json.loads(codecs.encode_isr_change_notification([TopicPartition("t", 0)])) == {
        "version": 1,
        "partitions": [{"topic": "t", "partition": 0}],
    }
    assert json.loads(codecs.encode_log_dir_event(4)) == {"version": 1, "broker": 4, "event": 1}
    assert codecs.decode_notification(b'{"version":2,"entity_path":"topics/t"}') == {
        "version": 2,
        "entity_path": "topics/t",
    }
    assert codecs.decode_notification(b"[1]") is None and codecs.decode_notification(b"\xff") is None


def test_partition_states_are_encoded_as_json_of_the_fields_in_kafkas_order() -> None:
    """The formatted layout against orjson's encoding of the fields in Kafka's order, on
    negative, zero, large and 32-bit-edge values and ISRs of 0 to 6 members."""
    rng = random.Random(11)
    for _ in range(5000):
        state = LeaderIsrAndControllerEpoch(
            rng.choice([-1, 0, 1, 127, 128, 2**31 - 1, rng.randint(-5, 10**6)]),
            rng.choice([0, 1, 2**31 - 1, rng.randint(0, 10**9)]),
            tuple(rng.sample(range(-1, 3000), rng.randint(0, 6))),
            rng.randint(0, 9),
            rng.choice([0, 1, 2**31 - 1, rng.randint(1, 10**6)]),
        )
        fields = {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": 1,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        }
        assert codecs.encode_partition_state(state) == orjson.dumps(fields)
        assert codecs.decode_partition_state("/p", codecs.encode_partition_state(state), 3) == state._replace(
            zk_version=3
        )
