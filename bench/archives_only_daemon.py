"""The job's Python worker daemon as it was before it froze the tasks' modules and put the tasks'
sockets in quick-ACK mode (`controller_svc/analytics/worker_daemon.py`): only the archives on
the workers' import path read once. For bench.analytics_python_tasks, which times a task's cost
from each daemon, so that what the two later changes add shows apart from the first."""

from __future__ import annotations


def main() -> None:
    from controller_svc.analytics import worker_daemon

    worker_daemon.read_archives_once()
    from pyspark import daemon

    daemon.manager()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
