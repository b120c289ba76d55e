"""Starting Spark for the analytics: `local[*]` by default, any master URL for a real cluster."""

from __future__ import annotations

import hashlib
import logging
import os
import pathlib
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from controller_svc.analytics import class_archive

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("analytics")

LOG4J_CONFIG = pathlib.Path(__file__).with_name("log4j2.properties")
JIT_OPTIONS = "-XX:-DontCompileHugeMethods -XX:+UseParallelGC"
# Spark keeps the classes it generates for a query's code (whole-stage code, projections,
# orderings) in a cache of 100 by default. One analysis compiles about 560 distinct ones, so with
# 100 every later run in the same JVM (a notebook, a service, the benchmark's warm runs) compiled
# them all again: ~585 per 1M-event run, ~3 s of Janino on the driver while the cores waited.
# With room for a few runs' classes, a later run compiles a few dozen at most (those of plans
# that adaptive execution shaped differently this time; 1M events, warm JVM: 22.5 -> 16.7 s).
# A new process gains little (a run reuses few of its own classes). A class costs a few KB to
# a few hundred KB of metaspace.
CODEGEN_CACHE_ENTRIES = 2000
# Up to this many input paths, a local master lists them without a Spark job (build).
LOCAL_LISTING_PATHS = 100_000
WORKER_DAEMON_MODULE = "controller_svc.analytics.worker_daemon"


class SparkUnavailableError(RuntimeError):
    """PySpark or a Java runtime is missing: the analytics cannot run on this machine."""


def check_runtime() -> str:
    """Raises SparkUnavailableError unless PySpark and Java 17+ are here; returns what
    identifies the Java build (its path and `java -version`)."""
    try:
        import pyspark  # noqa: F401
    except ImportError as e:
        raise SparkUnavailableError(
            "PySpark is not installed: `pip install 'kcontroller[analytics]'` (./dev setup does it)"
        ) from e
    java_home = os.environ.get("JAVA_HOME")
    java = str(pathlib.Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    hint = "Spark 4 needs Java 17 or newer (`apt-get install default-jre-headless`, or set JAVA_HOME)"
    if java is None or not pathlib.Path(java).exists():
        raise SparkUnavailableError(f"no Java runtime: {hint}")
    banner = java_version_banner(java)
    version = java_major_version(banner)
    if version is not None and version < 17:
        raise SparkUnavailableError(f"{java} is Java {version}: {hint}")
    return f"{os.path.realpath(java)}\n{banner}"


def java_version_banner(java: str) -> str:
    """What `java -version` prints, or "" when it cannot run."""
    try:
        result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    # Without the JVM's notes of options taken from the environment ("Picked up
    # JAVA_TOOL_OPTIONS: ..."): they say nothing of the build, and vary between runs.
    text = result.stderr + result.stdout
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("Picked up "))


def java_major_version(banner: str) -> int | None:
    match = re.search(r'version "(\d+)(?:\.(\d+))?', banner)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def is_local(master: str) -> bool:
    return master.startswith("local")


def local_cores(master: str) -> int:
    """The cores a local[N] / local[*] master uses."""
    inside = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
    if inside in ("*", ""):
        return os.cpu_count() or 1
    try:
        return max(1, int(inside.split(",")[0]))
    except ValueError:
        return os.cpu_count() or 1


def default_driver_memory() -> str:
    """A quarter of the machine, between 1 and 8 GiB: enough for the shuffles of 10M events."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return "2g"
    gib = max(1, min(8, total // (4 << 30)))
    return f"{gib}g"


def driver_java_options() -> str:
    return f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()} {JIT_OPTIONS}"


def job_code_digest(package: pathlib.Path = pathlib.Path(__file__).parent) -> str:
    """A digest of the analytics' own modules. Which of Spark's classes a run loads depends on
    this code as well (another format for the events table, say, brings in another writer and
    reader), and an archive recorded by an older version would leave the new classes to be
    loaded from the jars on every cold start: a change of the code records it again (once)."""
    digest = hashlib.sha256()
    for source in sorted(package.glob("*.py")):
        digest.update(source.name.encode("utf-8") + b"\0" + source.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def locate_class_archive(java_setup: str) -> class_archive.ClassArchive | None:
    """This machine's class archive for the driver JVM as build() starts it (class_archive.py):
    keyed by the Java build, the PySpark installation (its jars are the class path), the JVM
    options and the analytics' code (job_code_digest)."""
    import pyspark

    setup = "\n".join(
        [java_setup, pyspark.__version__, os.path.realpath(pyspark.__file__), driver_java_options(), job_code_digest()]
    )
    archive = class_archive.locate(setup)
    if archive is not None and archive.recording_wanted():
        archive.check_can_record(java_setup.partition("\n")[0])
    return archive


def build(
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    app_name: str = "kcontroller-analyze",
    archive: class_archive.ClassArchive | None = None,
) -> SparkSession:
    """A SparkSession for the analytics. Settings that only take effect when the JVM starts
    (driver memory, log4j, the class archive) apply to the first session of the process. With
    `archive`, the driver starts from it, or records it (then end with `stop(spark, archive)`)."""
    check_runtime()
    from pyspark.sql import SparkSession

    driver_options = driver_java_options()
    if archive is not None:
        driver_options += " " + archive.java_options()

    settings: dict[str, str] = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.codegen.cache.maxEntries": str(CODEGEN_CACHE_ENTRIES),
        # Spark names a whole-stage class after its stage's number in the query (SPARK-23032,
        # for readable stack traces), so two stages with the same code (a table read back the
        # same way in two queries, the sides of a union) were compiled twice: the codegen cache
        # is keyed on the source text. Without the number they share one class: a cold run at
        # 1M events compiled 432 classes instead of 462 (Janino, then the JIT's work on it;
        # bench.analytics_codegen).
        "spark.sql.codegen.useIdInClassName": "false",
        "spark.sql.parquet.compression.codec": "zstd",
        # The job caches a few frames it reads twice (the leadership timeline: 827k rows at 10M
        # events) and only until the tables built from them are written: compressing their
        # columns cost more than it saved (10M events: leadership 4.4 -> 3.8 s warm, 12.4 ->
        # 9.9 s in a new JVM). The cache may spill to disk (MEMORY_AND_DISK) when memory is short.
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        # PySpark's DataFrame query context: for every call that builds a query, the Python call
        # site is captured (a walk of the stack) and sent to the JVM, several Py4J round trips
        # while the cores wait for the plan. Off, a run sends about half the Py4J calls and takes
        # about a second less whatever its size (20k events: 18.3k -> 9.9k calls, 7.86 -> 6.91 s,
        # faster in 8 of 8 interleaved rounds; bench.analytics_query_context). Spark's analysis
        # errors then name the failing expression without the Python line that built it.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # The analyses run in concurrent branches (job.run_branches), each in a scheduler pool
        # of its own: FAIR shares the cores between the pools, where FIFO (the default) let one
        # branch's large stage hold both cores while another's small jobs waited.
        "spark.scheduler.mode": "FAIR",
        # Whole-stage code for the ingest's validation of ~30 fields is one method over HotSpot's
        # 8000-byte limit for JIT compilation; left interpreted it doubled the parse (10M lines:
        # 34 s -> 23 s with the limit lifted). A batch job wants throughput, not short pauses:
        # the parallel collector took the whole 10M-event analysis from 92 s to 82 s.
        "spark.driver.extraJavaOptions": driver_options,
        "spark.executor.extraJavaOptions": JIT_OPTIONS,
    }
    if is_local(master):
        # Spark's default of 200 shuffle partitions is made for clusters; locally, one per core:
        # two per core (4 on 2 cores) left more tasks and stages' tails for the same work (1M
        # events warm: 21.4 -> 19.7 s, medians of 3 interleaved; 10M: no change beyond the noise).
        settings["spark.sql.shuffle.partitions"] = str(max(2, local_cores(master)))
        settings["spark.driver.memory"] = default_driver_memory()
        # Python tasks (the ingest's fast path, arrow_ingest.py) run in the driver's own Python,
        # with its packages, rather than whatever `python3` is first on the PATH (PySpark's
        # default; it reads only the environment for its workers' interpreter).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # That Python has this package, so its workers can start from worker_daemon, where a
        # task no longer re-reads the zip archives on the workers' import path (CPython
        # gh-103200): about 180 ms a task on 2 cores (bench.analytics_python_tasks).
        settings["spark.python.daemon.module"] = WORKER_DAEMON_MODULE
        # Spark lists more than 32 input paths (or subdirectories) with a Spark job of its own
        # (InMemoryFileIndex.bulkListLeafFiles), made for remote file systems; a local master
        # lists local files in its own JVM either way, and the job only adds a stage of
        # scheduling, the first of a cold run: a 33-file history (1M or 10M events) paid 0.76 s
        # for it before the ingest's tasks (bench/results/stages-1m-analytics-5a58668.json).
        settings["spark.sql.sources.parallelPartitionDiscovery.threshold"] = str(LOCAL_LISTING_PATHS)
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


JVM_EXIT_WAIT_S = 300.0


def stop(spark: SparkSession, archive: class_archive.ClassArchive | None = None) -> None:
    """Stops the session. When its JVM was started to record a class archive, also ends that
    JVM (it writes the archive as it exits), waits for it and puts the archive in place."""
    spark.stop()
    if archive is None or not archive.recording_wanted():
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)  # None when PySpark joined a JVM it did not start
    if gateway is None or process is None:
        return
    log.info("Spark's driver is saving its class archive (once per machine and set-up)")
    gateway.shutdown()
    try:
        if process.stdin is not None:
            process.stdin.close()  # PySpark's JVM exits when its stdin closes
        code = process.wait(timeout=JVM_EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        log.warning("Spark's driver JVM did not exit within %.0f s; no class archive this time", JVM_EXIT_WAIT_S)
        process.kill()
        code = None
    finally:
        # The next session of this process (if any) starts a JVM of its own.
        SparkContext._gateway = None
        SparkContext._jvm = None
    archive.commit(code)
