"""How long the cluster took to be whole again after each fault of a chaos campaign.

Faults overlap in a storm, so a fault's recovery time is measured to the first moment after it
at which the cluster, seen from outside, was *serviceable* again: a live controller holds
`/controller`, every live registered broker is on its epoch, and every partition of every
topic expected to exist that has a live in-sync replica is led by a live broker that knows it
leads at ZooKeeper's leader epoch (one whose whole ISR a fault still holds down waits for that
replica: without unclean elections nothing else may lead it). A later fault that lands before
that moment extends the earlier fault's recovery; the figure is honest about what an operator
would have seen, not an attribution of blame.

The probe that decides "serviceable" lives in the campaign (it needs the processes); this
module only keeps the bookkeeping, so it can be tested without a cluster.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FaultRecovery:
    at_s: float  # campaign time the fault was in place
    kind: str
    recovered_s: float | None = None  # seconds to the first serviceable probe that started after it
    first_obstacle: str = ""  # what the first probe after it found missing ("" if none failed)


@dataclass
class RecoveryTracker:
    faults: list[FaultRecovery] = field(default_factory=list)

    def fault(self, at_s: float, kind: str) -> None:
        self.faults.append(FaultRecovery(at_s, kind))

    def probed(self, started_s: float, finished_s: float, obstacle: str) -> None:
        """One probe, started and finished at these campaign times. Only a probe that started
        after a fault can say anything about the cluster after that fault; a serviceable one
        counts as recovered when it finished (the upper bound: the probe's own duration is the
        resolution)."""
        for fault in self.faults:
            if fault.recovered_s is not None or started_s < fault.at_s:
                continue
            if obstacle:
                if not fault.first_obstacle:
                    fault.first_obstacle = obstacle
            else:
                fault.recovered_s = round(finished_s - fault.at_s, 2)

    def unrecovered(self) -> int:
        return sum(1 for f in self.faults if f.recovered_s is None)

    def summary(self) -> dict[str, Any]:
        by_kind: dict[str, list[FaultRecovery]] = {}
        for fault in self.faults:
            by_kind.setdefault(fault.kind, []).append(fault)
        kinds: dict[str, Any] = {}
        for kind, faults in sorted(by_kind.items()):
            times = sorted(f.recovered_s for f in faults if f.recovered_s is not None)
            kinds[kind] = {
                "count": len(faults),
                "recovered": len(times),
                "median_s": round(statistics.median(times), 2) if times else None,
                "p90_s": round(times[min(len(times) - 1, int(0.9 * len(times)))], 2) if times else None,
                "max_s": times[-1] if times else None,
            }
        every = [f.recovered_s for f in self.faults if f.recovered_s is not None]
        return {
            "recovery_by_fault_kind": kinds,
            "longest_recovery_s": max(every) if every else None,
            "faults_unrecovered": self.unrecovered(),
            "recovery_after_each_fault": [
                {
                    "t": round(f.at_s, 2),
                    "kind": f.kind,
                    "recovered_s": f.recovered_s,
                    **({"first_obstacle": f.first_obstacle} if f.first_obstacle else {}),
                }
                for f in self.faults
            ],
        }
