"""The structured state-change log (DESIGN.md contract 5): JSON lines, one file per node.

Every record has `ts` (ms since the epoch), `node` and `kind`; the analytics pipeline
reads these files from every controller and broker of a cluster.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import threading
import time
from typing import Any

log = logging.getLogger("state.change")


class StateChangeLog:
    def __init__(self, directory: str | os.PathLike[str] | None, node: str) -> None:
        self.node = node
        self._lock = threading.Lock()
        self._file = None
        if directory is not None:
            path = pathlib.Path(directory)
            path.mkdir(parents=True, exist_ok=True)
            self.path: pathlib.Path | None = path / f"{node}.state-change.jsonl"
            # Line buffered: a record is on disk as soon as it is written, even if we are killed.
            self._file = open(self.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        else:
            self.path = None

    def __repr__(self) -> str:
        return f"StateChangeLog(node={self.node!r}, path={self.path})"

    def record(self, kind: str, **fields: Any) -> None:
        entry: dict[str, Any] = {"ts": int(time.time() * 1000), "node": self.node, "kind": kind}
        entry.update(fields)
        line = json.dumps(entry, separators=(",", ":"), default=str)
        log.info("%s", line)
        if self._file is not None:
            with self._lock:
                self._file.write(line + "\n")

    def close(self) -> None:
        if self._file is not None:
            with self._lock:
                self._file.close()
                self._file = None
