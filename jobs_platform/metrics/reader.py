"""One reading of the warehouse for `/metrics`: a handful of set-based queries, no Dagster.

Partition states, leases and speed are `store.health`'s figures (one home for each rule);
the outbox backlog is `store.outbox_backlog.queue_stats`; the attempt history by outcome and
error class with its duration histogram (one grouped query) and the rows the done
partitions hold are `store.tallies`, shaped here for Prometheus. The dead letter's open
entries per asset and its number of open causes (one count over the distinct signatures)
are `dead_letter.triage`'s; the open circuits per asset are `steering.circuits`'.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import sqlalchemy as sa

from jobs_platform.dead_letter import redrive
from jobs_platform.dead_letter.triage import open_entries_by_asset, open_signature_count
from jobs_platform.settings import DEFAULT_MAX_REDRIVES
from jobs_platform.steering.circuit_report import open_circuit_counts
from jobs_platform.steering.holds import steering_status
from jobs_platform.store import tallies
from jobs_platform.store.clock import Clock
from jobs_platform.store.health import AssetHealth, ExpectedKeys, Health
from jobs_platform.store.outbox_backlog import OutboxBacklog, QueueStats
from jobs_platform.writer.rejects import rejected_counts

# Upper bounds (seconds) of the attempt duration histogram: an attempt takes from well
# under a second (a small or unchanged partition) to the one-hour attempt deadline.
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
                    1800.0, 3600.0)  # fmt: skip
# The `error_class` label of attempts that ended without one (the succeeded ones).
NO_ERROR_CLASS = "none"


@dataclass(frozen=True)
class DurationHistogram:
    """Ended attempts' durations: cumulative counts at each of `DURATION_BUCKETS`, sum, count."""

    cumulative_counts: tuple[int, ...]
    count: int
    sum_seconds: float


EMPTY_HISTOGRAM = DurationHistogram((0,) * len(DURATION_BUCKETS), 0, 0.0)


@dataclass(frozen=True)
class MetricsReading:
    """Everything `/metrics` shows, as of one moment."""

    health: Mapping[str, AssetHealth]  # per backfill asset of the code location
    attempts: Mapping[tuple[str, str, str], int]  # (asset, outcome, error_class) -> ended attempts
    durations: Mapping[str, DurationHistogram]
    rows_written: Mapping[str, int]
    quarantine_entries: Mapping[str, int]
    quarantine_groups: int  # distinct signatures of the quarantined entries, warehouse-wide
    redrives: Mapping[tuple[str, str], int]  # (asset, reason) -> redrives so far
    redrives_exhausted: Mapping[str, int]  # open entries whose partition's redrives ran out
    outbox: QueueStats
    read_seconds: float
    rows_rejected: Mapping[str, int] = field(default_factory=dict)  # rows rejected (§8)
    paused: Mapping[str, int] = field(default_factory=dict)  # 1 while the backfill is paused
    held: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (asset, reason) -> held
    not_ready_past_max_wait: Mapping[str, int] = field(default_factory=dict)
    circuits_open: Mapping[str, int] = field(default_factory=dict)  # open circuits (§9)


def read_metrics(
    connection: sa.Connection,
    partition_keys: Mapping[str, ExpectedKeys],
    *,
    clock: Clock,
    max_redrives: int = DEFAULT_MAX_REDRIVES,
) -> MetricsReading:
    """Read every figure; `partition_keys` are each backfill asset's expected keys (or
    its window: `store.health.KeyWindow`);
    `max_redrives` is the location's `JOBS_PLATFORM_MAX_REDRIVES` (when redrives ran out).

    Assets of the code location appear in every per-asset figure (zero when nothing
    happened yet, so a counter starts from 0); assets found only in the history (a backfill
    since removed) keep their attempt and row counts.
    """
    began = time.perf_counter()
    health = Health(clock).asset_health(connection, partition_keys)
    by_outcome, durations = _attempts_and_durations(connection)
    rows = dict.fromkeys(partition_keys, 0) | tallies.rows_written(connection)
    entries = dict.fromkeys(partition_keys, 0) | open_entries_by_asset(connection)
    steering = steering_status(connection, partition_keys)
    return MetricsReading(
        health=health,
        attempts=by_outcome,
        durations=dict.fromkeys(partition_keys, EMPTY_HISTOGRAM) | durations,
        rows_written=rows,
        quarantine_entries=entries,
        quarantine_groups=open_signature_count(connection),
        redrives=redrive.redrives_by_reason(connection),
        redrives_exhausted=dict.fromkeys(partition_keys, 0)
        | redrive.exhausted_entries(connection, max_redrives),
        outbox=OutboxBacklog(clock).queue_stats(connection),
        read_seconds=time.perf_counter() - began,
        rows_rejected=dict.fromkeys(partition_keys, 0) | rejected_counts(connection),
        paused={asset: int(s["paused"] is not None) for asset, s in steering.items()},
        held={
            (asset, reason): count
            for asset, s in steering.items()
            for reason, count in s["held"].items()
        },
        not_ready_past_max_wait={
            asset: s["not_ready_past_max_wait"] for asset, s in steering.items()
        },
        circuits_open=dict.fromkeys(partition_keys, 0) | open_circuit_counts(connection),
    )


def _attempts_and_durations(
    connection: sa.Connection,
) -> tuple[dict[tuple[str, str, str], int], dict[str, DurationHistogram]]:
    """Counts of the ended attempts by outcome and class, and their durations per asset.

    The store puts each attempt in one bucket; the groups are made cumulative here.
    """
    rows = tallies.ended_attempts_by_duration(connection, DURATION_BUCKETS)
    by_outcome: dict[tuple[str, str, str], int] = {}
    per_bucket: dict[str, list[int]] = {}
    totals: dict[str, float] = {}
    for asset, outcome, error_class, index, count, total in rows:
        key = (asset, outcome, error_class or NO_ERROR_CLASS)
        by_outcome[key] = by_outcome.get(key, 0) + count
        per_bucket.setdefault(asset, [0] * (len(DURATION_BUCKETS) + 1))[index] += count
        totals[asset] = totals.get(asset, 0.0) + float(total or 0.0)
    durations = {
        asset: DurationHistogram(
            tuple(itertools.accumulate(counts[:-1])), sum(counts), round(totals[asset], 6)
        )
        for asset, counts in per_bucket.items()
    }
    return by_outcome, durations
