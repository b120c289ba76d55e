"""Starting Spark for the analytics: `local[*]` by default, any master URL for a real cluster."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOG4J_CONFIG = pathlib.Path(__file__).with_name("log4j2.properties")
JIT_OPTIONS = "-XX:-DontCompileHugeMethods -XX:+UseParallelGC"


class SparkUnavailableError(RuntimeError):
    """PySpark or a Java runtime is missing: the analytics cannot run on this machine."""


def check_runtime() -> None:
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
    version = java_major_version(java)
    if version is not None and version < 17:
        raise SparkUnavailableError(f"{java} is Java {version}: {hint}")


def java_major_version(java: str) -> int | None:
    try:
        result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr + result.stdout)
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


def build(
    master: str = "local[*]", conf: Mapping[str, str] | None = None, app_name: str = "kcontroller-analyze"
) -> SparkSession:
    """A SparkSession for the analytics. Settings that only take effect when the JVM starts
    (driver memory, log4j) apply to the first session of the process."""
    check_runtime()
    from pyspark.sql import SparkSession

    settings: dict[str, str] = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.parquet.compression.codec": "zstd",
        # Whole-stage code for the ingest's validation of ~30 fields is one method over HotSpot's
        # 8000-byte limit for JIT compilation; left interpreted it doubled the parse (10M lines:
        # 34 s -> 23 s with the limit lifted). A batch job wants throughput, not short pauses:
        # the parallel collector took the whole 10M-event analysis from 92 s to 82 s.
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()} {JIT_OPTIONS}",
        "spark.executor.extraJavaOptions": JIT_OPTIONS,
    }
    if is_local(master):
        # Spark's default of 200 shuffle partitions is made for clusters; a laptop wants a few per core.
        settings["spark.sql.shuffle.partitions"] = str(max(4, 2 * local_cores(master)))
        settings["spark.driver.memory"] = default_driver_memory()
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
