"""`controller-svc analyze-service` as a real process (its own JVM), with its real clients:
`controller-svc analyze --service`, a gRPC stub, grpcurl, `controller-svc health` and a
Prometheus scrape. An analysis in the service must be the analysis `analyze` runs itself."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from controller_svc.analytics import ingest, job, synthetic
from controller_svc.common.errors import ErrorCode
from controller_svc.common.grpc_common import free_port
from kcontroller.v1 import analysis_pb2, analysis_pb2_grpc
from tests.integration.harness import scrape
from tests.pipeline import scenarios

pytestmark = pytest.mark.pipeline

START_TIMEOUT_S = 300.0


@dataclass
class Service:
    process: subprocess.Popen[str]
    address: str
    metrics: str
    output: list[str]
    reader: threading.Thread

    def stub(self) -> Any:
        return analysis_pb2_grpc.AnalysisStub(grpc.insecure_channel(self.address))

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.exit_code()

    def exit_code(self) -> int:
        """Once the process has exited, with all of its output read."""
        code = self.process.wait(timeout=120)
        self.reader.join(timeout=30)
        return code


def start_service(tmp_path: pathlib.Path, *extra: str, ready: bool = True, temporary: str | None = None) -> Service:
    """The service started in `tmp_path`, once it is listening and, with `ready`, once it has
    ended its warm-up (`extra` arguments: `--warmup-runs 0` unless they say otherwise)."""
    metrics = f"127.0.0.1:{free_port('127.0.0.1')}"
    command = [sys.executable, "-m", "controller_svc", "analyze-service", "--listen", "127.0.0.1:0"]
    command += ["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=2", "--metrics-listen", metrics]
    if "--warmup-runs" not in extra:
        command += ["--warmup-runs", "0"]
    process = subprocess.Popen(
        [*command, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **({"TMPDIR": temporary} if temporary else {})},
    )
    assert process.stdout is not None
    output: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT_S
    address = ""
    for line in process.stdout:
        output.append(line)
        if line.startswith("analyze-service: listening on "):
            address = line.split()[-1]
            if not ready:
                break
        if line.startswith("analyze-service: ready after "):
            break
        assert time.monotonic() < deadline, "".join(output[-50:])
    assert address, "".join(output[-50:])
    # The rest of its log, kept for the assertions and for a failure's message.
    reader = threading.Thread(target=lambda: output.extend(process.stdout or []), daemon=True)
    reader.start()
    return Service(process, address, metrics, output, reader)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = start_service(tmp_path_factory.mktemp("service"), "--max-queued", "1")
    yield running
    if running.process.poll() is None:
        running.process.kill()


def analyze(service: Service, *args: str, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller_svc", "analyze", *args, "--service", service.address],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )


def outcomes(service: Service) -> dict[str, float]:
    """The service's requests by outcome, and its analyses' count (`analysed`), from its metrics."""
    samples = scrape(service.metrics)
    prefix = 'kcontroller_analysis_requests_total{outcome="'
    counts = {name[len(prefix) : -2]: value for name, value in samples.items() if name.startswith(prefix)}
    return {**counts, "analysed": samples["kcontroller_analysis_time_ms_count"]}


def grew(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {key: after[key] - before.get(key, 0.0) for key in after if after[key] != before.get(key, 0.0)}


def comparable(summary: dict[str, Any], out: pathlib.Path) -> dict[str, Any]:
    """A summary without its times, its output directory's name replaced."""
    text = json.dumps({k: v for k, v in summary.items() if k not in ("elapsed_s", "timings_s", "step_spans_s")})
    return dict(json.loads(text.replace(str(out), "OUT")))


def test_an_analysis_in_the_service_is_the_one_analyze_runs_itself(
    service: Service, spark: Any, tmp_path: pathlib.Path
) -> None:
    scenarios.clean_failover(tmp_path / "logs" / "clean")
    scenarios.violations(tmp_path / "logs" / "broken")
    before = outcomes(service)
    # Relative paths: the client sends them absolute, against its own working directory (the
    # service's is another one).
    result = analyze(service, "logs", "--out", "out", "--cluster-by", "dir", "--json", cwd=tmp_path)
    assert result.returncode == 1, result.stderr + "".join(service.output[-40:])
    summary = json.loads(result.stdout)
    assert summary == json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (tmp_path / "out" / "report.html").is_file()
    assert summary["violations"] == {
        "single_controller_per_epoch": 2,
        "stale_controller_epoch_applied": 1,
        "leader_epoch_regression": 3,
        "unclean_election_without_permission": 1,
    }
    local = job.analyze(spark, [str(tmp_path / "logs")], str(tmp_path / "local"), ingest.ClusterBy("dir"))
    assert comparable(summary, tmp_path / "out") == comparable(local.summary, tmp_path / "local")

    readable = analyze(service, str(tmp_path / "logs" / "clean"), "--out", str(tmp_path / "out2"))
    assert readable.returncode == 0, readable.stderr
    assert "violations: single_controller_per_epoch 0" in readable.stdout
    assert f"summary: {tmp_path / 'out2' / 'summary.json'}" in readable.stdout
    assert grew(before, outcomes(service)) == {"violations": 1, "no_violations": 1, "analysed": 2}


def test_bad_input_is_refused_and_the_service_goes_on(service: Service, tmp_path: pathlib.Path) -> None:
    before = outcomes(service)
    missing = analyze(service, str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"))
    assert missing.returncode == 2
    assert "no such file or directory" in missing.stderr and "(INVALID_REQUEST)" in missing.stderr
    stub = service.stub()
    relative = stub.Analyze(analysis_pb2.AnalyzeRequest(logdirs=["logs"], out="/tmp/x"))
    assert (relative.error_code, relative.exit_code) == (ErrorCode.INVALID_REQUEST, 2)
    assert "relative path" in relative.error_message
    grouping = stub.Analyze(analysis_pb2.AnalyzeRequest(logdirs=["/tmp"], out="/tmp/x", cluster_by="host"))
    assert grouping.error_code == ErrorCode.INVALID_REQUEST and "expected none or dir" in grouping.error_message
    settings = analyze(service, str(tmp_path), "--out", str(tmp_path / "o"), "--master", "local[1]")
    assert settings.returncode == 2 and "the service's own settings" in settings.stderr
    assert "relative path" in "".join(service.output)  # the service's log names the refusal

    expected = synthetic.generate(tmp_path / "history", 20_000, brokers=6, partitions=300, seed=3)
    fine = analyze(service, str(tmp_path / "history"), "--out", str(tmp_path / "fine"), "--json")
    assert fine.returncode == 0, fine.stderr
    summary = json.loads(fine.stdout)
    assert summary["violations"] == expected.violations and summary["events"] == expected.events
    assert summary["availability"]["failovers"] == expected.failovers
    # The missing path reached the job (an analysis that stopped at its input); the relative
    # path and the grouping were refused before it; --master never left the client.
    assert grew(before, outcomes(service)) == {"bad_input": 3, "no_violations": 1, "analysed": 1}


def test_a_full_queue_refuses_and_the_waiting_analysis_runs_after(service: Service, tmp_path: pathlib.Path) -> None:
    """--max-queued 1: while one analysis runs, one may wait and the next is refused."""
    synthetic.generate(tmp_path / "history", 60_000, brokers=6, partitions=300, seed=5)
    before = outcomes(service)
    stub = service.stub()
    calls = [
        stub.Analyze.future(analysis_pb2.AnalyzeRequest(logdirs=[str(tmp_path / "history")], out=str(tmp_path / o)))
        for o in ("a", "b", "c")
    ]
    answers = [call.result(timeout=600) for call in calls]
    codes = sorted(answer.error_code for answer in answers)
    assert codes == [ErrorCode.NONE, ErrorCode.NONE, ErrorCode.THROTTLING_QUOTA_EXCEEDED], answers
    done = [a for a in answers if a.error_code == ErrorCode.NONE]
    assert max(a.queued_s for a in done) > 0.0 and min(a.analysis_s for a in done) > 0.0
    assert {json.loads(a.summary_json)["events"] for a in done} == {json.loads(done[0].summary_json)["events"]}
    assert grew(before, outcomes(service)) == {"queue_full": 1, "no_violations": 2, "analysed": 2}


def test_health_and_grpcurl_through_reflection(service: Service) -> None:
    health = health_of(service)
    assert health.returncode == 0 and "SERVING" in health.stdout, health.stderr
    grpcurl = shutil.which("grpcurl") or str(pathlib.Path(sys.executable).parent / "grpcurl")
    listed = subprocess.run([grpcurl, "-plaintext", service.address, "list"], capture_output=True, text=True)
    assert "kcontroller.v1.Analysis" in listed.stdout, listed.stderr
    request = json.dumps({"logdirs": ["/nowhere/kc-logs"], "out": "/nowhere/kc-out"})
    called = subprocess.run(
        [grpcurl, "-plaintext", "-d", request, service.address, "kcontroller.v1.Analysis/Analyze"],
        capture_output=True,
        text=True,
    )
    reply = json.loads(called.stdout or "{}")  # grpcurl prints the fields by their proto names
    assert (reply.get("error_code"), reply.get("exit_code")) == (ErrorCode.INVALID_REQUEST, 2), called.stderr
    assert "/nowhere/kc-logs: no such file or directory" in reply["error_message"]
    samples = scrape(service.metrics)
    assert samples["kcontroller_analysis_queued"] == 0


def test_sigterm_lets_the_running_analysis_finish(service: Service, tmp_path: pathlib.Path) -> None:
    synthetic.generate(tmp_path / "history", 60_000, brokers=6, partitions=300, seed=9)
    call = service.stub().Analyze.future(
        analysis_pb2.AnalyzeRequest(logdirs=[str(tmp_path / "history")], out=str(tmp_path / "out"))
    )
    deadline = time.monotonic() + 120
    while scrape(service.metrics).get("kcontroller_analysis_queued", 0) < 1:
        assert time.monotonic() < deadline and not call.done()
        time.sleep(0.05)
    service.process.send_signal(signal.SIGTERM)
    answer = call.result(timeout=600)
    assert answer.error_code == ErrorCode.NONE and (tmp_path / "out" / "summary.json").is_file()
    assert service.stop() == 0, "".join(service.output[-40:])
    assert "stopping: the running analysis finishes" in "".join(service.output)


def test_a_service_whose_jvm_died_answers_an_error_and_exits_1(tmp_path: pathlib.Path) -> None:
    running = start_service(tmp_path)
    try:
        children = subprocess.run(["pgrep", "-P", str(running.process.pid)], capture_output=True, text=True)
        jvms = [
            int(pid) for pid in children.stdout.split() if "java" in pathlib.Path(f"/proc/{pid}/exe").resolve().name
        ]
        assert jvms, children.stdout
        for pid in jvms:
            os.kill(pid, signal.SIGKILL)
        scenarios.clean_failover(tmp_path / "logs")
        result = analyze(running, str(tmp_path / "logs"), "--out", str(tmp_path / "out"))
        assert result.returncode == 2 and "(UNKNOWN_SERVER_ERROR)" in result.stderr, result.stderr
        assert running.exit_code() == 1, "".join(running.output[-40:])
        assert "Spark's JVM is gone" in "".join(running.output)
    finally:
        if running.process.poll() is None:
            running.process.kill()


def health_of(service: Service) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller_svc", "health", "--address", service.address],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_warm_up_comes_before_serving_and_a_request_waits_for_it(tmp_path: pathlib.Path) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    running = start_service(tmp_path, "--warmup-runs", "2", ready=False, temporary=str(temporary))
    try:
        # Listening, warming up: its first analysis (of a 20k-event history, in a JVM just
        # started) takes seconds, the health check a fraction of one.
        warming = health_of(running)
        assert warming.returncode == 1 and "NOT_SERVING" in warming.stdout, warming.stdout + warming.stderr
        # The warm-up task starts on the service's loop just after the listening line.
        deadline = time.monotonic() + 120
        while not list(temporary.glob("kcontroller-warmup-*")):
            assert time.monotonic() < deadline, "the warm-up's history is not where TMPDIR says"
            assert running.process.poll() is None, "".join(running.output[-40:])
            time.sleep(0.05)
        scenarios.clean_failover(tmp_path / "logs")
        result = analyze(running, str(tmp_path / "logs"), "--out", str(tmp_path / "out"), "--json")
        assert result.returncode == 0, result.stderr + "".join(running.output[-40:])
        output = "".join(running.output)
        ready = output.index("analyze-service: ready after a warm-up of 2 analyses")
        assert ready < output.index(f"analysis of {tmp_path / 'logs'} into"), output[-3000:]
        assert "warm-up of 2 analyses (0 wrong, 0 failed)" in output
        serving = health_of(running)
        assert serving.returncode == 0 and "SERVING" in serving.stdout
        samples = scrape(running.metrics)
        assert samples['kcontroller_analysis_warmup_runs_total{outcome="known_answers"}'] == 2
        assert samples["kcontroller_analysis_warmup_time_ms"] > 0
        # The warm-up's analyses are not requests.
        assert outcomes(running) == {"no_violations": 1, "analysed": 1}
        assert not list(temporary.glob("kcontroller-warmup-*"))  # removed once done
        assert running.stop() == 0, "".join(running.output[-40:])
    finally:
        if running.process.poll() is None:
            running.process.kill()
