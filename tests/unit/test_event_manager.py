from __future__ import annotations

import asyncio

import pytest

from controller_svc.common.errors import ControllerError, NotControllerError
from controller_svc.controller import events as ev


class Recorder:
    def __init__(self) -> None:
        self.seen: list[ev.Event] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail_on: type[ev.Event] | None = None

    async def handle(self, event: ev.Event) -> None:
        await self.gate.wait()
        self.seen.append(event)
        if self.fail_on is not None and isinstance(event, self.fail_on):
            raise RuntimeError("handler failure")


async def test_events_are_processed_in_fifo_order() -> None:
    recorder = Recorder()
    manager = ev.EventManager(recorder.handle)
    manager.start()
    queued = [manager.put(ev.BrokerModifications(broker_id=i)) for i in range(20)]
    await queued[-1].processed
    assert [e.broker_id for e in recorder.seen] == list(range(20))  # type: ignore[attr-defined]
    assert manager.queue_size == 0
    await manager.close()


async def test_clear_and_put_preempts_queued_events_and_fails_their_replies() -> None:
    recorder = Recorder()
    recorder.gate.clear()  # hold the consumer on the first event
    manager = ev.EventManager(recorder.handle)
    manager.start()
    first = manager.put(ev.BrokerChange())
    await asyncio.sleep(0)  # the consumer takes `first` and blocks in the handler
    reply: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    preempted_reply = manager.put(ev.DescribeCluster(reply=reply))
    preempted_plain = manager.put(ev.ControllerChange())
    expire = manager.clear_and_put(ev.Expire())
    assert preempted_reply.processed.done() and preempted_plain.processed.done()
    with pytest.raises(NotControllerError):
        reply.result()
    recorder.gate.set()
    await expire.processed
    assert first.processed.done()
    assert [type(e) for e in recorder.seen] == [ev.BrokerChange, ev.Expire]
    await manager.close()


async def test_a_failing_handler_does_not_stop_the_loop_and_fails_its_reply_with_the_cause() -> None:
    recorder = Recorder()
    recorder.fail_on = ev.DescribeCluster
    manager = ev.EventManager(recorder.handle)
    manager.start()
    reply: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    manager.put(ev.DescribeCluster(reply=reply))
    after = manager.put(ev.BrokerChange())
    await after.processed
    assert [type(e) for e in recorder.seen] == [ev.DescribeCluster, ev.BrokerChange]
    with pytest.raises(ControllerError, match="handler failure") as raised:
        reply.result()
    assert not isinstance(raised.value, NotControllerError)
    await manager.close()


async def test_close_preempts_what_is_still_queued() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    manager = ev.EventManager(recorder.handle)
    manager.start()
    manager.put(ev.BrokerChange())
    await asyncio.sleep(0)
    reply: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    queued = manager.put(ev.DescribeCluster(reply=reply))
    await manager.close()
    assert queued.processed.done()
    with pytest.raises(NotControllerError):
        reply.result()


async def test_queue_time_is_measured_with_the_injected_clock() -> None:
    now = [100.0]
    recorder = Recorder()
    manager = ev.EventManager(recorder.handle, clock=lambda: now[0])
    queued = manager.put(ev.BrokerChange())
    assert queued.enqueued_at == 100.0
    assert manager.queue_size == 1
    manager.start()
    await queued.processed
    await manager.close()
