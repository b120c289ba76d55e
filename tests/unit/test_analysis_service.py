"""The analysis service's requests and queue (controller_svc/analytics/service.py), with the
analysis itself replaced by a stand-in that waits for the test: the queue's rules, not Spark's
work (tests/pipeline/test_analysis_service.py runs the real service)."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import pytest

from controller_svc.analytics import job, service
from controller_svc.analytics.ingest import ClusterBy, InputError
from controller_svc.common.errors import ErrorCode


def test_a_request_names_absolute_paths_or_urls_and_a_known_grouping() -> None:
    request = service.request_of(["/logs/a", "s3a://bucket/logs", "file:/x"], "/out", "dir")
    assert request == service.AnalysisRequest(("/logs/a", "s3a://bucket/logs", "file:/x"), "/out", ClusterBy("dir"))
    assert service.request_of(["/logs"], "hdfs://nn/out", "").cluster_by == ClusterBy("none")
    for logdirs, out, cluster_by, message in [
        ([], "/out", "", "no log directories"),
        (["/logs"], "", "", "no output directory"),
        (["logs"], "/out", "", "logs: a relative path"),
        (["/logs"], "out", "", "out: a relative path"),
        (["/logs", " "], "/out", "", "an empty path"),
        (["/lo\0gs"], "/out", "", "NUL"),
        (["/logs"], "/out", "by-host", "expected none or dir"),
    ]:
        with pytest.raises(InputError, match=message):
            service.request_of(logdirs, out, cluster_by)


def test_the_client_sends_its_local_paths_absolute_and_urls_as_they_are() -> None:
    assert service.client_path("logs/a", cwd="/home/op") == "/home/op/logs/a"
    assert service.client_path("../x", cwd="/home/op") == "/home/x"
    assert service.client_path("/abs", cwd="/home/op") == "/abs"
    assert service.client_path("s3a://b/logs", cwd="/home/op") == "s3a://b/logs"


class StandIn:
    """job.analyze's stand-in: each call waits until the test releases it, and records how many
    ran at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most_at_once = 0
        self.started: list[str] = []
        self.release: dict[str, threading.Event] = {}
        self.fail: dict[str, BaseException] = {}

    def __call__(self, spark: Any, inputs: list[str], out: str, cluster_by: ClusterBy | None = None) -> job.Outcome:
        with self.lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            self.started.append(out)
            gate = self.release.setdefault(out, threading.Event())
        try:
            assert gate.wait(30), f"{out} never released"
            if out in self.fail:
                raise self.fail[out]
            return job.Outcome({"events": len(inputs), "out": out}, 1 if "broken" in out else 0, f"{out}/s", f"{out}/r")
        finally:
            with self.lock:
                self.running -= 1

    def open(self, out: str) -> None:
        with self.lock:
            self.release.setdefault(out, threading.Event()).set()


async def _until(condition: Any) -> None:
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never held")


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> StandIn:
    fake = StandIn()
    monkeypatch.setattr(job, "analyze", fake)
    monkeypatch.setattr(service, "jvm_alive", lambda spark: True)
    return fake


async def test_one_analysis_at_a_time_in_arrival_order_and_a_full_queue_refused(stand_in: StandIn) -> None:
    analyses = service.Analyses(spark=object(), max_queued=1)  # type: ignore[arg-type]
    first = asyncio.ensure_future(analyses.submit(["/l"], "/a", ""))
    await _until(lambda: stand_in.started == ["/a"])
    second = asyncio.ensure_future(analyses.submit(["/l"], "/broken", ""))
    await asyncio.sleep(0.05)
    refused = await analyses.submit(["/l"], "/c", "")
    assert refused.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED and refused.outcome == "queue_full"
    assert "1 analyses waiting (at most 1)" in refused.error_message
    assert stand_in.started == ["/a"]  # the second waits for the first
    stand_in.open("/broken")
    await asyncio.sleep(0.05)
    assert stand_in.started == ["/a"] and not second.done()
    stand_in.open("/a")
    done = await first
    assert (done.error_code, done.exit_code, done.summary_path, done.outcome) == (
        ErrorCode.NONE,
        0,
        "/a/s",
        "no_violations",
    )
    assert done.response().summary_json == '{"events": 1, "out": "/a"}'
    broken = await second
    assert (broken.exit_code, broken.outcome) == (1, "violations") and broken.queued_s > 0.0
    assert stand_in.most_at_once == 1


async def test_bad_input_and_a_failed_analysis_are_answers_and_the_next_analysis_runs(stand_in: StandIn) -> None:
    analyses = service.Analyses(spark=object(), max_queued=0)  # type: ignore[arg-type]
    relative = await analyses.submit(["logs"], "/o", "")
    assert (relative.error_code, relative.exit_code, relative.outcome) == (ErrorCode.INVALID_REQUEST, 2, "bad_input")
    assert stand_in.started == []  # refused before any Spark work
    stand_in.fail["/missing"] = InputError("/missing: no such file or directory")
    stand_in.fail["/unwritable"] = PermissionError("denied\nsecond line")
    for out in ("/missing", "/unwritable", "/fine"):
        stand_in.open(out)
    missing = await analyses.submit(["/l"], "/missing", "")
    assert (missing.error_code, missing.exit_code) == (ErrorCode.INVALID_REQUEST, 2)
    assert missing.error_message == "bad input: /missing: no such file or directory"
    failed = await analyses.submit(["/l"], "/unwritable", "")
    assert (failed.error_code, failed.exit_code, failed.outcome) == (ErrorCode.UNKNOWN_SERVER_ERROR, 2, "failed")
    assert failed.error_message == "the analysis failed: PermissionError: denied"
    assert not analyses.broken.is_set()
    assert (await analyses.submit(["/l"], "/fine", "")).error_code == ErrorCode.NONE


async def test_a_lost_jvm_breaks_the_service(stand_in: StandIn, monkeypatch: pytest.MonkeyPatch) -> None:
    analyses = service.Analyses(spark=object(), max_queued=2)  # type: ignore[arg-type]
    monkeypatch.setattr(service, "jvm_alive", lambda spark: False)
    stand_in.fail["/a"] = ConnectionError("Py4J: answer from Java side is empty")
    stand_in.open("/a")
    answer = await analyses.submit(["/l"], "/a", "")
    assert answer.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    await asyncio.wait_for(analyses.broken.wait(), 5)
    with pytest.raises(service.SessionBrokenError):
        await analyses.submit(["/l"], "/b", "")
    assert stand_in.started == ["/a"]


async def test_a_client_that_leaves_does_not_stop_its_analysis_nor_free_the_turn(stand_in: StandIn) -> None:
    analyses = service.Analyses(spark=object(), max_queued=2)  # type: ignore[arg-type]
    first = asyncio.ensure_future(analyses.submit(["/l"], "/a", ""))
    await _until(lambda: stand_in.started == ["/a"])
    second = asyncio.ensure_future(analyses.submit(["/l"], "/b", ""))
    first.cancel()
    await asyncio.sleep(0.1)
    assert stand_in.started == ["/a"] and stand_in.running == 1  # /a goes on; /b still waits
    stand_in.open("/b")
    stand_in.open("/a")
    assert (await second).error_code == ErrorCode.NONE
    assert stand_in.started == ["/a", "/b"] and stand_in.most_at_once == 1
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_draining_lets_the_running_analysis_end_and_refuses_the_waiting_ones(stand_in: StandIn) -> None:
    analyses = service.Analyses(spark=object(), max_queued=2)  # type: ignore[arg-type]
    running = asyncio.ensure_future(analyses.submit(["/l"], "/a", ""))
    await _until(lambda: stand_in.started == ["/a"])
    waiting = asyncio.ensure_future(analyses.submit(["/l"], "/b", ""))
    await asyncio.sleep(0.05)
    drained = asyncio.ensure_future(analyses.drain())
    await asyncio.sleep(0.05)
    assert not drained.done()
    with pytest.raises(service.SessionBrokenError):
        await analyses.submit(["/l"], "/c", "")
    stand_in.open("/a")
    assert (await running).error_code == ErrorCode.NONE
    with pytest.raises(service.SessionBrokenError):
        await waiting
    await asyncio.wait_for(drained, 5)
    assert stand_in.started == ["/a"]


class Warming:
    """The warm-up's history and answer check replaced: `generated` records where the history
    went, `verdicts` says what each analysis' check finds (a difference, or none)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, verdicts: list[list[str]] | None = None) -> None:
        from controller_svc.analytics import synthetic

        self.generated: list[str] = []
        self.verdicts = list(verdicts or [])
        self.fail_generation: BaseException | None = None
        monkeypatch.setattr(synthetic, "generate", self.generate)
        monkeypatch.setattr(
            synthetic, "differences", lambda summary, expected: self.verdicts.pop(0) if self.verdicts else []
        )

    def generate(self, directory: str, events: int, **_: Any) -> Any:
        from controller_svc.analytics import synthetic

        if self.fail_generation is not None:
            raise self.fail_generation
        os.makedirs(directory)
        self.generated.append(directory)
        assert events == service.WARMUP_EVENTS
        return synthetic.Expected()


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _warmup_counts() -> dict[str, float]:
    from controller_svc.analytics import service_metrics

    return {
        outcome: service_metrics.WARMUP_RUNS.labels(outcome)._value.get()
        for outcome in ("known_answers", "wrong_answers", "failed")
    }


async def test_the_warm_up_is_the_running_analysis_and_requests_wait_behind_it(
    stand_in: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    warming = Warming(monkeypatch, verdicts=[[], ["failovers: 3 instead of 4"]])
    before = _warmup_counts()
    analyses = service.Analyses(spark=object(), max_queued=1)  # type: ignore[arg-type]
    warm = asyncio.ensure_future(analyses.warm_up(2))
    await _until(lambda: len(stand_in.started) == 1)
    warm_out = stand_in.started[0]
    assert os.path.dirname(warm_out) == os.path.dirname(warming.generated[0])  # its own temporary directory
    waiting = asyncio.ensure_future(analyses.submit(["/l"], "/a", ""))
    await asyncio.sleep(0.05)
    # The warm-up holds the one running place: one request may wait, the next is refused.
    refused = await analyses.submit(["/l"], "/b", "")
    assert refused.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert not waiting.done() and stand_in.started == [warm_out]
    stand_in.open("/a")
    stand_in.open(warm_out)
    done = await warm
    assert (done.runs, done.wrong, done.failed) == (2, 1, 0) and done.seconds > 0.0
    answer = await waiting
    # It waited for its turn behind the whole warm-up (at least the sleep above), not in the
    # analysis thread's queue after taking the turn.
    assert answer.error_code == ErrorCode.NONE and answer.queued_s >= 0.05
    assert stand_in.started == [warm_out, warm_out, "/a"] and stand_in.most_at_once == 1
    assert not _exists(os.path.dirname(warm_out))  # removed after
    grown = {k: v - before[k] for k, v in _warmup_counts().items()}
    assert grown == {"known_answers": 1, "wrong_answers": 1, "failed": 0}


async def test_draining_during_the_warm_up_ends_it_after_its_current_analysis(
    stand_in: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    Warming(monkeypatch)
    analyses = service.Analyses(spark=object(), max_queued=1)  # type: ignore[arg-type]
    warm = asyncio.ensure_future(analyses.warm_up(5))
    await _until(lambda: len(stand_in.started) == 1)
    drained = asyncio.ensure_future(analyses.drain())
    await asyncio.sleep(0.05)
    assert not drained.done()  # the running warm-up analysis ends first
    stand_in.open(stand_in.started[0])
    assert (await warm).runs == 1
    await asyncio.wait_for(drained, 5)
    assert len(stand_in.started) == 1


async def test_failed_warm_up_analyses_are_counted_and_a_lost_jvm_ends_the_warm_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def failing(spark: Any, inputs: list[str], out: str, cluster_by: Any = None) -> job.Outcome:
        raise ConnectionError("Py4J: answer from Java side is empty")

    monkeypatch.setattr(job, "analyze", failing)
    Warming(monkeypatch)
    alive = [True]
    monkeypatch.setattr(service, "jvm_alive", lambda spark: alive[0])
    before = _warmup_counts()
    analyses = service.Analyses(spark=object(), max_queued=1)  # type: ignore[arg-type]
    done = await analyses.warm_up(3)
    assert (done.runs, done.failed, analyses.broken.is_set()) == (3, 3, False)  # the JVM lives: it goes on
    alive[0] = False
    done = await analyses.warm_up(3)
    assert (done.runs, done.failed) == (1, 1)
    await asyncio.wait_for(analyses.broken.wait(), 5)
    assert _warmup_counts()["failed"] - before["failed"] == 4


async def test_a_history_that_cannot_be_written_leaves_the_service_unwarmed_but_serving(
    stand_in: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    warming = Warming(monkeypatch)
    warming.fail_generation = OSError(28, "No space left on device")
    analyses = service.Analyses(spark=object(), max_queued=1)  # type: ignore[arg-type]
    done = await analyses.warm_up(4)
    assert (done.runs, done.failed) == (0, 1) and stand_in.started == []
    stand_in.open("/a")
    assert (await analyses.submit(["/l"], "/a", "")).error_code == ErrorCode.NONE
    assert (await analyses.warm_up(0)) == service.WarmUp()


def test_a_summary_is_checked_against_the_known_answers_field_by_field() -> None:
    from controller_svc.analytics import synthetic

    expected = synthetic.Expected(events=10, failovers=2, offline_intervals=3).as_json()
    summary = {
        "violations": dict(expected["violations"]),
        "availability": {"failovers": 2, "offline_intervals": 3, "elections": 99},
    }
    assert synthetic.differences(summary, expected) == []
    summary["violations"]["leader_epoch_regression"] = 1
    summary["availability"]["offline_intervals"] = 4
    found = synthetic.differences(summary, expected)
    assert len(found) == 2 and found[1] == "offline_intervals: 4 instead of 3"
    assert found[0].startswith("violations: ") and "'leader_epoch_regression': 1" in found[0]
    summary["violations"]["leader_epoch_regression"] = 0
    summary["availability"]["offline_intervals"] = 3
    summary["availability"]["failovers"] = 1
    assert synthetic.differences(summary, expected) == ["failovers: 1 instead of 2"]


def test_the_client_names_an_error_code_it_does_not_know_by_its_number(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import argparse

    from controller_svc.analytics import cli
    from kcontroller.v1 import analysis_pb2

    answers = {
        "/new": analysis_pb2.AnalyzeResponse(error_code=999, error_message="a newer service's refusal", exit_code=2),
        "/known": analysis_pb2.AnalyzeResponse(error_code=int(ErrorCode.INVALID_REQUEST), error_message="bad input: x"),
    }
    monkeypatch.setattr(service, "request_analysis", lambda address, logdirs, out, cluster_by: answers[out])
    for out, printed in [("/new", "a newer service's refusal (999)"), ("/known", "bad input: x (INVALID_REQUEST)")]:
        args = argparse.Namespace(service="127.0.0.1:1", logdirs=["/l"], out=out, cluster_by="", master=None, conf=[])
        assert cli._analyze_in_service(args) == 2
        assert f"analyze: {printed}" in capsys.readouterr().err
    assert ErrorCode.name_of(-1) == "UNKNOWN_SERVER_ERROR" and ErrorCode.name_of(1000) == "1000"


async def test_the_memory_an_analysis_freed_is_given_back_after_each_one(
    stand_in: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    released: list[int] = []
    monkeypatch.setattr(service, "release_freed_memory", lambda: released.append(len(stand_in.started)))
    Warming(monkeypatch)
    analyses = service.Analyses(spark=object(), max_queued=1)  # type: ignore[arg-type]
    stand_in.fail["/broken"] = OSError("disk full")
    for out in ("/a", "/broken"):
        stand_in.open(out)
    assert (await analyses.submit(["/l"], "/a", "")).error_code == ErrorCode.NONE
    assert (await analyses.submit(["/l"], "/broken", "")).error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert released == [1, 2]  # after each analysis, a failed one too
    warm = asyncio.ensure_future(analyses.warm_up(2))
    await _until(lambda: len(stand_in.started) == 3)
    stand_in.open(stand_in.started[2])
    assert (await warm).runs == 2 and released == [1, 2, 4]  # once after the warm-up


def test_releasing_freed_memory_leaves_arrow_working() -> None:
    import pyarrow as pa

    before = pa.default_memory_pool().bytes_allocated()
    table = pa.table({"x": pa.array(range(100_000), pa.int64())})
    del table
    service.release_freed_memory()
    assert pa.default_memory_pool().bytes_allocated() == before
    assert pa.array([1, 2, 3], pa.int64()).to_pylist() == [1, 2, 3]
