"""A reading as Prometheus metric families, and the cache that bounds what scrapes cost.

The names are a public contract (docs/monitoring.md, docs/ARCHITECTURE.md "Contracts"):
change them only deliberately. Partition keys are never labels: labels are the asset, a
partition state, an attempt outcome, an error class and a redrive reason, all small
closed sets.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from jobs_platform.metrics.reader import DURATION_BUCKETS, MetricsReading

PARTITION_STATES = ("done", "failed", "quarantined", "missing", "in_flight")

# Every family `/metrics` exposes, as Prometheus stores it (a counter gains `_total`).
METRIC_NAMES = (
    "jobs_platform_partitions",
    "jobs_platform_oldest_lease_age_seconds",
    "jobs_platform_expired_leases",
    "jobs_platform_quarantine_entries",
    "jobs_platform_quarantine_groups",
    "jobs_platform_outbox_pending",
    "jobs_platform_outbox_oldest_pending_age_seconds",
    "jobs_platform_attempts_total",
    "jobs_platform_attempt_duration_seconds",
    "jobs_platform_rows_written_total",
    "jobs_platform_rows_rejected_total",
    "jobs_platform_redrives_total",
    "jobs_platform_redrives_exhausted",
    "jobs_platform_backfill_paused",
    "jobs_platform_held_partitions",
    "jobs_platform_not_ready_past_max_wait",
    "jobs_platform_circuit_open",
    "jobs_platform_metrics_read_seconds",
)

# A reading is reused for this long: scrapers (several Prometheus replicas, a person's
# curl) within it cost no query, and the warehouse sees at most one query set per interval.
DEFAULT_CACHE_SECONDS = 5.0


def metric_families(reading: MetricsReading) -> Iterator[Metric]:
    """The families of one reading, in the order of `METRIC_NAMES`."""
    partitions = GaugeMetricFamily(
        "jobs_platform_partitions",
        "Partitions of each backfill asset by state (done, failed, quarantined, missing, "
        "in_flight).",
        labels=["asset", "status"],
    )
    lease_age = GaugeMetricFamily(
        "jobs_platform_oldest_lease_age_seconds",
        "Age of the oldest live lease of the asset since it was taken (0 when none).",
        labels=["asset"],
    )
    expired = GaugeMetricFamily(
        "jobs_platform_expired_leases",
        "Leases still held past their TTL: a worker that died or stalled.",
        labels=["asset"],
    )
    for asset, health in sorted(reading.health.items()):
        for state in PARTITION_STATES:
            partitions.add_metric([asset, state], getattr(health, state))
        lease_age.add_metric([asset], health.oldest_lease_age_seconds or 0.0)
        expired.add_metric([asset], health.expired_leases)
    yield from (partitions, lease_age, expired)

    yield _per_asset(
        GaugeMetricFamily,
        "jobs_platform_quarantine_entries",
        "Open quarantine entries: quarantined, or requeued and not yet resolved.",
        reading.quarantine_entries,
    )
    # No label: a cause spans assets (`dead-letter groups` shows which), and the count is
    # what an alert on "a new kind of failure" watches.
    yield GaugeMetricFamily(
        "jobs_platform_quarantine_groups",
        "Causes (distinct signatures) of the quarantined entries: `dead-letter groups`.",
        value=reading.quarantine_groups,
    )

    yield GaugeMetricFamily(
        "jobs_platform_outbox_pending",
        "Backfill requests waiting for the outbox sensor.",
        value=reading.outbox.pending,
    )
    yield GaugeMetricFamily(
        "jobs_platform_outbox_oldest_pending_age_seconds",
        "Age of the oldest pending backfill request (0 when none).",
        value=reading.outbox.oldest_pending_age_seconds or 0.0,
    )

    attempts = CounterMetricFamily(
        "jobs_platform_attempts",
        "Ended partition attempts by outcome (succeeded, failed) and error class.",
        labels=["asset", "outcome", "error_class"],
    )
    for (asset, outcome, error_class), count in sorted(reading.attempts.items()):
        attempts.add_metric([asset, outcome, error_class], count)
    yield attempts

    durations = HistogramMetricFamily(
        "jobs_platform_attempt_duration_seconds",
        "Duration of ended partition attempts, from start to end.",
        labels=["asset"],
    )
    for asset, histogram in sorted(reading.durations.items()):
        buckets = [
            (floatToGoString(bound), count)
            for bound, count in zip(DURATION_BUCKETS, histogram.cumulative_counts, strict=True)
        ]
        buckets.append(("+Inf", histogram.count))
        durations.add_metric([asset], buckets, sum_value=histogram.sum_seconds)
    yield durations

    yield _per_asset(
        CounterMetricFamily,
        "jobs_platform_rows_written",
        "Rows the asset's done partitions hold, as their last successful attempt wrote them.",
        reading.rows_written,
    )
    yield _per_asset(
        CounterMetricFamily,
        "jobs_platform_rows_rejected",
        "Input rows the asset's partitions rejected under bad_rows=RejectRows(...), as their "
        "latest attempts left them (a fixed input clears its own).",
        reading.rows_rejected,
    )

    redrives = CounterMetricFamily(
        "jobs_platform_redrives",
        "Dead-letter entries the redrive requeued on its own, by reason (code_changed, "
        "input_changed, cooldown).",
        labels=["asset", "reason"],
    )
    for (asset, reason), count in sorted(reading.redrives.items()):
        redrives.add_metric([asset, reason], count)
    yield redrives

    yield _per_asset(
        GaugeMetricFamily,
        "jobs_platform_redrives_exhausted",
        "Open quarantine entries whose partition's redrives ran out: they wait for a person.",
        reading.redrives_exhausted,
    )

    yield _per_asset(
        GaugeMetricFamily,
        "jobs_platform_backfill_paused",
        "1 while the backfill is paused (`jobs-platform backfill pause`), else 0.",
        reading.paused,
    )
    held = GaugeMetricFamily(
        "jobs_platform_held_partitions",
        "Partitions held back without an attempt, by reason (paused, not_ready): the holds "
        "sensor launches them once resumed or ready.",
        labels=["asset", "reason"],
    )
    for (asset, reason), count in sorted(reading.held.items()):
        held.add_metric([asset, reason], count)
    yield held
    yield _per_asset(
        GaugeMetricFamily,
        "jobs_platform_not_ready_past_max_wait",
        "Partitions whose input has not been ready for longer than their max_wait.",
        reading.not_ready_past_max_wait,
    )

    yield _per_asset(
        GaugeMetricFamily,
        "jobs_platform_circuit_open",
        "Open circuits of the backfill: causes whose outage snoozes its partitions (one "
        "probe at a time tries) until a probe succeeds.",
        reading.circuits_open,
    )

    yield GaugeMetricFamily(
        "jobs_platform_metrics_read_seconds",
        "How long the latest reading of the warehouse took.",
        value=round(reading.read_seconds, 6),
    )


def _per_asset(
    family: type[GaugeMetricFamily | CounterMetricFamily],
    name: str,
    documentation: str,
    counts: Mapping[str, int],
) -> Metric:
    """A family with one sample per asset, labelled `asset`, in the assets' order."""
    metric = family(name, documentation, labels=["asset"])
    for asset, count in sorted(counts.items()):
        metric.add_metric([asset], count)
    return metric


class CachedReading:
    """The latest reading, taken again at most once per `max_age_seconds`.

    Scrapes that arrive while a reading is being taken wait for it rather than start
    their own: however many scrape, the warehouse sees one query set at a time. A failed
    reading is not kept; the next scrape tries again.
    """

    def __init__(
        self,
        read: Callable[[], MetricsReading],
        max_age_seconds: float = DEFAULT_CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._read = read
        self._max_age = max_age_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._reading: MetricsReading | None = None
        self._taken_at = 0.0

    def get(self) -> MetricsReading:
        with self._lock:
            if self._reading is None or self._clock() - self._taken_at >= self._max_age:
                self._reading = None
                reading = self._read()
                self._reading, self._taken_at = reading, self._clock()
            return self._reading


class WarehouseCollector(Collector):
    """The collector `/metrics` registers: each collect serves the cached reading."""

    def __init__(self, readings: CachedReading):
        self._readings = readings

    def collect(self) -> Iterator[Metric]:
        yield from metric_families(self._readings.get())


def metrics_registry(readings: CachedReading) -> CollectorRegistry:
    """A registry of our families only (no process or GC figures of the server itself)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WarehouseCollector(readings))
    return registry
