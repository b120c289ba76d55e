"""Kafka's histograms and timers (Yammer metrics-core 2.2, e.g. EventQueueTimeMs,
LeaderElectionRateAndTimeMs, RequestRateAndQueueTimeMs), exported in the shape the Prometheus
JMX exporter's Kafka rules give them, so dashboards built on Kafka's metrics read ours unchanged:

    <name>_count                     every observation (the rules' `...><>Count` -> `_count`)
    <name>{quantile="0.99"}          `99thPercentile` -> quantile "0.99" (0.50 0.75 0.95 0.98 0.99 0.999)
    <name>_sum                       not in the JMX export; added, as a Prometheus summary has it

prometheus_client's Summary has no quantiles, hence this collector. Like Yammer's
ExponentiallyDecayingSample (what Kafka's histograms use), the quantiles are taken over a
forward-decaying reservoir of 1028 samples, alpha 0.015: roughly the last five minutes, so a
failover an hour ago no longer dominates the p99 while `_count` keeps growing.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from prometheus_client.core import REGISTRY, Metric
from prometheus_client.registry import Collector, CollectorRegistry

# The percentiles a Yammer Snapshot exposes over JMX, with the quantile label the JMX
# exporter's rule `(\d+)thPercentile -> quantile: "0.$N"` gives each.
QUANTILES: tuple[tuple[float, str], ...] = (
    (0.50, "0.50"),
    (0.75, "0.75"),
    (0.95, "0.95"),
    (0.98, "0.98"),
    (0.99, "0.99"),
    (0.999, "0.999"),
)
RESERVOIR_SIZE = 1028
ALPHA = 0.015
RESCALE_INTERVAL_S = 3600.0


def snapshot_quantile(sorted_values: Sequence[float], quantile: float) -> float:
    """Yammer metrics-core 2.2 `Snapshot.getValue`: linear interpolation at quantile * (n + 1)."""
    n = len(sorted_values)
    if n == 0:
        return 0.0
    position = quantile * (n + 1)
    if position < 1:
        return sorted_values[0]
    if position >= n:
        return sorted_values[-1]
    lower = sorted_values[int(position) - 1]
    upper = sorted_values[int(position)]
    return lower + (position - math.floor(position)) * (upper - lower)


@dataclass(frozen=True, slots=True)
class Snapshot:
    count: int
    total: float
    quantiles: tuple[tuple[str, float], ...]


class DecayingReservoir:
    """One histogram: a count, a sum and a forward-decaying sample (Cormode et al., as in
    Yammer's ExponentiallyDecayingSample). Observed from the event loop, read by the metrics
    server's thread, hence the lock (held for microseconds)."""

    def __init__(
        self,
        size: int = RESERVOIR_SIZE,
        alpha: float = ALPHA,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._size = size
        self._alpha = alpha
        self._clock = clock
        self._rng = rng
        self._lock = threading.Lock()
        # (priority, tie-breaker, value): a min-heap, so the lowest priority is replaced first.
        self._heap: list[tuple[float, int, float]] = []
        self._sequence = itertools.count()
        self._start = clock()
        self._next_rescale = self._start + RESCALE_INTERVAL_S
        self._count = 0
        self._total = 0.0

    def __repr__(self) -> str:
        return f"DecayingReservoir(count={self._count}, sampled={len(self._heap)})"

    def observe(self, value: float) -> None:
        now = self._clock()
        with self._lock:
            if now >= self._next_rescale:
                self._rescale(now)
            self._count += 1
            self._total += value
            # A later sample weighs exponentially more; dividing by a uniform draw makes the
            # kept set a weighted random sample. 1 - random() is in (0, 1]: never a division by 0.
            priority = math.exp(self._alpha * (now - self._start)) / (1.0 - self._rng())
            entry = (priority, next(self._sequence), float(value))
            if len(self._heap) < self._size:
                heapq.heappush(self._heap, entry)
            elif priority > self._heap[0][0]:
                heapq.heapreplace(self._heap, entry)

    def _rescale(self, now: float) -> None:
        # Priorities grow as exp(alpha * t); move the landmark forward before they overflow.
        # Multiplying every priority by one positive factor keeps the heap order.
        factor = math.exp(-self._alpha * (now - self._start))
        self._heap = [(priority * factor, seq, value) for priority, seq, value in self._heap]
        self._start = now
        self._next_rescale = now + RESCALE_INTERVAL_S

    def snapshot(self) -> Snapshot:
        with self._lock:
            values = sorted(value for _, _, value in self._heap)
            count, total = self._count, self._total
        return Snapshot(count, total, tuple((label, snapshot_quantile(values, q)) for q, label in QUANTILES))


class KafkaHistogram(Collector):
    """A family of DecayingReservoirs, one per label set (`labels("1")` for broker 1), exposed
    as the JMX exporter exposes a Kafka histogram or timer."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        registry: CollectorRegistry | None = REGISTRY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._clock = clock
        self._children: dict[tuple[str, ...], DecayingReservoir] = {}
        self._lock = threading.Lock()
        if not self.labelnames:
            self._children[()] = DecayingReservoir(clock=clock)  # an unlabelled metric is always exposed
        if registry is not None:
            registry.register(self)

    def __repr__(self) -> str:
        return f"KafkaHistogram({self.name}, children={len(self._children)})"

    def labels(self, *values: str) -> DecayingReservoir:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
        key = tuple(str(v) for v in values)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = DecayingReservoir(clock=self._clock)
            return child

    def observe(self, value: float) -> None:
        self.labels().observe(value)

    def remove(self, *values: str) -> None:
        """Forget one label set (Kafka removes a broker's channel metrics with the broker)."""
        with self._lock:
            self._children.pop(tuple(str(v) for v in values), None)

    def _families(self) -> tuple[Metric, Metric, Metric]:
        # Three families, as the JMX exporter's rules make them: the percentiles are a GAUGE
        # (so Prometheus 3, which rewrites a *summary's* quantile "0.50" as "0.5", keeps the
        # label dashboards match on), and `_count` (the rules' COUNTER) and `_sum` are plain
        # series (a `counter` family here would be renamed `..._count_total`).
        return (
            Metric(self.name, self.documentation, "gauge"),
            Metric(f"{self.name}_count", f"{self.documentation}: observations", "unknown"),
            Metric(f"{self.name}_sum", f"{self.documentation}: sum of observations", "unknown"),
        )

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        quantiles, counts, sums = families = self._families()
        with self._lock:
            children = list(self._children.items())
        for key, reservoir in children:
            snap = reservoir.snapshot()
            labels = dict(zip(self.labelnames, key, strict=True))
            for quantile, value in snap.quantiles:
                quantiles.add_sample(self.name, {**labels, "quantile": quantile}, value)
            counts.add_sample(counts.name, labels, snap.count)
            sums.add_sample(sums.name, labels, snap.total)
        return families
