"""Process logging: plain text or JSON lines on stderr."""

from __future__ import annotations

import json
import logging
import sys
import time


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": int(record.created * 1000),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup(node: str, level: str = "INFO", fmt: str = "plain") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        formatter = logging.Formatter(
            f"%(asctime)s.%(msecs)03d {node} %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S"
        )
        formatter.converter = time.gmtime
        handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiozk logs every reconnect attempt with a traceback at ERROR; keep it readable.
    logging.getLogger("aiozk").setLevel(logging.WARNING)
    # Each state-change record is already in the .jsonl file.
    logging.getLogger("state.change").setLevel(logging.WARNING)
