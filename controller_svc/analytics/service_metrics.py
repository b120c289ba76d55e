"""The analysis service's metrics (`controller-svc analyze-service --metrics-listen`). Kafka has
no such service: the names carry the project's `kcontroller_` prefix."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from controller_svc.common.histogram import KafkaHistogram

REQUESTS = Counter(
    "kcontroller_analysis_requests",
    "Analysis requests by outcome: no_violations, violations, bad_input, failed, queue_full, unavailable",
    ["outcome"],
)
QUEUED = Gauge("kcontroller_analysis_queued", "Analyses running or waiting for their turn")
ANALYSIS_TIME_MS = KafkaHistogram("kcontroller_analysis_time_ms", "An analysis' time in the service (ms)")
WARMUP_RUNS = Counter(
    "kcontroller_analysis_warmup_runs",
    "The start-up warm-up's analyses of its generated history by outcome: known_answers, wrong_answers, failed",
    ["outcome"],
)
WARMUP_TIME_MS = Gauge(
    "kcontroller_analysis_warmup_time_ms", "How long the start-up warm-up took (ms); 0 until it ends"
)
