"""Fault injection for the real-process tests: a process that stops itself (SIGSTOP) at a
named point of its own code, so that a test's fault lands exactly where its name says.

A zombie controller is one paused past its session timeout *in the middle of something*:
about to send a request, about to write to ZooKeeper. A SIGSTOP sent from outside lands
wherever the process happens to be (usually idle, so the zombie never sends nor writes);
with `debug.self.stop.dir` set, the process checks for `DIR/<node>.<point>` at each such
point, and when the file exists it removes it, writes `debug.self_stop` to its state-change
log and stops itself. The test then sees the record, lets the cluster move on, and sends
SIGCONT: the process carries on from that very point.

An arm file may say which occurrence to stop at: `skip=N match=TEXT` lets the first N
occurrences whose fields mention TEXT go by (and ignores those that do not mention it), so a
test can stop a controller between two writes of one operation ("in the middle of moving
leaders").
"""

from __future__ import annotations

import os
import pathlib
import signal
from typing import Any

from controller_svc.common.state_change_log import StateChangeLog

BEFORE_FENCED_WRITE = "before-fenced-write"
BEFORE_SEND = "before-send"


class SelfStop:
    def __init__(self, directory: str, node: str, state_log: StateChangeLog) -> None:
        self.directory = pathlib.Path(directory)
        self.node = node
        self.state_log = state_log
        self._passed: dict[str, int] = {}  # point -> matching occurrences let go by

    def __repr__(self) -> str:
        return f"SelfStop({str(self.directory)!r}, node={self.node!r})"

    def arm_file(self, point: str) -> pathlib.Path:
        return self.directory / f"{self.node}.{point}"

    def stop_if_armed(self, point: str, **fields: Any) -> bool:
        """Stop here if armed (once per arming). True if the process stopped and was resumed."""
        arm = self.arm_file(point)
        try:
            spec = dict(item.split("=", 1) for item in arm.read_text().split() if "=" in item)
        except FileNotFoundError:
            self._passed.pop(point, None)
            return False
        if spec.get("match") and spec["match"] not in repr(fields):
            return False
        passed = self._passed.get(point, 0)
        if passed < int(spec.get("skip", "0")):
            self._passed[point] = passed + 1
            return False
        self._passed.pop(point, None)
        try:
            arm.unlink()
        except FileNotFoundError:
            return False
        self.state_log.record("debug.self_stop", point=point, **fields)
        self.state_log.flush()
        os.kill(os.getpid(), signal.SIGSTOP)  # returns once someone sends SIGCONT
        self.state_log.record("debug.self_resumed", point=point, **fields)
        return True

    def record(self, kind: str, **fields: Any) -> None:
        self.state_log.record(kind, **fields)
