"""Resignation undoes everything failover set up (KafkaController.onControllerResignation):
every watch of the term, the automatic-rebalance timer, the managers and the channels. Before,
failover registered eight watches and resignation removed five, so every new term stacked one
more callback on three paths (each event queued twice, three times, ...), and the rebalance
timer of every past term kept running.

An in-process controller on a real ZooKeeper, resigned through the real path: another party
moves /controller_epoch, the controller resigns, releases /controller and, being the only
controller, is elected again. Its second term must hold exactly what its first held."""

from __future__ import annotations

import pytest

from controller_svc.adapters.zk import paths
from controller_svc.adapters.zk.client import ZkClient
from controller_svc.common.state_change_log import StateChangeLog
from controller_svc.controller.controller import Controller, ControllerSettings
from tests.integration.harness import eventually

pytestmark = pytest.mark.integration


async def test_resignation_removes_every_watch_and_timer_that_failover_set(chroot_connect: str) -> None:
    zk = ZkClient(chroot_connect, 10000)
    other = ZkClient(chroot_connect, 10000)
    await zk.start(timeout_s=10)
    await other.start(timeout_s=10)
    controller = Controller(
        ControllerSettings(1, "127.0.0.1:1", "127.0.0.1:2", first_rebalance_delay_s=3600),
        zk,
        StateChangeLog(None, "controller-1"),
    )
    try:
        for path in paths.PERSISTENT_PATHS:
            await zk.ensure_path(path)
        started = controller.start()
        await started.processed
        assert controller.is_active
        first_term = zk.watch_counts()
        assert controller.term is not None
        first = controller.term
        term_paths = {path for _children, path, _callback in first.watches()}
        assert len(term_paths) == 8 and term_paths <= set(first_term)
        first_timer = first._rebalance_task
        assert first_timer is not None and not first_timer.done()
        first_epoch = controller.context.epoch

        await other.set_data(paths.CONTROLLER_EPOCH, b"99")  # another party moved the epoch

        async def second_term() -> bool:
            return controller.is_active and controller.context.epoch > first_epoch and await _processed(controller)

        await eventually(second_term, 15, what="the controller to resign and be elected again")
        assert zk.watch_counts() == first_term
        assert first_timer.done() and first.closed and first.channels is None
        second = controller.term
        assert second is not None and second is not first and second.epoch > first.epoch
        assert second._rebalance_task is not None and not second._rebalance_task.done()
    finally:
        await controller.shutdown()
        await zk.close()
        await other.close()


async def _processed(controller: Controller) -> bool:
    return controller.events.current is None and controller.events.queue_size == 0
