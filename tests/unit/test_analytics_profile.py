"""bench.analytics_profile: reading `jfr print` output and putting its events in the job's steps."""

from __future__ import annotations

import datetime

import pytest

from bench import analytics_profile as ap

JFR_TEXT = """\
jdk.ExecutionSample {
  startTime = 04:57:01.100
  sampledThread = "Executor task launch worker for task 0.0 in stage 1.0 (TID 1)" (javaThreadId = 85)
  state = "STATE_RUNNABLE"
  stackTrace = [
    org.apache.spark.sql.catalyst.util.FailureSafeParser.parse(Object) line: 60
    org.apache.spark.sql.execution.datasources.parquet.ParquetWriteSupport.write(InternalRow) line: 1
    ...
  ]
}

jdk.ExecutionSample {
  startTime = 04:57:02.500
  sampledThread = "Executor task launch worker for task 1.0 in stage 1.0 (TID 2)" (javaThreadId = 86)
  state = "STATE_RUNNABLE"
  stackTrace = [
    org.apache.parquet.column.values.dictionary.DictionaryValuesWriter.shouldFallBack() line: 125
    org.apache.spark.util.collection.TimSort.sort(Object, int, int, Comparator) line: 1
  ]
}

jdk.Compilation {
  startTime = 04:57:03.000
  duration = 1.50 s
  compileId = 1831
  compiler = "c2"
  method = org.codehaus.janino.UnitCompiler.compile2(Java$Block)
  compileLevel = 4
  succeded = true
  eventThread = "C2 CompilerThread0" (javaThreadId = 7)
}

jdk.Compilation {
  startTime = 04:57:09.000
  duration = 250 us
  compiler = "c1"
  method = java.lang.String.hashCode()
  compileLevel = 3
}

jdk.GarbageCollection {
  startTime = 04:57:10.000
  duration = 40.0 ms
  name = "ParallelScavenge"
  sumOfPauses = 30.0 ms
}

jdk.ExecutionSample {
  startTime = 04:57:11.000
  sampledThread = "Thread-3" (javaThreadId = 30)
  state = "STATE_RUNNABLE"
  stackTrace = [
    org.apache.spark.sql.catalyst.optimizer.Optimizer.execute(LogicalPlan) line: 1
  ]
}

jdk.ExecutionSample {
  startTime = 04:58:00.000
  sampledThread = "main" (javaThreadId = 1)
  state = "STATE_RUNNABLE"
  stackTrace = [
    java.lang.Object.wait() line: 1
  ]
}
"""


def test_durations_in_every_unit_jfr_prints() -> None:
    assert ap.parse_duration("133 ms") == pytest.approx(0.133)
    assert ap.parse_duration("1.02 s") == pytest.approx(1.02)
    assert ap.parse_duration("45.5 us") == pytest.approx(45.5e-6)
    assert ap.parse_duration("812 ns") == pytest.approx(812e-9)
    assert ap.parse_duration("2 min 3 s") == pytest.approx(123.0)


def test_events_are_read_with_their_threads_frames_and_durations() -> None:
    events = list(ap.parse_events(JFR_TEXT.splitlines(keepends=True)))
    samples = [e for e in events if isinstance(e, ap.Sample)]
    compiles = [e for e in events if isinstance(e, ap.Compile)]
    pauses = [e for e in events if isinstance(e, ap.GcPause)]
    assert len(samples) == 4 and len(compiles) == 2 and len(pauses) == 1
    first = samples[0]
    assert first.at == datetime.time(4, 57, 1, 100_000)
    assert first.thread.startswith("Executor task launch worker for task 0.0")
    # "..." (frames cut at the stack depth) is not a frame; argument lists are dropped.
    assert first.frames == (
        "org.apache.spark.sql.catalyst.util.FailureSafeParser.parse",
        "org.apache.spark.sql.execution.datasources.parquet.ParquetWriteSupport.write",
    )
    assert compiles[0] == ap.Compile(
        datetime.time(4, 57, 3), 1.5, "c2", "org.codehaus.janino.UnitCompiler.compile2(Java$Block)"
    )
    assert compiles[1].compiler == "c1" and compiles[1].seconds == pytest.approx(250e-6)
    assert pauses[0].seconds == pytest.approx(0.030)  # the pauses, not the collection's length


def test_a_sample_belongs_to_the_area_of_its_topmost_matching_frame() -> None:
    assert (
        ap.area_of(("org.apache.spark.sql.catalyst.util.FailureSafeParser.parse", "x.ParquetWriteSupport.write"))
        == "json parse"
    )
    assert (
        ap.area_of(("org.apache.parquet.column.values.X.write", "org.apache.spark.util.collection.TimSort.sort"))
        == "parquet write"
    )
    assert ap.area_of(("java.lang.Object.wait",)) == "other"
    assert ap.area_of(()) == "other"


def test_a_compile_is_grouped_by_what_it_compiled() -> None:
    generated = (
        "org.apache.spark.sql.catalyst.expressions.GeneratedClass$GeneratedIteratorForCodegenStage1.processNext()"
    )
    assert ap.compiled_group(generated) == "generated classes"  # though in Catalyst's package
    assert ap.compiled_group("org.codehaus.janino.UnitCompiler.compile2(Java$Block)") == "Janino"
    assert ap.compiled_group("org.apache.spark.sql.catalyst.trees.TreeNode.transform(PartialFunction)") == "Catalyst"
    assert ap.compiled_group("org.apache.parquet.io.MessageColumnIO.getColumns()") == "other"


def test_events_are_counted_in_the_step_that_was_running() -> None:
    steps = [
        ap.StepProfile("ingest", datetime.time(4, 57, 0), datetime.time(4, 57, 10), 10.0),
        ap.StepProfile("leadership", datetime.time(4, 57, 10), datetime.time(4, 57, 20), 10.0),
    ]
    ap.attribute(ap.parse_events(JFR_TEXT.splitlines(keepends=True)), steps)
    ingest, leadership = steps
    assert (ingest.samples, ingest.task_samples) == (2, 2)
    assert ingest.areas == {"json parse": 1, "parquet write": 1}
    assert ingest.compile_s["c2"] == pytest.approx(1.5) and ingest.compile_s["c1"] == pytest.approx(250e-6)
    assert (leadership.samples, leadership.task_samples) == (1, 0)
    assert leadership.areas == {"query planning": 1}
    assert leadership.gc_s == pytest.approx(0.030)
    # The sample at 04:58 is after the last step: in none.
    assert sum(s.samples for s in steps) == 3
    text = ap.render(steps, cores=2, top=5, header="h")
    # 2 task samples of 10 s x 2 cores / 10 ms possible: 0%; the compile and the areas are shown.
    assert "== ingest: 10.0 s; 2 Java samples (2 in task threads, 0% of 2 cores' possible); compiles c2 1.5 s" in text
    assert "by area: json parse 50%, parquet write 50%" in text
    assert "longest compiles: 1.50 s org.codehaus.janino.UnitCompiler.compile2(Java$Block)" in text
    assert (
        "c2 by what it compiled: generated classes 0.0 s (0 compiles), Janino 1.5 s (1 compiles), "
        "Catalyst 0.0 s (0 compiles), other 0.0 s (0 compiles)"
    ) in text
    assert "c1 by what it compiled: generated classes 0.0 s (0 compiles), Janino 0.0 s (0 compiles)" in text
