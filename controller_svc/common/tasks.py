"""Background tasks that never die silently (aiokafka's sender done-callback)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

# Strong references: asyncio keeps only weak ones to running tasks.
_RUNNING: set[asyncio.Task[Any]] = set()


TaskDeathHandler = Callable[[str, BaseException], None]


def spawn(coro: Coroutine[Any, Any, T], name: str, on_death: TaskDeathHandler | None = None) -> asyncio.Task[T]:
    """Start a background task whose death (other than cancellation) is logged loudly and
    reported to `on_death` (name, error): the owner decides what a dead task means (the
    controller resigns, as Kafka's controller does when a component it depends on fails)."""
    task = asyncio.create_task(coro, name=name)
    _RUNNING.add(task)
    task.add_done_callback(functools.partial(_on_done, on_death))
    return task


def _on_done(on_death: TaskDeathHandler | None, task: asyncio.Task[Any]) -> None:
    _RUNNING.discard(task)
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        log.error("background task %s died: %r", task.get_name(), error, exc_info=error)
        if on_death is not None:
            on_death(task.get_name(), error)


async def cancel_and_wait(*tasks: asyncio.Task[Any] | None) -> None:
    live = [t for t in tasks if t is not None and not t.done()]
    for task in live:
        task.cancel()
    for task in live:
        try:
            await task
        except asyncio.CancelledError:
            # The awaited task's cancellation is expected; the caller's own is not ours to
            # swallow (the simulation found a controller whose shutdown cancelled its event
            # thread during a resignation that was awaiting here: the thread went on, and the
            # shutdown waited for it forever).
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        except Exception:
            log.exception("task %s failed while being cancelled", task.get_name())
