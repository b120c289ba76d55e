"""The partition timelines' plans: one shuffle and one sort of the rows, however many windows run
over them (an order-by expression in a window spec made Spark sort again for each window)."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import pytest

from tests.pipeline import scenarios

pytestmark = pytest.mark.pipeline


def _children(node: Any) -> list[Any]:
    items, it = [], node.children().iterator()
    while it.hasNext():
        items.append(it.next())
    return items


def timeline_sorts(frame: Any) -> int:
    """Sorts on the path from the plan's last window down to the timeline's input: its
    shuffle, or the union or join of its sources. Planned without adaptive execution, whose
    plan gets its sorts and shuffles only as it runs."""
    spark = frame.sparkSession
    adaptive = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        node = frame._jdf.queryExecution().executedPlan()
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", adaptive)
    queue = [node]
    while "Window" not in queue[0].getClass().getSimpleName():
        queue = queue[1:] + _children(queue[0])
    node, sorts = queue[0], 0
    while "Exchange" not in node.getClass().getSimpleName() and len(_children(node)) == 1:
        sorts += "Sort" in node.getClass().getSimpleName()
        node = _children(node)[0]
    return sorts


@pytest.fixture(scope="module")
def events(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from controller_svc.analytics import ingest
    from controller_svc.analytics.job import SINGLE_CLUSTER

    base: pathlib.Path = tmp_path_factory.mktemp("plans")
    scenarios.overlapping_losses(base / "logs")
    ingest.ingest(spark, [str(base / "logs")], str(base / "out"))
    return ingest.events(spark, str(base / "out"), SINGLE_CLUSTER)


def _offline(events: Any) -> Any:
    from controller_svc.analytics import timelines

    held = timelines.HeldFrames()
    try:
        return timelines.offline_intervals(events, timelines.leadership(events), held)
    finally:
        held.release()


def _leadership(events: Any) -> Any:
    from controller_svc.analytics import timelines

    return timelines.leadership(events)


def _epoch_regression(events: Any) -> Any:
    from controller_svc.analytics import invariants

    return invariants.leader_epoch_regression(events)


@pytest.mark.parametrize("timeline", [_offline, _leadership, _epoch_regression], ids=lambda f: f.__name__)
def test_a_partition_timeline_is_sorted_once(events: Any, timeline: Callable[[Any], Any]) -> None:
    assert timeline_sorts(timeline(events)) == 1
