"""Kafka-shaped histograms: Yammer's snapshot quantiles, the decaying reservoir, and the
exposition the JMX exporter's Kafka rules produce (`_count` plus quantile gauges)."""

from __future__ import annotations

import itertools

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from controller_svc.common.histogram import DecayingReservoir, KafkaHistogram, snapshot_quantile


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("values", "quantile", "expected"),
    [
        ([], 0.5, 0.0),
        ([7.0], 0.99, 7.0),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 0.5, 3.0),  # position 3.0
        ([1.0, 2.0, 3.0, 4.0, 5.0], 0.75, 4.5),  # position 4.5: halfway between 4 and 5
        ([1.0, 2.0, 3.0, 4.0, 5.0], 0.1, 1.0),  # position 0.6 < 1: the minimum
        ([1.0, 2.0, 3.0, 4.0, 5.0], 0.99, 5.0),  # position 5.94 >= n: the maximum
        ([float(i) for i in range(1, 101)], 0.95, 95.95),
    ],
)
def test_snapshot_quantile_is_yammers_interpolation(values: list[float], quantile: float, expected: float) -> None:
    assert snapshot_quantile(values, quantile) == pytest.approx(expected)


def test_count_and_sum_are_exact_while_the_sample_is_bounded() -> None:
    reservoir = DecayingReservoir(size=16, clock=FakeClock())
    for i in range(1000):
        reservoir.observe(float(i))
    snap = reservoir.snapshot()
    assert snap.count == 1000
    assert snap.total == sum(range(1000))
    assert repr(reservoir) == "DecayingReservoir(count=1000, sampled=16)"
    assert [label for label, _ in snap.quantiles] == ["0.50", "0.75", "0.95", "0.98", "0.99", "0.999"]


def test_recent_observations_outweigh_old_ones() -> None:
    clock = FakeClock()
    draws = itertools.cycle([0.1, 0.3, 0.5, 0.7, 0.9])
    reservoir = DecayingReservoir(size=100, clock=clock, rng=lambda: next(draws))
    for _ in range(1000):
        reservoir.observe(1.0)
    clock.now = 600.0  # ten minutes later: weight e^(0.015 * 600) = e^9 per new sample
    for _ in range(100):
        reservoir.observe(250.0)
    quantiles = dict(reservoir.snapshot().quantiles)
    assert quantiles["0.50"] == 250.0
    assert reservoir.snapshot().count == 1100


def test_rescaling_after_an_hour_keeps_priorities_finite_and_order_intact() -> None:
    clock = FakeClock()
    draws = itertools.cycle([0.2, 0.4, 0.6, 0.8])
    reservoir = DecayingReservoir(size=50, clock=clock, rng=lambda: next(draws))
    for hour in range(1, 30):  # e^(0.015 * 29 h) would overflow a float without rescaling
        clock.now = hour * 3600.0
        for _ in range(50):
            reservoir.observe(float(hour))
    quantiles = dict(reservoir.snapshot().quantiles)
    assert quantiles["0.50"] == 29.0  # only the last hour's observations remain
    assert reservoir.snapshot().count == 29 * 50


def test_exposition_matches_the_jmx_exporter_shape() -> None:
    registry = CollectorRegistry()
    clock = FakeClock()
    timer = KafkaHistogram(
        "kafka_controller_controllerstats_leaderelectionrateandtimems", "t", registry=registry, clock=clock
    )
    queue = KafkaHistogram(
        "kafka_controller_controllerchannelmanager_requestrateandqueuetimems",
        "q",
        ["broker_id"],
        registry=registry,
        clock=clock,
    )
    text = generate_latest(registry).decode()
    # An unlabelled timer is there before its first observation, with zeros (as in JMX).
    assert "kafka_controller_controllerstats_leaderelectionrateandtimems_count 0.0" in text
    assert "requestrateandqueuetimems_count{" not in text  # no series before a broker has one

    for value in (1.0, 2.0, 3.0):
        timer.observe(value)
    queue.labels("1").observe(5.0)
    queue.labels("2").observe(7.0)
    text = generate_latest(registry).decode()
    # Quantiles are a gauge, as the JMX exporter's rules type them (Prometheus 3 would rewrite
    # a summary's quantile="0.50" as "0.5" and break dashboards matching on "0.50").
    assert "# TYPE kafka_controller_controllerstats_leaderelectionrateandtimems gauge" in text
    assert "# TYPE kafka_controller_controllerstats_leaderelectionrateandtimems_count untyped" in text
    assert "kafka_controller_controllerstats_leaderelectionrateandtimems_count 3.0" in text
    assert "kafka_controller_controllerstats_leaderelectionrateandtimems_sum 6.0" in text
    assert 'kafka_controller_controllerstats_leaderelectionrateandtimems{quantile="0.50"} 2.0' in text
    assert 'kafka_controller_controllerstats_leaderelectionrateandtimems{quantile="0.999"} 3.0' in text
    assert (
        'kafka_controller_controllerchannelmanager_requestrateandqueuetimems{broker_id="2",quantile="0.99"} 7.0' in text
    )
    assert 'kafka_controller_controllerchannelmanager_requestrateandqueuetimems_count{broker_id="1"} 1.0' in text

    queue.remove("1")
    text = generate_latest(registry).decode()
    assert 'broker_id="1"' not in text
    assert 'broker_id="2"' in text


def test_wrong_number_of_labels_is_refused() -> None:
    histogram = KafkaHistogram("h", "h", ["broker_id"], registry=None)
    with pytest.raises(ValueError, match="broker_id"):
        histogram.labels()
