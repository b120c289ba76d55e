"""The state-change log's bulk form writes what one `record` per row writes (DESIGN.md contract
5: the analytics read these lines)."""

from __future__ import annotations

import pathlib
from typing import Any

import orjson
import pytest

from controller_svc.common.state_change_log import StateChangeLog

ROWS: list[dict[str, Any]] = [
    {"topic": "t", "partition": 0, "role": "leader", "leader": 1, "leader_epoch": 3, "isr": [1, 2], "epoch": 2},
    {"topic": 'é"quoted"', "partition": 7, "isr": [], "unclean": False, "note": None},
    {},
    {"when": pathlib.Path("/x")},  # not JSON: written with str(), as `record` does
]


def _lines(path: pathlib.Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_record_many_writes_what_record_writes(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.time", lambda: 1700000000.123)
    one_by_one = StateChangeLog(tmp_path / "a", "broker-1")
    for row in ROWS:
        one_by_one.record("partition.role_changed", **row)
    one_by_one.close()
    bulk = StateChangeLog(tmp_path / "b", "broker-1")
    bulk.record_many("partition.role_changed", ROWS)
    bulk.record_many("partition.role_changed", [])
    bulk.close()
    written_one_by_one = (tmp_path / "a" / "broker-1.state-change.jsonl").read_bytes()
    written_in_bulk = (tmp_path / "b" / "broker-1.state-change.jsonl").read_bytes()
    assert written_in_bulk == written_one_by_one
    records = _lines(tmp_path / "b" / "broker-1.state-change.jsonl")
    assert [list(r)[:3] for r in records] == [["ts", "node", "kind"]] * len(ROWS)
    assert records[0]["ts"] == 1700000000123 and records[1]["topic"] == 'é"quoted"' and records[3]["when"] == "/x"
