"""cancel_and_wait: the awaited task's cancellation is swallowed, the caller's own is not."""

from __future__ import annotations

import asyncio

import pytest

from controller_svc.common.tasks import cancel_and_wait


async def test_cancelling_the_caller_while_it_waits_cancels_the_caller() -> None:
    release = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await release.wait()  # takes its time to clean up
            raise

    child = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    caller = asyncio.create_task(cancel_and_wait(child))
    await asyncio.sleep(0)
    caller.cancel()  # e.g. a shutdown cancelling the event thread in the middle of a resignation
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert child.cancelled()


async def test_the_awaited_tasks_cancellation_is_swallowed() -> None:
    child = asyncio.create_task(asyncio.sleep(3600))
    await asyncio.sleep(0)
    await cancel_and_wait(child)
    assert child.cancelled()
