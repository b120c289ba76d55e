"""The admin client's error, apart from the client: every `controller-svc` command registers the
admin commands' parsers (cli/admin.py, cli/topics.py), and importing the client for that pulled
in the ZooKeeper client and gRPC's stubs, a fifth of a second of every command's start
(`analyze --service` included)."""

from __future__ import annotations

from controller_svc.common.errors import ControllerError, ErrorCode


class AdminError(ControllerError):
    def __init__(self, message: str, code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR) -> None:
        super().__init__(message)
        self.code = code
