"""The analysis service's requests and queue (controller_svc/analytics/service.py), with the
analysis itself replaced by a stand-in that waits for the test: the queue's rules, not Spark's
work (tests/pipeline/test_analysis_service.py runs the real service)."""

from __future__ import annotations

import asyncio
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

    def __call__(self, spark: Any, inputs: list[str], out: str, cluster_by: ClusterBy) -> job.Outcome:
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
