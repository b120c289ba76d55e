"""What the analyses read from the events table: a role's records through a filter Parquet can use."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

pytestmark = pytest.mark.pipeline

NODES = ("controller-1", "controller-2", "broker-1", "broker-2", "controllers-3", "controller", "broker-x", "-1")
RECORDS_PER_NODE = 40


def _scanned_rows(frame: Any) -> int:
    """Rows the Parquet scan of `frame` handed on after skipping files by their statistics."""
    frame.collect()
    plan = frame._jdf.queryExecution().executedPlan()
    if "Adaptive" in plan.getClass().getName():
        plan = plan.executedPlan()
    scans = [leaf for leaf in _iterate(plan.collectLeaves()) if "FileSourceScanExec" in leaf.getClass().getName()]
    assert len(scans) == 1, [s.toString() for s in scans]
    return int(scans[0].metrics().apply("numOutputRows").value())


def _iterate(java_seq: Any) -> list[Any]:
    items, it = [], java_seq.iterator()
    while it.hasNext():
        items.append(it.next())
    return items


@pytest.mark.parametrize("role", ["controller", "broker"])
def test_of_role_keeps_the_derived_role_and_skips_other_nodes_files(
    spark: Any, tmp_path: pathlib.Path, role: str
) -> None:
    from pyspark.sql import functions as F

    from controller_svc.analytics import ingest
    from controller_svc.analytics.job import SINGLE_CLUSTER
    from controller_svc.analytics.timelines import of_role

    logs = tmp_path / "logs"
    logs.mkdir()
    for node in NODES:
        lines = [json.dumps({"ts": 1000 + i, "node": node, "kind": "node.alive"}) for i in range(RECORDS_PER_NODE)]
        (logs / f"{node}.state-change.jsonl").write_text("\n".join(lines) + "\n")
    # One task, and so one Parquet file, per log file: as with logs of real size.
    spark.conf.set("spark.sql.files.openCostInBytes", str(1 << 30))
    try:
        ingest.ingest(spark, [str(logs)], str(tmp_path / "out"))
    finally:
        spark.conf.unset("spark.sql.files.openCostInBytes")
    events = ingest.events(spark, str(tmp_path / "out"), SINGLE_CLUSTER)

    got = sorted(row["node"] for row in of_role(events, role).select("node").distinct().collect())
    derived = sorted(
        row["node"] for row in events.filter(F.col("node_role") == role).select("node").distinct().collect()
    )
    assert got == derived == [n for n in ("controller-1", "controller-2", "broker-1", "broker-2") if n.startswith(role)]
    # The prefix reaches Parquet: only the files of nodes named `role-...` are read
    # ("broker-x" is read and then dropped by the derived role: it has no numeric id).
    read_nodes = [n for n in NODES if n.startswith(f"{role}-")]
    assert _scanned_rows(of_role(events, role).select("node")) == RECORDS_PER_NODE * len(read_nodes)
    assert _scanned_rows(events.filter(F.col("node_role") == role).select("node")) == RECORDS_PER_NODE * len(NODES)
