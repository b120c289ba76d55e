"""Where a cold `controller-svc analyze` spends its time, step by step, from the JVM's own
Java Flight Recorder (JDK 11+, no agent to install):

    python -m bench.analytics_profile --events 10000000 --out bench/results/FILE.txt

Runs the analysis once in this process on a new JVM (as `bench.analytics` generates the history),
with a recording started through the JVM's jdk.jfr API just before the job (Spark's start-up
is not in it). Per step of the job (its `timings_s`), prints:

- Java samples: how many, and the share of the two task threads' possible samples they fill
  (the rest of the step's CPU went to JIT compilation, GC, native code, or was idle);
- where the samples are, by area (JSON parse, Parquet write, sort, window, ...: the first
  matching frame from the top of the stack) and by top frame;
- C2 and C1 compile seconds started in the step (jdk.Compilation, every compile recorded), and GC.

The recording is kept (`--jfr`, in the benchmark's directory by default; ~10 MB, not for
bench/results) for `jfr print` or JDK Mission Control.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import logging
import os
import pathlib
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator
from typing import Any

from bench import analytics as bench_analytics
from bench import common

# The first frame from the top of a stack that matches names its area (order matters: a Parquet
# write called from a sort's iterator is the write).
AREAS: tuple[tuple[str, str], ...] = (
    ("json parse", r"com\.fasterxml\.jackson|catalyst\.json\.|FailureSafeParser|ResolveDefaultColumns"),
    ("text lines", r"hadoop\.util\.LineReader|LineRecordReader|HadoopFileLinesReader"),
    ("parquet write", r"org\.apache\.parquet\.(hadoop|column|io)\.|ParquetWriteSupport|ParquetOutputWriter"),
    ("parquet read", r"parquet\.Vectorized|VectorizedColumnReader|ParquetFileFormat|ParquetReadSupport"),
    ("zstd", r"zstd"),
    ("sort", r"TimSort|UnsafeInMemorySorter|UnsafeExternalSorter|UnsafeExternalRowSorter|RadixSort"),
    ("window", r"execution\.window\."),
    ("shuffle", r"org\.apache\.spark\.shuffle\.|ShuffleExternalSorter|BlockStoreShuffleReader"),
    ("hash aggregate / join", r"BytesToBytesMap|UnsafeFixedWidthAggregationMap|HashedRelation|hashAgg_|bhj_"),
    ("codegen compile (Janino)", r"org\.codehaus\.(janino|commons)|CodeGenerator\$"),
    ("query planning", r"catalyst\.(analysis|optimizer|planning|rules|trees)\.|QueryExecution|SparkPlanner"),
    ("generated code", r"GeneratedClass"),
    ("serialization", r"ObjectInputStream|ObjectOutputStream|JavaSerializer|KryoSerializer"),
)
_AREA_PATTERNS = [(area, re.compile(pattern)) for area, pattern in AREAS]
# What a JIT compile compiled: the job's own generated classes, or the code that makes them
# (Janino, Catalyst), or the rest (Spark's core, Parquet, Jackson, Scala and Java libraries).
COMPILED_GROUPS: tuple[tuple[str, str], ...] = (
    ("generated classes", r"GeneratedClass"),
    ("Janino", r"^org\.codehaus\."),
    ("Catalyst", r"^org\.apache\.spark\.sql\.catalyst\."),
)
_COMPILED_PATTERNS = [(group, re.compile(pattern)) for group, pattern in COMPILED_GROUPS]
TASK_THREADS_HINT = "Executor task launch worker"
JFR_SAMPLE_PERIOD_S = 0.010  # the "profile" configuration's Java sampling period


@dataclasses.dataclass(frozen=True)
class Sample:
    at: datetime.time
    thread: str
    frames: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Compile:
    at: datetime.time
    seconds: float
    compiler: str
    method: str


@dataclasses.dataclass(frozen=True)
class GcPause:
    at: datetime.time
    seconds: float


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """`jfr print`'s durations ("133 ms", "1.02 s", "45.5 us", "2 min 3 s") in seconds."""
    total = 0.0
    for number, unit in re.findall(r"([\d.]+)\s*(ns|us|ms|min|s|h)\b", text):
        total += float(number) * _DURATION_UNITS[unit]
    return total


def parse_time(text: str) -> datetime.time:
    """`jfr print`'s start times ("04:57:01.123", the recording machine's local time)."""
    return datetime.time.fromisoformat(text.strip()[:12])


def parse_events(lines: Iterable[str]) -> Iterator[Sample | Compile | GcPause]:
    """Events of `jfr print` text output (jdk.ExecutionSample, jdk.Compilation,
    jdk.GarbageCollection), streamed: a 10M-event analysis records ~40k samples."""
    kind: str | None = None
    fields: dict[str, str] = {}
    frames: list[str] = []
    in_stack = False
    for raw in lines:
        line = raw.rstrip("\n")
        if line.endswith("{") and not line.startswith(" "):
            kind, fields, frames, in_stack = line.split()[0], {}, [], False
            continue
        if kind is None:
            continue
        stripped = line.strip()
        if line == "}":
            event = _event(kind, fields, frames)
            if event is not None:
                yield event
            kind = None
        elif in_stack:
            if stripped == "]":
                in_stack = False
            elif stripped != "...":
                frames.append(stripped.split("(")[0])
        elif stripped.startswith("stackTrace = ["):
            in_stack = True
        elif " = " in stripped:
            key, _, value = stripped.partition(" = ")
            fields.setdefault(key, value)


def _event(kind: str, fields: dict[str, str], frames: list[str]) -> Sample | Compile | GcPause | None:
    if "startTime" not in fields:
        return None
    at = parse_time(fields["startTime"])
    if kind == "jdk.ExecutionSample":
        thread = fields.get("sampledThread", "").split('"')[1] if '"' in fields.get("sampledThread", "") else ""
        return Sample(at, thread, tuple(frames))
    if kind == "jdk.Compilation":
        return Compile(
            at,
            parse_duration(fields.get("duration", "")),
            fields.get("compiler", "").strip('"'),
            fields.get("method", ""),
        )
    if kind == "jdk.GarbageCollection":
        return GcPause(at, parse_duration(fields.get("sumOfPauses", fields.get("duration", ""))))
    return None


def area_of(frames: tuple[str, ...]) -> str:
    for frame in frames:
        for area, pattern in _AREA_PATTERNS:
            if pattern.search(frame):
                return area
    return "other"


@dataclasses.dataclass
class StepProfile:
    name: str
    start: datetime.time
    end: datetime.time
    wall_s: float
    samples: int = 0
    task_samples: int = 0
    areas: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    top_frames: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    compile_s: collections.defaultdict[str, float] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(float)
    )
    longest_compiles: list[tuple[float, str]] = dataclasses.field(default_factory=list)
    # (compiler, group) -> [compiles, seconds]
    compiled: dict[tuple[str, str], list[float]] = dataclasses.field(default_factory=dict)
    gc_s: float = 0.0


def compiled_group(method: str) -> str:
    for group, pattern in _COMPILED_PATTERNS:
        if pattern.search(method):
            return group
    return "other"


def attribute(events: Iterable[Sample | Compile | GcPause], steps: list[StepProfile]) -> None:
    """Counts each event in the step whose [start, end) holds its start time."""

    def step_of(at: datetime.time) -> StepProfile | None:
        for step in steps:
            if step.start <= at < step.end:
                return step
        return None

    for event in events:
        step = step_of(event.at)
        if step is None:
            continue
        if isinstance(event, Sample):
            step.samples += 1
            if TASK_THREADS_HINT in event.thread:
                step.task_samples += 1
            step.areas[area_of(event.frames)] += 1
            if event.frames:
                step.top_frames[event.frames[0]] += 1
        elif isinstance(event, Compile):
            step.compile_s[event.compiler] += event.seconds
            step.longest_compiles.append((event.seconds, event.method))
            tally = step.compiled.setdefault((event.compiler, compiled_group(event.method)), [0, 0.0])
            tally[0] += 1
            tally[1] += event.seconds
        else:
            step.gc_s += event.seconds


def render(steps: list[StepProfile], cores: int, top: int, header: str) -> str:
    lines = [header]
    total_wall = sum(s.wall_s for s in steps)
    total_compile = sum(sum(s.compile_s.values()) for s in steps)
    lines.append(
        f"job: {total_wall:.1f} s over {len(steps)} steps; JIT compiles started in them: "
        f"{total_compile:.1f} s (c2 {sum(s.compile_s['c2'] for s in steps):.1f} s); "
        f"GC pauses {sum(s.gc_s for s in steps):.1f} s"
    )
    for compiler in ("c2", "c1"):
        groups = [group for group, _ in COMPILED_GROUPS] + ["other"]
        tallies = {g: [sum(s.compiled.get((compiler, g), [0, 0.0])[i] for s in steps) for i in (0, 1)] for g in groups}
        lines.append(
            f"{compiler} by what it compiled: "
            + ", ".join(f"{g} {tallies[g][1]:.1f} s ({int(tallies[g][0])} compiles)" for g in groups)
        )
    for step in steps:
        possible = max(1.0, step.wall_s * cores / JFR_SAMPLE_PERIOD_S)
        lines.append("")
        lines.append(
            f"== {step.name}: {step.wall_s:.1f} s; {step.samples} Java samples "
            f"({step.task_samples} in task threads, "
            f"{100 * step.task_samples / possible:.0f}% of {cores} cores' possible); "
            f"compiles c2 {step.compile_s['c2']:.1f} s, c1 {step.compile_s['c1']:.1f} s; GC {step.gc_s:.1f} s"
        )
        if step.samples == 0:
            continue
        lines.append(
            "   by area: " + ", ".join(f"{area} {100 * n / step.samples:.0f}%" for area, n in step.areas.most_common())
        )
        lines.append("   top frames:")
        for frame, n in step.top_frames.most_common(top):
            lines.append(f"     {100 * n / step.samples:5.1f}%  {frame}")
        longest = sorted(step.longest_compiles, reverse=True)[:3]
        if longest:
            lines.append("   longest compiles: " + "; ".join(f"{s:.2f} s {m}" for s, m in longest))
    return "\n".join(lines) + "\n"


class _StepTimes(logging.Handler):
    """The wall-clock end of each step, from the job's own "<step> done in" log lines."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.ends: list[tuple[str, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if " done in " in message:
            self.ends.append((message.split(" done in ")[0], record.created))


def jfr_tool() -> str:
    java = shutil.which("java")
    java_home = os.environ.get("JAVA_HOME")
    candidates = [pathlib.Path(java_home) / "bin" / "jfr"] if java_home else []
    if java:
        candidates.append(pathlib.Path(os.path.realpath(java)).with_name("jfr"))
    for candidate in candidates:
        if candidate.exists():
            return str(candidate)
    raise SystemExit("no `jfr` tool next to the Java runtime: install a JDK (e.g. default-jdk-headless)")


def profile(
    logs: pathlib.Path, out_dir: pathlib.Path, jfr_file: pathlib.Path
) -> tuple[list[StepProfile], dict[str, Any]]:
    from controller_svc.analytics import census, ingest, job, session

    prefetch = census.Prefetch([str(logs)], ingest.STATE_CHANGE_GLOB)
    # Steps one after another, so that every sample belongs to the step that ran then (by
    # default the analyses run in concurrent branches, job.run_branches).
    spark = session.build(conf={job.CONCURRENT_CONF: "false"})
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    recording = jvm.jdk.jfr.Recording(jvm.jdk.jfr.Configuration.getConfiguration("profile"))
    # Every compile, not only those over the configuration's threshold: most are short.
    recording.enable("jdk.Compilation").withoutThreshold()
    times = _StepTimes()
    logging.getLogger("analytics").addHandler(times)
    logging.getLogger("analytics").setLevel(logging.INFO)
    recording.start()
    started = time.time()
    try:
        outcome = job.analyze(spark, [str(logs)], str(out_dir), prefetch=prefetch)
    finally:
        recording.stop()
        recording.dump(jvm.java.io.File(str(jfr_file)).toPath())
        recording.close()
        logging.getLogger("analytics").removeHandler(times)
        spark.stop()
    steps: list[StepProfile] = []
    previous = started
    for name, end in times.ends:
        steps.append(
            StepProfile(
                name,
                datetime.datetime.fromtimestamp(previous).time(),
                datetime.datetime.fromtimestamp(end).time(),
                end - previous,
            )
        )
        previous = end
    return steps, outcome.summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench_analytics.add_history_arguments(parser, events=1_000_000, master=False)
    parser.add_argument("--out", required=True, help="the text summary")
    parser.add_argument("--jfr", help="where to keep the recording (default: DIR/profile-EVENTS.jfr)")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    base = pathlib.Path(args.dir)
    logs, _ = bench_analytics.history(base, args.events)
    out = pathlib.Path(args.out)
    jfr_file = pathlib.Path(args.jfr) if args.jfr else base / f"profile-{args.events}.jfr"
    steps, summary = profile(logs, base / f"out-profile-{args.events}", jfr_file)
    command = [
        jfr_tool(),
        "print",
        "--stack-depth",
        "24",
        "--events",
        "jdk.ExecutionSample,jdk.Compilation,jdk.GarbageCollection",
        str(jfr_file),
    ]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as printer:
        assert printer.stdout is not None
        attribute(parse_events(printer.stdout), steps)
    machine = common.machine()
    header = (
        f"analytics profile: {summary['events']} events, commit {machine.get('commit')}, "
        f"{machine.get('cores')} cores; Java Flight Recorder, profile settings ({args.events} requested)"
    )
    text = render(steps, int(machine.get("cores") or os.cpu_count() or 1), args.top, header)
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
