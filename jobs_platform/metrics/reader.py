"""One reading of the warehouse for `/metrics`: a handful of set-based queries, no Dagster.

Partition states, leases and speed are `store.health`'s figures (one home for each rule);
the outbox backlog is `store.outbox.queue_stats`. Added here: the attempt history by
outcome and error class with its duration histogram (one grouped query), the rows the
done partitions hold, and the open quarantine entries.
"""

from __future__ import annotations

import datetime as dt
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.store.attempts import AttemptOutcome
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.health import AssetHealth, asset_health
from jobs_platform.store.outbox import QueueStats, queue_stats
from jobs_platform.store.partitions import PartitionStatus
from jobs_platform.store.quarantine import QuarantineStatus
from jobs_platform.store.schema import attempts, partitions, quarantine

# Upper bounds (seconds) of the attempt duration histogram: an attempt takes from well
# under a second (a small or unchanged partition) to the one-hour attempt deadline.
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
                    1800.0, 3600.0)  # fmt: skip
# The `error_class` label of attempts that ended without one (the succeeded ones).
NO_ERROR_CLASS = "none"
# Only ended attempts are counted, so each count only grows; a running attempt is seen in
# `in_flight` instead, and counted once it ends.
ENDED_OUTCOMES = (str(AttemptOutcome.SUCCEEDED), str(AttemptOutcome.FAILED))
# Open entries: the dead letter's own (quarantined) and those a person released whose new
# run has not succeeded yet (requeued).
OPEN_ENTRY_STATUSES = (str(QuarantineStatus.QUARANTINED), str(QuarantineStatus.REQUEUED))


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
    outbox: QueueStats
    read_seconds: float


def read_metrics(
    connection: sa.Connection,
    partition_keys: Mapping[str, Sequence[str]],
    *,
    now: dt.datetime | None = None,
) -> MetricsReading:
    """Read every figure; `partition_keys` are each backfill asset's expected keys.

    Assets of the code location appear in every per-asset figure (zero when nothing
    happened yet, so a counter starts from 0); assets found only in the history (a backfill
    since removed) keep their attempt and row counts.
    """
    began = time.perf_counter()
    now = now or DATABASE_CLOCK.now(connection)
    health = asset_health(connection, partition_keys, now=now)
    tallies, durations = _attempts_and_durations(connection)
    rows = dict.fromkeys(partition_keys, 0) | _rows_written(connection)
    entries = dict.fromkeys(partition_keys, 0) | _open_entries(connection)
    return MetricsReading(
        health=health,
        attempts=tallies,
        durations=dict.fromkeys(partition_keys, EMPTY_HISTOGRAM) | durations,
        rows_written=rows,
        quarantine_entries=entries,
        outbox=queue_stats(connection, now=now),
        read_seconds=time.perf_counter() - began,
    )


def _attempts_and_durations(
    connection: sa.Connection,
) -> tuple[dict[tuple[str, str, str], int], dict[str, DurationHistogram]]:
    """One grouped scan of the ended attempts: counts by outcome and class, and durations.

    Each attempt is put in its bucket once (a CASE that stops at the first bound it fits)
    and the groups are made cumulative here: cheaper than a filtered count per bound.
    """
    seconds = _seconds_between(connection.dialect.name, attempts.c.started_at, attempts.c.ended_at)
    # Hosts' clocks may disagree (a crash is recorded by another worker): never below zero.
    seconds = sa.case((seconds < 0, 0.0), else_=seconds)
    bucket = sa.case(
        *((seconds <= bound, index) for index, bound in enumerate(DURATION_BUCKETS)),
        else_=len(DURATION_BUCKETS),
    ).label("bucket")
    rows = connection.execute(
        sa.select(
            attempts.c.asset,
            attempts.c.outcome,
            attempts.c.error_class,
            bucket,
            sa.func.count(),
            sa.func.sum(seconds),
        )
        .where(attempts.c.outcome.in_(ENDED_OUTCOMES), attempts.c.ended_at.is_not(None))
        .group_by(attempts.c.asset, attempts.c.outcome, attempts.c.error_class, bucket)
    ).all()
    tallies: dict[tuple[str, str, str], int] = {}
    per_bucket: dict[str, list[int]] = {}
    totals: dict[str, float] = {}
    for asset, outcome, error_class, index, count, total in rows:
        key = (asset, outcome, error_class or NO_ERROR_CLASS)
        tallies[key] = tallies.get(key, 0) + count
        per_bucket.setdefault(asset, [0] * (len(DURATION_BUCKETS) + 1))[index] += count
        totals[asset] = totals.get(asset, 0.0) + float(total or 0.0)
    durations = {
        asset: DurationHistogram(
            tuple(itertools.accumulate(counts[:-1])), sum(counts), round(totals[asset], 6)
        )
        for asset, counts in per_bucket.items()
    }
    return tallies, durations


def _seconds_between(dialect: str, start: sa.ColumnElement, end: sa.ColumnElement):
    if dialect == "sqlite":
        # SQLite stores the UTC timestamps as text; julianday() reads them as days, a
        # double whose precision is tens of microseconds here: kept to the millisecond.
        return sa.func.round((sa.func.julianday(end) - sa.func.julianday(start)) * 86_400.0, 3)
    # date_part is a double; extract() is a slower numeric since PostgreSQL 14.
    return sa.func.date_part("epoch", end - start)


def _rows_written(connection: sa.Connection) -> dict[str, int]:
    """Rows of each asset's done partitions, as their last successful attempt wrote them."""
    return {
        asset: int(total or 0)
        for asset, total in connection.execute(
            sa.select(partitions.c.asset, sa.func.sum(partitions.c.row_count))
            .where(partitions.c.status == PartitionStatus.DONE)
            .group_by(partitions.c.asset)
        )
    }


def _open_entries(connection: sa.Connection) -> dict[str, int]:
    return dict(
        connection.execute(
            sa.select(quarantine.c.asset, sa.func.count())
            .where(quarantine.c.status.in_(OPEN_ENTRY_STATUSES))
            .group_by(quarantine.c.asset)
        ).all()
    )
