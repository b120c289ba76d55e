"""A class-data-sharing archive of the Spark driver JVM's classes, for faster cold starts.

Spark's driver loads some 25,000 classes from ~250 jars, parsing and verifying each; an
AppCDS archive (JDK 13+, `-XX:ArchiveClassesAtExit` / `-XX:SharedArchiveFile`) maps them
ready-made instead. On a 2-core machine a SparkSession started in 5.7-6.0 s with the archive
and 9.4-10.0 s without (runs interleaved). The first `controller-svc analyze` on a machine
records the archive when its JVM exits (once: 170 MB and 23 s on that machine, after the results are out);
every later one starts from it.

Safety: the JVM maps the archive's bytes, and a truncated archive kills it with SIGBUS, so an
archive is only ever used whole. It is written under a temporary name, renamed into place
after its JVM exited cleanly, with a sidecar giving its size; one whose size differs is
deleted and recorded again. The name carries everything the JVM checks the archive against
(Java build, PySpark version, JVM options), so an upgrade records a new archive rather than
start from a mismatched one (which the JVM would refuse, falling back to loading the jars), and
a digest of the analytics' code (session.job_code_digest), which decides the classes a run loads.

A Java runtime that cannot record one (no base CDS archive to extend, as in a runtime made by
jlink, or `-Xshare:off`) is found out before the first recording by a JVM that only prints its
version (Java 17's driver JVM would not start with the recording option; later ones start and
write nothing): the record then says so, and every run starts without an archive (delete the
record to ask again).

`KCONTROLLER_CLASS_ARCHIVE`: the directory for the archive (default
`$XDG_CACHE_HOME/kcontroller`, else `~/.cache/kcontroller`), or `off`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pathlib
import subprocess
from dataclasses import dataclass

log = logging.getLogger("analytics")

ENV = "KCONTROLLER_CLASS_ARCHIVE"
PREFIX = "spark-driver-"
SUFFIX = ".jsa"
# The dump reports each class it cannot archive (signed jars, old class file versions) as a
# warning on the JVM's stdout: hundreds of lines in the middle of the command's output.
QUIET = "-Xlog:cds=off,cds+dynamic=off"
# The record of a set-up whose Java runtime cannot record an archive (check_can_record).
UNSUPPORTED = "unsupported"
UNSUPPORTED_REASON = "no base CDS archive to extend: a runtime made by jlink, or -Xshare:off"
PROBE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ClassArchive:
    """Where this machine's archive for one JVM set-up lives, and whether it is ready."""

    path: pathlib.Path

    @property
    def sidecar(self) -> pathlib.Path:
        return self.path.with_name(self.path.name + ".json")

    @property
    def recording(self) -> pathlib.Path:
        """Where this process's JVM writes a new archive when it exits."""
        return self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")

    def ready(self) -> bool:
        """The archive is whole (its size is the one recorded when it was committed). A partial
        or mismatched one is deleted, so that this run records it again."""
        try:
            record = json.loads(self.sidecar.read_text(encoding="utf-8"))
            if isinstance(record, dict) and UNSUPPORTED in record:
                return False
            if self.path.stat().st_size == record["size"]:
                return True
        except FileNotFoundError:
            return False
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("class archive %s: unreadable record (%s); recording it again", self.path, e)
        else:
            log.warning("class archive %s: size differs from its record; recording it again", self.path)
        for stale in (self.path, self.sidecar):
            stale.unlink(missing_ok=True)
        return False

    def unsupported(self) -> str | None:
        """Why this Java runtime cannot record an archive, when check_can_record found so; None
        otherwise."""
        try:
            record = json.loads(self.sidecar.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return str(record[UNSUPPORTED]) if isinstance(record, dict) and UNSUPPORTED in record else None

    def recording_wanted(self) -> bool:
        """This run's JVM records the archive (none is ready, and the runtime can record one)."""
        return not self.ready() and self.unsupported() is None

    def java_options(self) -> str:
        """The driver JVM's options: start from the archive when it is ready, else record one
        (nothing when this Java runtime cannot)."""
        if self.ready():
            log.info("Spark's driver starts from the class archive %s", self.path)
            return f"-XX:SharedArchiveFile={self.path} {QUIET}"
        if self.unsupported() is not None:
            log.info("no class archive: this Java runtime records none (%s: delete it to try again)", self.sidecar)
            return ""
        log.info("Spark's driver records a class archive at exit, for faster starts next time: %s", self.path)
        return f"-XX:ArchiveClassesAtExit={self.recording} {QUIET}"

    def check_can_record(self, java: str) -> bool:
        """Before a recording: whether this Java runtime can record an archive at all. One without
        a base CDS archive to extend cannot (a runtime made by jlink, or `-Xshare:off` in
        JAVA_TOOL_OPTIONS): Java 17's JVM then refuses to start, so Spark would not start either,
        and later ones start but write nothing. A JVM asked to record one while it prints its
        version answers in about 0.2 s. A no is kept in the record, so it is asked once."""
        # Named per process (two runs may ask at once), and like a recording, so that one left by a
        # process killed meanwhile is removed with the abandoned recordings.
        probe = self.path.with_name(f".{self.path.name}.probe.{os.getpid()}.tmp")
        try:
            subprocess.run(
                [java, f"-XX:ArchiveClassesAtExit={probe}", QUIET, "-version"],
                capture_output=True,
                timeout=PROBE_TIMEOUT_S,
                check=False,
            )
            recorded = probe.exists() and probe.stat().st_size > 0
        except (OSError, subprocess.TimeoutExpired) as e:
            log.info("class archive: could not ask %s whether it records one (%s)", java, e)
            return False  # not recorded as a no: the next run asks again
        finally:
            probe.unlink(missing_ok=True)
        if not recorded:
            self._write_record({UNSUPPORTED: UNSUPPORTED_REASON})
            log.warning(
                "class archive: %s cannot record one (%s); Spark's driver starts without one (delete %s to ask again)",
                java,
                UNSUPPORTED_REASON,
                self.sidecar,
            )
        return recorded

    def _write_record(self, record: dict[str, object]) -> None:
        pending = self.sidecar.with_name(f".{self.sidecar.name}.{os.getpid()}.tmp")
        pending.write_text(json.dumps(record), encoding="utf-8")
        os.replace(pending, self.sidecar)

    def commit(self, jvm_exit_code: int | None) -> bool:
        """After the JVM exited: puts this process's recording in place when the JVM exited
        cleanly (else discards it), and removes the archives of other set-ups."""
        recording = self.recording
        if not recording.exists():
            return False
        if jvm_exit_code != 0:
            log.warning("class archive: the JVM exited with %s; its recording is discarded", jvm_exit_code)
            recording.unlink(missing_ok=True)
            return False
        size = recording.stat().st_size
        # The sidecar first: an archive is never in place without the size it must have.
        self._write_record({"size": size})
        os.replace(recording, self.path)
        for other in self.path.parent.glob(f"{PREFIX}*{SUFFIX}"):
            if other != self.path:
                other.unlink(missing_ok=True)
                other.with_name(other.name + ".json").unlink(missing_ok=True)
        log.info("class archive saved: %s (%.0f MB)", self.path, size / 1e6)
        return True


def directory(environ: dict[str, str] | os._Environ[str] = os.environ) -> pathlib.Path | None:
    """The archive's directory from the environment, None when archives are off."""
    chosen = environ.get(ENV, "").strip()
    if chosen.lower() == "off":
        return None
    if chosen:
        return pathlib.Path(chosen)
    cache = environ.get("XDG_CACHE_HOME", "").strip() or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(cache) / "kcontroller"


def locate(setup: str, environ: dict[str, str] | os._Environ[str] = os.environ) -> ClassArchive | None:
    """The archive for a JVM set-up (`setup`: whatever the JVM checks an archive against, e.g.
    the Java build, the PySpark version and the JVM options), or None when archives are off or
    the directory cannot be made."""
    where = directory(environ)
    if where is None:
        return None
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        log.info("no class archive (%s: %s)", where, e)
        return None
    if not os.access(where, os.W_OK):
        log.info("no class archive (%s is not writable)", where)
        return None
    _remove_abandoned_recordings(where)
    key = hashlib.sha256(setup.encode("utf-8")).hexdigest()[:16]
    return ClassArchive(where / f"{PREFIX}{key}{SUFFIX}")


def _remove_abandoned_recordings(where: pathlib.Path) -> None:
    """Recordings of processes that are gone (interrupted before their commit: the JVM still
    writes its archive when it exits, and nobody puts it in place)."""
    for recording in where.glob(f".{PREFIX}*{SUFFIX}*.tmp"):
        try:
            pid = int(recording.name.rsplit(".", 2)[-2])
        except ValueError:
            continue
        if pid != os.getpid() and not _alive(pid):
            recording.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
