"""Process logging: plain text or JSON lines on stderr.

Every line carries the node and the controller epoch this process is working under (a
controller's own epoch while active, a broker's highest accepted epoch; -1 before any), so
lines from many processes can be merged and read per epoch, as Kafka's state-change.log is."""

from __future__ import annotations

import json
import logging
import sys
import time

_controller_epoch = -1


def set_controller_epoch(epoch: int) -> None:
    global _controller_epoch
    _controller_epoch = epoch


class ContextFilter(logging.Filter):
    def __init__(self, node: str) -> None:
        super().__init__()
        self.node = node

    def filter(self, record: logging.LogRecord) -> bool:
        record.node = self.node
        record.controller_epoch = _controller_epoch
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": int(record.created * 1000),
            "node": getattr(record, "node", None),
            "controller_epoch": getattr(record, "controller_epoch", None),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def setup(node: str, level: str = "INFO", fmt: str = "plain") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter(node))
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        formatter = logging.Formatter(
            "%(asctime)s.%(msecs)03d %(node)s epoch=%(controller_epoch)s %(levelname)s %(name)s: %(message)s",
            "%Y-%m-%dT%H:%M:%S",
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
