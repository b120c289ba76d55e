"""The bookkeeping of a chaos campaign's recovery after each fault (devtools/chaos_recovery)."""

from __future__ import annotations

from controller_svc.devtools.chaos_recovery import RecoveryTracker


def test_a_fault_recovers_at_the_first_serviceable_probe_that_started_after_it() -> None:
    tracker = RecoveryTracker()
    tracker.fault(10.0, "controller_kill")
    # A probe that started before the fault says nothing about the cluster after it.
    tracker.probed(9.8, 10.3, "")
    tracker.probed(10.5, 10.7, "/controller names 2, which is not running")
    tracker.probed(16.0, 16.2, "")
    [fault] = tracker.faults
    assert fault.recovered_s == 6.2
    assert fault.first_obstacle == "/controller names 2, which is not running"


def test_overlapping_faults_each_wait_for_the_cluster_to_be_whole() -> None:
    tracker = RecoveryTracker()
    tracker.fault(1.0, "broker_kill")
    tracker.probed(1.5, 1.6, "t-0 has no serving leader")
    tracker.fault(2.0, "controller_kill")
    tracker.probed(2.5, 2.6, "no controller")
    assert tracker.unrecovered() == 2
    tracker.probed(8.0, 8.5, "")
    assert [f.recovered_s for f in tracker.faults] == [7.5, 6.5]
    # A fault with no obstacle seen recovered at once.
    tracker.fault(9.0, "lagging_replica")
    tracker.probed(9.1, 9.2, "")
    summary = tracker.summary()
    assert summary["faults_unrecovered"] == 0
    assert summary["longest_recovery_s"] == 7.5
    assert summary["recovery_by_fault_kind"]["broker_kill"] == {
        "count": 1,
        "recovered": 1,
        "median_s": 7.5,
        "p90_s": 7.5,
        "max_s": 7.5,
    }
    assert summary["recovery_after_each_fault"][2] == {"t": 9.0, "kind": "lagging_replica", "recovered_s": 0.2}


def test_a_fault_never_followed_by_a_serviceable_probe_stays_unrecovered() -> None:
    tracker = RecoveryTracker()
    tracker.fault(1.0, "broker_kill")
    tracker.probed(1.5, 1.6, "t-0 has no serving leader")
    summary = tracker.summary()
    assert summary["faults_unrecovered"] == 1
    assert summary["recovery_by_fault_kind"]["broker_kill"]["recovered"] == 0
    assert summary["recovery_by_fault_kind"]["broker_kill"]["max_s"] is None
