"""The demo: a local cluster (3 controllers, 3 brokers), kill -9 of the active controller,
the takeover and how long it took, then teardown."""

from __future__ import annotations

import os
import signal
import tempfile
import time

import uvloop

from controller_svc import devcluster


def run_demo(directory: str | None, session_timeout_ms: int) -> int:
    base = directory or tempfile.mkdtemp(prefix="kcontroller-demo-")
    print(f"== starting a local cluster in {base} (3 controllers, 3 brokers, ZooKeeper)")
    started = time.monotonic()
    spec = devcluster.up(base, 3, 3, session_timeout_ms=session_timeout_ms)
    try:
        print(f"   up in {time.monotonic() - started:.1f} s\n")
        print(devcluster.status(base))
        before = uvloop.run(devcluster.snapshot(spec))
        victim = next(c for c in spec["controllers"] if c["id"] == before.controller_id)
        print(
            f"\n== kill -9 of the active controller {victim['id']} (pid {victim['pid']}, epoch "
            f"{before.controller_epoch})"
        )
        print(f"   its ZooKeeper session ({session_timeout_ms} ms timeout) must expire before a standby can take over")
        killed_at = time.monotonic()
        os.kill(victim["pid"], signal.SIGKILL)
        after = uvloop.run(devcluster.wait_converged(spec, 60.0, min_epoch=before.controller_epoch + 1))
        took = time.monotonic() - killed_at
        print(
            f"\n== controller {after.controller_id} took over with epoch {after.controller_epoch}; every broker "
            f"applied its UpdateMetadata {took:.2f} s after the kill\n"
        )
        print(devcluster.status(base))
        print(f"\nstate-change logs: {spec['logs']}")
    finally:
        print("\n== tearing down")
        devcluster.down(base, grace_s=10)
    return 0
