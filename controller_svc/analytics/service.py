"""`controller-svc analyze-service`: the analysis (contract 6) in a Spark session kept between
analyses, and `controller-svc analyze --service ADDR`, its client.

A new `analyze` pays for Python's imports, the JVM, Spark's context and session and the first
query's compilation before it reads a line: 7-11 s on 2 cores whatever the input's size
(`bench/results/analytics-10m-beac863.json`'s `cold_fixed_s`), most of what a 1M-event analysis
costs. The service pays it once; each analysis then runs as the benchmark's warm runs do, in the
same JVM (the JIT's work on earlier analyses included).

One analysis runs at a time (they share the cores and Spark's scheduler); requests arriving
meanwhile wait in a bounded queue, and one beyond it is refused with THROTTLING_QUOTA_EXCEEDED.
A request names paths as the service's process sees them: relative local paths are refused (the
service cannot know the client's working directory; the client makes its own absolute). The
service reads and writes whatever paths a request names, as its own user: it listens on
loopback by default, or on a Unix socket, or with mutual TLS (the KCONTROLLER_TLS_* environment,
common/tls.py). SIGTERM or SIGINT: NOT_SERVING, the running analysis finishes, the queued ones
are refused (UNAVAILABLE), then Spark stops. If Spark's JVM dies, the service exits 1 (a
supervisor restarts it): it never answers from a broken session.

Before it says SERVING the service warms up (`--warmup-runs`, warm_up): it analyses a small
generated history a few times, so that the JIT has compiled Spark's planning and scheduling code
(run the same whatever an input's size) before the first request rather than during the first
requests, on the cores their Python tasks need (bench/results/analytics-jit-1m-ffc40a7.json:
1M-event analyses in a new JVM, the compiler threads' CPU 2.71 s in the first and 0.52-1.29 s in
the next three without a warm-up, 0.51 s and 0.20-0.29 s after eight warm-up analyses). Each
warm-up analysis is checked against the history's known answers. A request that arrives
meanwhile waits for it, as behind any running analysis."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from controller_svc.common.errors import ErrorCode

if TYPE_CHECKING:
    import grpc
    from pyspark.sql import SparkSession

    from controller_svc.analytics import job
    from controller_svc.analytics.ingest import ClusterBy
    from kcontroller.v1 import analysis_pb2

log = logging.getLogger("analytics.service")

SERVICE_NAME = "kcontroller.v1.Analysis"
DEFAULT_LISTEN = "127.0.0.1:9391"
DEFAULT_MAX_QUEUED = 8
# The warm-up: analyses of a generated history before the first request (warm_up). Eight
# analyses of 20k events (12.4 s on 2 cores) brought the JIT's compiling during the 1M-event
# analysis that followed below what it was in the fourth analysis of a JVM without a warm-up
# (0.51 against 1.14 core-s; bench/results/analytics-jit-1m-ffc40a7.json). The history has the
# benchmarks' shape (30 brokers, 10k partitions) and no violation: a history with one of each
# takes Spark's slower paths for them (an analysis took several times as long), which warms what
# a healthy cluster's analyses never run.
DEFAULT_WARMUP_RUNS = 8
WARMUP_EVENTS = 20_000
WARMUP_SEED = 20_000
EXIT_OK, EXIT_BAD_INPUT = 0, 2
# A URL's scheme (hdfs://, s3a://, file:): such a path goes to Spark as it is.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True)
class AnalysisRequest:
    logdirs: tuple[str, ...]
    out: str
    cluster_by: ClusterBy


def is_url(path: str) -> bool:
    return bool(_SCHEME.match(path))


def request_of(logdirs: list[str], out: str, cluster_by: str) -> AnalysisRequest:
    """A request's fields checked: raises InputError naming the first bad one."""
    from controller_svc.analytics.ingest import ClusterBy, InputError

    if not logdirs:
        raise InputError("no log directories given (logdirs is empty)")
    if not out:
        raise InputError("no output directory given (out is empty)")
    for path in [*logdirs, out]:
        if not path.strip():
            raise InputError("an empty path")
        if "\0" in path:
            raise InputError(f"{path!r}: a path with a NUL character")
        if not is_url(path) and not os.path.isabs(path):
            raise InputError(f"{path}: a relative path (the service cannot know the client's working directory)")
    if cluster_by not in ("", "none", "dir"):
        raise InputError(f"cluster_by {cluster_by!r}: expected none or dir")
    return AnalysisRequest(tuple(logdirs), out, ClusterBy(cluster_by or "none"))


def client_path(path: str, cwd: str | None = None) -> str:
    """The path as the service should see it: a local path made absolute against the client's
    working directory, a URL as it is."""
    if is_url(path) or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(cwd or os.getcwd(), path))


@dataclass(frozen=True)
class Answer:
    """What one request got; `response()` is its gRPC message."""

    error_code: ErrorCode
    error_message: str = ""
    exit_code: int = EXIT_BAD_INPUT
    summary_json: str = ""
    summary_path: str = ""
    report_path: str = ""
    queued_s: float = 0.0
    analysis_s: float = 0.0

    @property
    def outcome(self) -> str:
        """The metric's label."""
        if self.error_code == ErrorCode.NONE:
            return "violations" if self.exit_code == 1 else "no_violations"
        return {
            ErrorCode.INVALID_REQUEST: "bad_input",
            ErrorCode.THROTTLING_QUOTA_EXCEEDED: "queue_full",
        }.get(self.error_code, "failed")

    def response(self) -> analysis_pb2.AnalyzeResponse:
        from kcontroller.v1 import analysis_pb2

        return analysis_pb2.AnalyzeResponse(
            error_code=int(self.error_code),
            error_message=self.error_message,
            exit_code=self.exit_code,
            summary_json=self.summary_json,
            summary_path=self.summary_path,
            report_path=self.report_path,
            queued_s=round(self.queued_s, 3),
            analysis_s=round(self.analysis_s, 3),
        )


def answer_of(outcome: job.Outcome, queued_s: float, analysis_s: float) -> Answer:
    return Answer(
        ErrorCode.NONE,
        exit_code=outcome.exit_code,
        summary_json=json.dumps(outcome.summary),
        summary_path=outcome.summary_path,
        report_path=outcome.report_path,
        queued_s=queued_s,
        analysis_s=analysis_s,
    )


@dataclass(frozen=True)
class WarmUp:
    """What the warm-up did: `runs` analyses made, `wrong` of them disagreeing with the history's
    known answers, `failed` of them (or the history's generation) raising; `seconds` in all."""

    runs: int = 0
    wrong: int = 0
    failed: int = 0
    seconds: float = 0.0


def warm_up(spark: SparkSession, runs: int, stopping: Callable[[], bool], lost: Callable[[], None]) -> WarmUp:
    """Analyses a generated history (synthetic.generate, WARMUP_EVENTS records) `runs` times in
    `spark`, each checked against its known answers, in a temporary directory removed after.
    Stops early once `stopping()` says so, or after calling `lost()` if Spark's JVM is gone.
    Never raises: a failure is logged and counted, and the service serves anyway (the warm-up
    only makes the first requests faster; a wrong answer is logged as an error, since every
    analysis runs the same code)."""
    from controller_svc.analytics import job, service_metrics, synthetic

    if runs <= 0:
        return WarmUp()
    started = time.monotonic()
    made = wrong = failed = 0
    base = tempfile.mkdtemp(prefix="kcontroller-warmup-")
    try:
        logs = os.path.join(base, "logs")
        try:
            expected = synthetic.generate(
                logs,
                WARMUP_EVENTS,
                brokers=30,
                partitions=10_000,
                seed=WARMUP_SEED,
            ).as_json()
        except Exception:  # a full or unwritable temporary directory
            log.exception("warm-up: could not write its history in %s; serving without a warm-up", base)
            service_metrics.WARMUP_RUNS.labels("failed").inc()
            return WarmUp(failed=1, seconds=time.monotonic() - started)
        for index in range(runs):
            if stopping():
                break
            run_started = time.monotonic()
            made += 1
            try:
                outcome = job.analyze(spark, [logs], os.path.join(base, "out"))
            except Exception:
                failed += 1
                log.exception("warm-up: analysis %d of %d failed", index + 1, runs)
                service_metrics.WARMUP_RUNS.labels("failed").inc()
                if not jvm_alive(spark):
                    log.error("Spark's JVM is gone: the service stops")
                    lost()
                    break
                continue
            differences = synthetic.differences(outcome.summary, expected)
            if differences:
                wrong += 1
                log.error(
                    "warm-up: analysis %d disagrees with its history's known answers: %s",
                    index + 1,
                    "; ".join(differences),
                )
                service_metrics.WARMUP_RUNS.labels("wrong_answers").inc()
            else:
                service_metrics.WARMUP_RUNS.labels("known_answers").inc()
            log.info("warm-up: analysis %d of %d in %.1f s", index + 1, runs, time.monotonic() - run_started)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        release_freed_memory()
    return WarmUp(made, wrong, failed, time.monotonic() - started)


def release_freed_memory() -> None:
    """Gives back to the system the memory Arrow's pool kept after an analysis freed it: its
    allocator (mimalloc or jemalloc) keeps freed pages for the next allocation, which in a
    service idle between analyses only holds resident memory (the driver's Arrow memory in use
    is nothing between analyses). Twenty 1M-event analyses: the service's Python 237-400 MB
    with it, 358-487 MB without (bench/results/analytics-service-memory-1m-release.json,
    -1m-before-release-de126e3.json)."""
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.default_memory_pool().release_unused()


class SessionBrokenError(RuntimeError):
    """Spark's JVM is gone: the service cannot analyse any more."""


def jvm_alive(spark: SparkSession) -> bool:
    try:
        return not spark.sparkContext._jsc.sc().isStopped()
    except Exception:  # Py4J's connection to a dead JVM
        return False


class Analyses:
    """The analyses of the service's one session, one at a time: the owner of the queue.
    `submit` runs on the event loop; each analysis runs on the `analysis` thread."""

    def __init__(self, spark: SparkSession, max_queued: int = DEFAULT_MAX_QUEUED) -> None:
        from controller_svc.analytics import service_metrics

        self._spark = spark
        self._max_queued = max_queued
        self._turn = asyncio.Lock()
        self._admitted = 0  # requests waiting or running
        self._metrics = service_metrics
        # Made on the event loop (serve): where the analysis thread reports a lost JVM.
        self._loop = asyncio.get_running_loop()
        self.closing = False
        self.broken = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        # The analyses' own thread: PySpark's calls block, and one analysis runs at a time.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="analysis")

    async def submit(self, logdirs: list[str], out: str, cluster_by: str) -> Answer:
        from controller_svc.analytics.ingest import InputError

        try:
            request = request_of(logdirs, out, cluster_by)
        except InputError as e:
            log.warning("analysis refused: bad request: %s", e)
            return self._counted(Answer(ErrorCode.INVALID_REQUEST, f"bad input: {e}"))
        if self.closing or self.broken.is_set():
            raise SessionBrokenError("the analysis service is stopping")
        if self._admitted > self._max_queued:
            log.warning("analysis refused: %d analyses already waiting", self._admitted - 1)
            return self._counted(
                Answer(
                    ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                    f"the queue is full: {self._admitted - 1} analyses waiting (at most {self._max_queued})",
                )
            )
        queued_at = time.monotonic()
        with self._admission():
            async with self._turn:
                if self.closing or self.broken.is_set():
                    raise SessionBrokenError("the analysis service is stopping")
                queued_s = time.monotonic() - queued_at
                log.info("analysis of %s into %s (waited %.1f s)", ", ".join(request.logdirs), request.out, queued_s)
                # Shielded: a client that leaves does not stop its analysis half-way through
                # OUTDIR; the queue's turn passes on only once the analysis has ended.
                runner = self._loop.run_in_executor(self._thread, self._analyze, request, queued_s)
                try:
                    answer = await asyncio.shield(runner)
                except asyncio.CancelledError:
                    log.warning("the client of the analysis into %s left; the analysis goes on", request.out)
                    await asyncio.wait([runner])
                    raise
        return self._counted(answer)

    async def warm_up(self, runs: int) -> WarmUp:
        """The start-up warm-up (warm_up) on the analysis thread, as the running analysis:
        requests that arrive meanwhile wait behind it (and count against the queue's bound as
        behind any analysis); drain lets its current analysis end and skips the rest."""
        with self._admission():
            async with self._turn:
                runner = self._loop.run_in_executor(
                    self._thread, warm_up, self._spark, runs, lambda: self.closing, self._spark_lost
                )
                # Shielded like an analysis: Spark's work on the thread cannot be cancelled.
                try:
                    done = await asyncio.shield(runner)
                except asyncio.CancelledError:
                    await asyncio.wait([runner])
                    raise
        self._metrics.WARMUP_TIME_MS.set(done.seconds * 1000.0)
        return done

    @contextlib.contextmanager
    def _admission(self) -> Iterator[None]:
        """One more analysis running or waiting, for as long as the block runs."""
        self._admitted += 1
        self._idle.clear()
        self._metrics.QUEUED.set(self._admitted)
        try:
            yield
        finally:
            self._admitted -= 1
            self._metrics.QUEUED.set(self._admitted)
            if self._admitted == 0:
                self._idle.set()

    def _analyze(self, request: AnalysisRequest, queued_s: float) -> Answer:
        try:
            return self._analysis(request, queued_s)
        finally:
            release_freed_memory()

    def _analysis(self, request: AnalysisRequest, queued_s: float) -> Answer:
        from controller_svc.analytics import job
        from controller_svc.analytics.ingest import InputError

        started = time.monotonic()
        try:
            outcome = job.analyze(self._spark, list(request.logdirs), request.out, request.cluster_by)
        except InputError as e:
            log.warning("analysis into %s: bad input: %s", request.out, e)
            return Answer(ErrorCode.INVALID_REQUEST, f"bad input: {e}", queued_s=queued_s)
        except Exception as e:  # unreadable input, an unwritable OUTDIR, a JVM that died
            log.exception("analysis into %s failed", request.out)
            if not jvm_alive(self._spark):
                log.error("Spark's JVM is gone: the service stops")
                self._spark_lost()
            first_line = str(e).splitlines()[0] if str(e) else ""
            return Answer(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"the analysis failed: {type(e).__name__}: {first_line}",
                queued_s=queued_s,
                analysis_s=time.monotonic() - started,
            )
        analysis_s = time.monotonic() - started
        log.info("analysis into %s done in %.1f s (exit %d)", request.out, analysis_s, outcome.exit_code)
        return answer_of(outcome, queued_s, analysis_s)

    def _spark_lost(self) -> None:
        self._loop.call_soon_threadsafe(self.broken.set)

    def _counted(self, answer: Answer) -> Answer:
        self._metrics.REQUESTS.labels(answer.outcome).inc()
        if answer.analysis_s:
            self._metrics.ANALYSIS_TIME_MS.observe(answer.analysis_s * 1000.0)
        return answer

    async def drain(self) -> None:
        """Once closing: the running analysis ends, the waiting ones are refused."""
        self.closing = True
        await self._idle.wait()
        self._thread.shutdown(wait=False)


def servicer(analyses: Analyses) -> Any:
    import grpc

    from controller_svc.analytics import service_metrics
    from kcontroller.v1 import analysis_pb2_grpc

    class AnalysisServicer(analysis_pb2_grpc.AnalysisServicer):
        async def Analyze(
            self, request: analysis_pb2.AnalyzeRequest, context: grpc.aio.ServicerContext
        ) -> analysis_pb2.AnalyzeResponse:
            try:
                answer = await analyses.submit(list(request.logdirs), request.out, request.cluster_by)
            except SessionBrokenError as e:
                service_metrics.REQUESTS.labels("unavailable").inc()
                await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
            return answer.response()

    return AnalysisServicer()


async def serve(spark: SparkSession, listen: str, max_queued: int, warmup_runs: int = 0) -> int:
    """Serves until SIGTERM/SIGINT (0) or until Spark's JVM is lost (1); NOT_SERVING until the
    warm-up of `warmup_runs` analyses has ended, while requests already queue."""
    import grpc

    from controller_svc.common import grpc_common, tls
    from kcontroller.v1 import analysis_pb2_grpc

    analyses = Analyses(spark, max_queued)
    loop = asyncio.get_running_loop()
    server = grpc.aio.server()
    analysis_pb2_grpc.add_AnalysisServicer_to_server(servicer(analyses), server)
    health = grpc_common.Health(server, [SERVICE_NAME])
    grpc_common.enable_reflection(server, [SERVICE_NAME])
    port = grpc_common.bind(server, listen, tls.from_env())
    await health.set_serving(False)
    await server.start()
    address = listen if listen.startswith("unix:") else f"{listen.rpartition(':')[0]}:{port}"
    log.info("analysis service listening on %s (Spark %s)", address, spark.version)
    print(f"analyze-service: listening on {address}", flush=True)

    async def warm_then_serve() -> None:
        done = await analyses.warm_up(warmup_runs)
        if analyses.closing or analyses.broken.is_set():
            return
        await health.set_serving(True)
        log.info(
            "analysis service ready: warm-up of %d analyses (%d wrong, %d failed) in %.1f s",
            done.runs,
            done.wrong,
            done.failed,
            done.seconds,
        )
        print(f"analyze-service: ready after a warm-up of {done.runs} analyses in {done.seconds:.1f} s", flush=True)

    warming = asyncio.ensure_future(warm_then_serve())
    warming.add_done_callback(_log_failure)
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    stop_wait = asyncio.ensure_future(stopping.wait())
    broken_wait = asyncio.ensure_future(analyses.broken.wait())
    await asyncio.wait([stop_wait, broken_wait], return_when=asyncio.FIRST_COMPLETED)
    stop_wait.cancel()
    broken_wait.cancel()
    await health.set_serving(False)
    if analyses.broken.is_set():
        await server.stop(grace=1.0)
        warming.cancel()
        return 1
    log.info("stopping: the running analysis finishes, the waiting ones are refused")
    await analyses.drain()
    await asyncio.wait([warming])
    await server.stop(grace=1.0)
    return 0


def _log_failure(task: asyncio.Future[None]) -> None:
    """A background task of the service that raised: logged, never silent."""
    if not task.cancelled() and task.exception() is not None:
        log.error("the analysis service's warm-up task failed", exc_info=task.exception())


def run_service(
    master: str,
    conf: dict[str, str],
    listen: str,
    max_queued: int,
    metrics_listen: str | None,
    log_level: str,
    warmup_runs: int = DEFAULT_WARMUP_RUNS,
) -> int:
    """`controller-svc analyze-service`: Spark's start, then serve (the arguments checked by cli.py)."""
    import uvloop

    from controller_svc.analytics import session
    from controller_svc.common import logging_setup, tls

    try:
        tls.from_env()
        java_setup = session.check_runtime()
    except (ValueError, session.SparkUnavailableError) as e:
        print(f"analyze-service: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    logging_setup.setup("analysis-service", log_level)
    if metrics_listen:
        from controller_svc.common import grpc_common

        host, _, port = metrics_listen.rpartition(":")
        try:
            grpc_common.serve_metrics(host, int(port))
        except (OSError, ValueError) as e:
            print(f"analyze-service: --metrics-listen {metrics_listen}: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    archive = session.locate_class_archive(java_setup)
    try:
        spark = session.build(master, conf, app_name="kcontroller-analysis-service", archive=archive)
    except Exception as e:
        print(f"analyze-service: could not start Spark ({master}): {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    code = 1
    try:
        code = uvloop.run(serve(spark, listen, max_queued, warmup_runs))
    except OSError as e:  # the address is taken or not ours
        print(f"analyze-service: cannot listen on {listen}: {e}", file=sys.stderr)
        code = EXIT_BAD_INPUT
    finally:
        if jvm_alive(spark):
            session.stop(spark, archive)
    return code


def request_analysis(address: str, logdirs: list[str], out: str, cluster_by: str) -> analysis_pb2.AnalyzeResponse:
    """One Analyze call, with the KCONTROLLER_TLS_* settings; local paths made absolute here.
    Raises grpc.RpcError (no service at `address`, a service stopping) or ValueError (bad TLS
    settings)."""
    from controller_svc.common import tls
    from kcontroller.v1 import analysis_pb2, analysis_pb2_grpc

    credentials = tls.from_env()
    request = analysis_pb2.AnalyzeRequest(
        logdirs=[client_path(p) for p in logdirs], out=client_path(out), cluster_by=cluster_by
    )
    with tls.channel(address, credentials) as channel:
        response: analysis_pb2.AnalyzeResponse = analysis_pb2_grpc.AnalysisStub(channel).Analyze(request)
    return response
