"""bench.analytics_stages: reading Spark's event log and putting its stages in the job's steps."""

from __future__ import annotations

import json
from typing import Any

from bench import analytics_stages as st


def _scope(name: str) -> str:
    return json.dumps({"id": "7", "name": name})


def _task(stage: int, run_ms: int, cpu_ns: int) -> dict[str, Any]:
    return {
        "Event": "SparkListenerTaskEnd",
        "Stage ID": stage,
        "Task Metrics": {"Executor Run Time": run_ms, "Executor CPU Time": cpu_ns},
    }


def _stage(stage: int, submitted: int | None, completed: int, tasks: int, scopes: list[str], acc: list[Any]) -> Any:
    info: dict[str, Any] = {
        "Stage ID": stage,
        "Completion Time": completed,
        "Number of Tasks": tasks,
        "RDD Info": [{"Name": "MapPartitionsRDD", "Scope": _scope(s)} for s in scopes] + [{"Name": "x"}],
        "Accumulables": [{"Name": name, "Value": value} for name, value in acc],
    }
    if submitted is not None:
        info["Submission Time"] = submitted
    return {"Event": "SparkListenerStageCompleted", "Stage Info": info}


EVENTS = [
    {"Event": "SparkListenerApplicationStart", "Timestamp": 1},
    _task(1, 1000, 800_000_000),
    _task(1, 1500, 1_200_000_000),
    _task(2, 300, 250_000_000),
    _task(3, 50, 1),
    # Submitted in the ingest, completed after it: a stage belongs to the step that submitted it.
    _stage(
        1,
        10_000,
        12_200,
        2,
        ["Window", "WholeStageCodegen (3)", "Exchange", "Window"],
        [("sort time", 200), ("sort time", 100), ("number of output rows", 5), ("duration", 999)],
    ),
    _stage(2, 12_500, 12_900, 1, ["Scan parquet "], [("internal.metrics.executorRunTime", 300)]),
    _stage(3, None, 12_600, 4, ["Exchange"], []),  # skipped: never submitted
    _stage(4, 20_000, 20_100, 1, ["WriteFiles"], []),  # after the job's steps
]
LOG = [json.dumps(event) for event in EVENTS]


def test_stages_with_their_tasks_times_operators_and_metrics() -> None:
    stages = st.read_event_log(LOG)
    assert sorted(stages) == [1, 2, 4]
    first = stages[1]
    assert (first.wall_ms, first.tasks, first.task_run_ms, first.task_cpu_ms) == (2200, 2, 2500, 2000.0)
    assert first.operators == ["Exchange", "WholeStageCodegen", "Window"]
    assert first.metrics == {"sort time": 300, "number of output rows": 5}
    assert stages[2].operators == ["Scan parquet"]
    assert stages[2].metrics == {}


def test_each_stage_counts_in_the_step_that_submitted_it() -> None:
    stages = st.read_event_log(LOG)
    steps = st.steps_of([(9.5, [("ingest", 12.0), ("leadership", 13.0)]), (30.0, [("ingest", 31.0)])])
    assert [(s.run, s.name, s.start_ms, s.end_ms) for s in steps] == [
        (0, "ingest", 9500, 12000),
        (0, "leadership", 12000, 13000),
        (1, "ingest", 30000, 31000),
    ]
    rows = st.summarize(stages, steps, cores=2)
    ingest, leadership, second_ingest = rows
    assert (ingest["stages"], ingest["task_run_s"], ingest["task_cpu_s"], ingest["wall_s"]) == (1, 2.5, 2.0, 2.5)
    assert ingest["idle_core_s"] == 2.5  # 2 cores x 2.5 s - 2.5 s of tasks
    assert ingest["largest_stages"][0]["stage"] == 1
    assert ingest["largest_stages"][0]["operators"] == ["Exchange", "WholeStageCodegen", "Window"]
    assert (leadership["stages"], leadership["task_run_s"], leadership["idle_core_s"]) == (1, 0.3, 1.7)
    assert second_ingest["stages"] == 0 and second_ingest["idle_core_s"] == 2.0
    assert st.totals(rows) == [
        {"run": 0, "wall_s": 3.5, "task_run_s": 2.8, "idle_core_s": 4.2, "stages": 2},
        {"run": 1, "wall_s": 1.0, "task_run_s": 0.0, "idle_core_s": 2.0, "stages": 0},
    ]


def _task_at(launch: int, finish: int) -> dict[str, Any]:
    return {"Event": "SparkListenerTaskEnd", "Stage ID": 9, "Task Info": {"Launch Time": launch, "Finish Time": finish}}


SQL = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecution"
ACTIVITY = [
    {"Event": f"{SQL}Start", "executionId": 0, "time": 1_000},
    _task_at(1_200, 1_700),
    _task_at(1_500, 2_000),
    _task_at(1_600, 1_800),  # a third task at once counts as "two or more"
    {"Event": f"{SQL}End", "executionId": 0, "time": 2_100},
    {"Event": f"{SQL}Start", "executionId": 1, "time": 2_600},
    _task_at(2_700, 3_000),
    {"Event": f"{SQL}End", "executionId": 1, "time": 3_100},
    {"Event": f"{SQL}End", "executionId": 7, "time": 3_200},  # its start is not in the log
    {"Event": "SparkListenerTaskEnd", "Stage ID": 9, "Task Info": {"Launch Time": 5}},  # no finish: ignored
]


def test_the_driver_alone_one_task_and_between_queries_per_step() -> None:
    activity = st.read_activity(json.dumps(event) for event in ACTIVITY)
    assert activity.tasks == [(1_200, 1_700), (1_500, 2_000), (1_600, 1_800), (2_700, 3_000)]
    assert activity.queries == [(1_000, 2_100), (2_600, 3_100)]
    steps = st.steps_of([(0.9, [("ingest", 2.4), ("leadership", 3.5)])])
    ingest, leadership = st.summarize({}, steps, cores=2, activity=activity)
    # 900-1200 and 2000-2400 without a task; 1200-1500 and 1800-2000 one; 1500-1800 two or more.
    assert (ingest["no_task_s"], ingest["one_task_s"]) == (0.7, 0.5)
    assert ingest["between_queries_s"] == 0.4  # 900-1000 and 2100-2400
    # 2400-2700 and 3000-3500 without a task; 2400-2600 and 3100-3500 outside any query.
    assert (leadership["no_task_s"], leadership["one_task_s"], leadership["between_queries_s"]) == (0.8, 0.3, 0.6)
    assert st.totals([ingest, leadership]) == [
        {
            "run": 0,
            "wall_s": 2.6,
            "task_run_s": 0.0,
            "idle_core_s": 5.2,
            "no_task_s": 1.5,
            "one_task_s": 0.8,
            "between_queries_s": 1.0,
            "stages": 0,
        }
    ]
    assert "no_task_s" not in st.summarize({}, steps, cores=2)[0]  # without the activity, as before
