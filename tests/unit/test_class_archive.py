"""The driver JVM's class archive: where it lives, when it is used, how it is put in place."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from controller_svc.analytics import class_archive
from controller_svc.analytics.class_archive import ClassArchive


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({class_archive.ENV: "off"}, None),
        ({class_archive.ENV: "OFF"}, None),
        ({class_archive.ENV: "/srv/cache"}, pathlib.Path("/srv/cache")),
        ({"XDG_CACHE_HOME": "/x/cache"}, pathlib.Path("/x/cache/kcontroller")),
        ({}, pathlib.Path.home() / ".cache" / "kcontroller"),
    ],
)
def test_directory_from_the_environment(environ: dict[str, str], expected: pathlib.Path | None) -> None:
    assert class_archive.directory(environ) == expected


def test_one_archive_per_setup(tmp_path: pathlib.Path) -> None:
    environ = {class_archive.ENV: str(tmp_path / "cache")}
    first = class_archive.locate("java 17\npyspark 4.0", environ)
    assert first is not None and first.path.parent == tmp_path / "cache"
    assert class_archive.locate("java 17\npyspark 4.0", environ) == first
    other = class_archive.locate("java 21\npyspark 4.0", environ)
    assert other is not None and other.path != first.path
    assert class_archive.locate("java 17", {class_archive.ENV: "off"}) is None


def test_no_archive_where_the_directory_cannot_be_made(tmp_path: pathlib.Path) -> None:
    (tmp_path / "file").write_text("x")
    assert class_archive.locate("setup", {class_archive.ENV: str(tmp_path / "file" / "cache")}) is None


def archive_in(tmp_path: pathlib.Path) -> ClassArchive:
    found = class_archive.locate("setup", {class_archive.ENV: str(tmp_path)})
    assert found is not None
    return found


def record(archive: ClassArchive, size: int = 4096) -> None:
    """What the JVM does at exit with -XX:ArchiveClassesAtExit."""
    archive.recording.write_bytes(b"\x01" * size)


def test_records_first_then_starts_from_the_committed_archive(tmp_path: pathlib.Path) -> None:
    archive = archive_in(tmp_path)
    assert not archive.ready()
    assert archive.java_options() == f"-XX:ArchiveClassesAtExit={archive.recording} {class_archive.QUIET}"
    record(archive)
    assert archive.commit(0)
    assert archive.ready()
    assert not archive.recording.exists()
    assert json.loads(archive.sidecar.read_text()) == {"size": 4096}
    assert archive.java_options() == f"-XX:SharedArchiveFile={archive.path} {class_archive.QUIET}"
    # Nothing was recorded by this process since: nothing to commit.
    assert not archive.commit(0)


def test_a_recording_of_a_jvm_that_failed_is_discarded(tmp_path: pathlib.Path) -> None:
    archive = archive_in(tmp_path)
    record(archive)
    assert not archive.commit(1)
    assert not archive.recording.exists() and not archive.path.exists()
    record(archive)
    assert not archive.commit(None)  # killed after a timeout
    assert not archive.ready()


def fake_java(tmp_path: pathlib.Path, writes: bool, exit_code: int = 0) -> str:
    """A `java` that, asked to record an archive while printing its version, writes one or not
    (a runtime without a base CDS archive: Java 17 refuses to start, exit 1; later ones exit 0)."""
    script = tmp_path / f"java-{writes}-{exit_code}"
    write = 'printf x > "${a#-XX:ArchiveClassesAtExit=}"' if writes else ":"
    script.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in -XX:ArchiveClassesAtExit=*) '
        f"{write};; esac; done\n"
        f"exit {exit_code}\n"
    )
    script.chmod(0o755)
    return str(script)


def test_a_runtime_that_can_record_is_asked_to(tmp_path: pathlib.Path) -> None:
    archive = archive_in(tmp_path)
    assert archive.check_can_record(fake_java(tmp_path, writes=True))
    assert archive.unsupported() is None and archive.recording_wanted()
    assert "ArchiveClassesAtExit" in archive.java_options()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # the probe's file is gone


@pytest.mark.parametrize("exit_code", [0, 1])
def test_a_runtime_that_cannot_record_is_asked_once(tmp_path: pathlib.Path, exit_code: int) -> None:
    archive = archive_in(tmp_path)
    assert not archive.check_can_record(fake_java(tmp_path, writes=False, exit_code=exit_code))
    assert archive.unsupported() == class_archive.UNSUPPORTED_REASON
    assert not archive.ready() and not archive.recording_wanted()
    assert archive.java_options() == ""
    assert archive.sidecar.exists()  # ready() keeps the record: it is not a damaged one
    assert not archive.commit(0)
    # The same set-up located again (the next run) reads the record.
    again = archive_in(tmp_path)
    assert again.unsupported() is not None and again.java_options() == ""
    # Deleting the record asks again.
    archive.sidecar.unlink()
    assert archive.recording_wanted() and "ArchiveClassesAtExit" in archive.java_options()


def test_a_java_that_cannot_be_run_is_not_taken_for_a_no(tmp_path: pathlib.Path) -> None:
    archive = archive_in(tmp_path)
    assert not archive.check_can_record(str(tmp_path / "no-such-java"))
    assert archive.unsupported() is None and not archive.sidecar.exists()


def test_a_truncated_archive_is_never_used(tmp_path: pathlib.Path) -> None:
    """The JVM maps the file: a truncated archive would kill it with SIGBUS."""
    archive = archive_in(tmp_path)
    record(archive)
    archive.commit(0)
    with open(archive.path, "r+b") as f:
        f.truncate(1000)
    assert not archive.ready()
    assert not archive.path.exists() and not archive.sidecar.exists()
    assert "ArchiveClassesAtExit" in archive.java_options()


@pytest.mark.parametrize("sidecar", ["not json", '{"bytes": 4096}', '{"size": "big"}', "[]"])
def test_an_unreadable_record_means_record_again(tmp_path: pathlib.Path, sidecar: str) -> None:
    archive = archive_in(tmp_path)
    record(archive)
    archive.commit(0)
    archive.sidecar.write_text(sidecar)
    assert not archive.ready()
    assert not archive.path.exists()


def test_an_archive_without_its_record_is_not_used(tmp_path: pathlib.Path) -> None:
    archive = archive_in(tmp_path)
    archive.path.write_bytes(b"\x01" * 100)  # e.g. a crash between the two renames of another version
    assert not archive.ready()


def test_commit_removes_other_setups_archives(tmp_path: pathlib.Path) -> None:
    old = class_archive.locate("java 11", {class_archive.ENV: str(tmp_path)})
    assert old is not None
    record(old)
    old.commit(0)
    new = archive_in(tmp_path)
    record(new, 10)
    new.commit(0)
    assert new.ready()
    assert not old.path.exists() and not old.sidecar.exists()


def test_recordings_of_processes_that_are_gone_are_removed(tmp_path: pathlib.Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    abandoned = tmp_path / f".{class_archive.PREFIX}abc{class_archive.SUFFIX}.{dead_pid}.tmp"
    abandoned.write_bytes(b"partial")
    running = tmp_path / f".{class_archive.PREFIX}abc{class_archive.SUFFIX}.{os.getppid()}.tmp"
    running.write_bytes(b"being written")
    unrelated = tmp_path / "notes.tmp"
    unrelated.write_text("keep")
    archive_in(tmp_path)
    assert not abandoned.exists()
    assert running.exists() and unrelated.exists()


def test_the_java_build_identity_ignores_options_from_the_environment(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JAVA_TOOL_OPTIONS makes `java -version` say so; the archive of the same build stays the same."""
    from controller_svc.analytics import session

    java = tmp_path / "java"
    java.write_text(
        "#!/bin/sh\n"
        '[ -n "$JAVA_TOOL_OPTIONS" ] && echo "Picked up JAVA_TOOL_OPTIONS: $JAVA_TOOL_OPTIONS" >&2\n'
        "echo 'openjdk version \"17.0.15\" 2025-04-15' >&2\n"
    )
    java.chmod(0o755)
    plain = session.java_version_banner(str(java))
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Xlog:cds=info")
    noted = session.java_version_banner(str(java))
    assert plain == noted == 'openjdk version "17.0.15" 2025-04-15\n'
    assert session.java_major_version(plain) == 17


def test_a_change_of_the_analytics_code_records_the_archive_again(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which Spark classes a run loads depends on the job's code (the events table's format):
    the archive's key carries a digest of that code."""
    pytest.importorskip("pyspark")
    from controller_svc.analytics import session

    package = tmp_path / "analytics"
    package.mkdir()
    (package / "ingest.py").write_text("FORMAT = 'parquet'\n")
    before = session.job_code_digest(package)
    assert session.job_code_digest(package) == before
    (package / "ingest.py").write_text("FORMAT = 'orc'\n")
    edited = session.job_code_digest(package)
    (package / "job.py").write_text("")
    added = session.job_code_digest(package)
    assert len({before, edited, added}) == 3

    setups: list[str] = []
    monkeypatch.setattr(class_archive, "locate", lambda setup: setups.append(setup))
    for digest in ("one", "two"):
        monkeypatch.setattr(session, "job_code_digest", lambda digest=digest: digest)
        assert session.locate_class_archive("java 17") is None
    assert setups[0] != setups[1] and setups[0].endswith("\none") and setups[1].endswith("\ntwo")
