"""worker_daemon: zip archives on the import path are read again only when they changed."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import importlib, json, os, sys, time, zipfile, zipimport

    archive = sys.argv[1]
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("first.py", "VALUE = 1\\n")
    sys.path.insert(0, archive)
    import first

    reads = []
    eager_read = zipimport._read_directory
    def counting(path):
        reads.append(path)
        return eager_read(path)
    zipimport._read_directory = counting

    from controller_svc.analytics import worker_daemon
    patched = worker_daemon.read_archives_once()
    again = worker_daemon.read_archives_once()
    for _ in range(3):  # as a PySpark worker does before each task
        importlib.invalidate_caches()
    unchanged = list(reads)

    time.sleep(0.01)
    with zipfile.ZipFile(archive, "a") as z:
        z.writestr("second.py", "VALUE = 2\\n")
    importlib.invalidate_caches()
    import second
    print(json.dumps({"patched": patched, "again": again, "unchanged": unchanged,
                      "after_change": reads[len(unchanged):], "second": second.VALUE}))
    """
)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the standard library invalidates lazily since 3.12")
def test_an_archive_is_read_again_only_when_it_changed(tmp_path: pathlib.Path) -> None:
    archive = tmp_path / "modules.zip"
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(archive)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["patched"] is True and seen["again"] is False  # once per process
    assert seen["unchanged"] == []  # Python 3.11's own reads the directory on every call
    assert seen["after_change"] == [str(archive)]
    assert seen["second"] == 2  # what the archive holds now is importable


def test_the_tasks_modules_are_imported_and_frozen_and_a_missing_one_is_left_out() -> None:
    """freeze_preloaded, in a process of its own (freezing is for the whole process)."""
    probe = textwrap.dedent(
        """
        import gc, json, sys
        from controller_svc.analytics import worker_daemon

        frozen = worker_daemon.freeze_preloaded(("json", "no_such_module_anywhere", "pyarrow.json"))
        gc.collect()
        print(json.dumps([frozen, gc.get_freeze_count(), len(gc.get_objects()), "pyarrow.json" in sys.modules]))
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    frozen, freeze_count, tracked, imported = json.loads(done.stdout.splitlines()[-1])
    assert imported
    assert frozen == freeze_count > 1000
    assert tracked < 100  # a collection now walks almost nothing


def test_each_task_s_socket_is_put_in_quick_ack_mode_before_the_task_runs() -> None:
    """acknowledging_at_once: the wrapped worker finds its TCP socket in quick-ACK mode (set
    again for every task), gets the same arguments and returns the worker's exit code; a socket
    without the option (a Unix socket) is passed on as it is."""
    import socket

    from controller_svc.analytics import worker_daemon

    if not hasattr(socket, "TCP_QUICKACK"):
        pytest.skip("TCP_QUICKACK is Linux's")
    seen: list[tuple[int, bool]] = []

    def worker(sock: socket.socket, authenticated: bool) -> int:
        quick = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) if sock.family == socket.AF_INET else -1
        seen.append((quick, authenticated))
        return 7

    run = worker_daemon.acknowledging_at_once(worker)
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()) as client:
        accepted, _ = server.accept()
        with accepted:
            for authenticated in (False, True):
                client.sendall(b"x" * 10)
                accepted.recv(10)
                # Delayed ACKs, as the kernel's own heuristics may choose between tasks.
                accepted.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) == 0
                assert run(accepted, authenticated) == 7
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        assert run(left, True) == 7
    assert seen == [(1, False), (1, True), (-1, True)]
