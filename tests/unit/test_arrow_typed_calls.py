"""The fast path's Arrow calls take typed values: pyarrow infers the type of a Python number or
string given to a compute function, and its inference tries to import dateutil, a search of
every sys.path entry on each call where dateutil is not installed (as here): ~0.1 ms a call,
a fifth of the tasks' time on small chunks."""

from __future__ import annotations

import json
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from controller_svc.analytics import arrow_ingest


def _role_change(ts: int, partition: int, role: str, leader_epoch: int) -> str:
    return json.dumps(
        {
            "ts": ts,
            "node": "broker-1",
            "kind": "partition.role_changed",
            "topic": "t",
            "partition": partition,
            "role": role,
            "leader": 1,
            "leader_epoch": leader_epoch,
            "isr": [1, 2],
            "controller_epoch": 1,
        }
    )


class _Lookups:
    """Counts what the import system is asked to find (a finder that finds nothing)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        self.names.append(name)


@pytest.fixture
def lookups() -> Iterator[_Lookups]:
    finder = _Lookups()
    sys.meta_path.insert(0, finder)
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)


def test_a_chunk_is_ingested_without_an_import_lookup(tmp_path: pathlib.Path, lookups: _Lookups) -> None:
    lines = [_role_change(1000 + i, i % 3, ("leader", "follower", "deleted")[i % 3], i // 3) for i in range(30)]
    lines += [_role_change(2000, 0, "leader", 0)]  # a lower epoch: a candidate of the check
    lines += [json.dumps({"ts": 3000 + i, "node": "broker-1", "kind": "node.alive"}) for i in range(5)]
    log = tmp_path / "broker-1.state-change.jsonl"
    log.write_text("\n".join(lines) + "\n")
    events = tmp_path / "events"
    events.mkdir()
    (chunk,) = arrow_ingest.chunks_of(0, str(log))
    arrow_ingest.ingest_chunk(chunk, str(events), check_leader_epochs=True, index_nodes=True)  # warm: imports
    del lookups.names[:]
    outcome = arrow_ingest.ingest_chunk(chunk, str(events), check_leader_epochs=True, index_nodes=True)
    assert outcome.rejected is None and outcome.rows == len(lines)
    assert outcome.checked_nodes == ("broker-1",)
    assert (events / arrow_ingest.CHECKS_DIR).is_dir()  # the check ran and found its candidate
    assert lookups.names == []
