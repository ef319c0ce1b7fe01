"""Health at a glance: where every backfill's partitions stand, from the warehouse alone."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import sqlalchemy as sa

from jobs_platform.store.clock import Clock
from jobs_platform.store.outbox_backlog import OutboxBacklog
from jobs_platform.store.partitions import PartitionStatus
from jobs_platform.store.schema import EntryStatus, leases, partitions, quarantine, rejected_rows

_DONE_OR_FAILED = (PartitionStatus.DONE, PartitionStatus.FAILED)


@dataclass(frozen=True)
class AssetHealth:
    """One backfill asset's partitions by state, in-flight work and speed."""

    done: int
    failed: int
    quarantined: int
    missing: int
    in_flight: int
    oldest_lease_age_seconds: float | None
    expired_leases: int
    duration_p50_seconds: float | None
    duration_p95_seconds: float | None
    rows_per_second: float | None
    rows_rejected: int = 0  # input rows rejected under `bad_rows=RejectRows(...)`


@dataclass(frozen=True)
class KeyWindow:
    """Every partition key of a time-window backfill, without listing them: `count` keys
    from `first` to `last` (inclusive), all of `first`'s length, sorting as their times do
    (a format of zero-padded fields from the year down: `2024-01-31`, `2024-01-31-05:00`).

    `missing` is then counted in the database, by the key's range on the primary key's
    index, instead of sending or fetching 100,000 keys. A row within the range whose key
    has another length (a daily key left under an hourly backfill) is no key of the
    window; one of the same length and another cadence (a half hour under hourly) would
    pass for one: the window assumes the rows in it were written under its cadence.
    """

    first: str
    last: str
    count: int


ExpectedKeys = Sequence[str] | KeyWindow
"""What a backfill should have: every key, or (a time-window backfill) its window."""


class Health:
    """The figures of `status` and `platform_health`, leases and staleness judged on one clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.outbox_backlog = OutboxBacklog(clock)

    def asset_health(
        self, connection: sa.Connection, partition_keys: Mapping[str, ExpectedKeys]
    ) -> dict[str, AssetHealth]:
        """Health of each asset, given every partition key it should have (or its window).

        Set-based: a handful of aggregate queries per asset, whatever its partition count
        (10,000 partitions per asset answer in tens of milliseconds; docs/BENCHMARKS.md).
        Leases are judged live or expired on the database's clock, as the workers judge them.
        """
        now = self.clock.now(connection)
        return {
            asset: _one_asset(connection, asset, keys, now)
            for asset, keys in partition_keys.items()
        }

    def backfill_status(
        self, connection: sa.Connection, partition_keys: Mapping[str, ExpectedKeys]
    ) -> dict[str, Any]:
        """The figures of `jobs-platform status` (no window) and of `platform_health`, given
        every partition key each backfill should have (or its window): each asset's health,
        and the location's pending backfill requests (those for its backfills only).

        One function for both ways status learns the keys (the catalog, or the loaded code
        location), so that both print the same figures for the same warehouse.
        """
        assets = self.asset_health(connection, partition_keys)
        queue = self.outbox_backlog.queue_stats(connection, assets=list(partition_keys))
        return {
            "assets": assets,
            "oldest_pending_request_age_seconds": queue.oldest_pending_age_seconds,
            "pending_requests": queue.pending,
        }

    def window_health(
        self, connection: sa.Connection, partition_keys: Mapping[str, Sequence[str]]
    ) -> dict[str, AssetHealth]:
        """Health of each asset over exactly the given partition keys (a window of a backfill).

        Every figure counts those partitions only: `missing` is the keys asked about with no
        state, `done` and its durations only theirs, leases only on them. The rows are read
        by the key's range (between the least and the greatest key, on the primary key's
        index) and kept when they are keys of the window, so a window of any length costs one
        read of its own rows, and a key format that does not sort like time stays exact.
        """
        now = self.clock.now(connection)
        return {
            asset: _one_asset_in(connection, asset, set(keys), now)
            for asset, keys in partition_keys.items()
        }


def _missing(
    connection: sa.Connection, asset: str, expected: ExpectedKeys, quarantined: set[str]
) -> int:
    """The expected keys with no state at all: neither done, failed nor quarantined."""
    known_status = partitions.c.status.in_([str(PartitionStatus.DONE), str(PartitionStatus.FAILED)])
    if not isinstance(expected, KeyWindow):
        # Only keys are fetched, one column.
        known = set(
            connection.execute(
                sa.select(partitions.c.partition).where(partitions.c.asset == asset, known_status)
            ).scalars()
        )
        return len(set(expected) - known - quarantined)
    if expected.count == 0:
        return 0
    length = len(expected.first)

    def in_window(table: sa.Table) -> sa.ColumnElement[bool]:
        return sa.and_(
            table.c.asset == asset,
            table.c.partition.between(expected.first, expected.last),
            sa.func.length(table.c.partition) == length,
        )

    known_count = connection.execute(
        sa.select(sa.func.count()).where(in_window(partitions), known_status)
    ).scalar_one()
    # Open entries of the window without a done or failed row (those are counted above).
    quarantined_only = connection.execute(
        sa.select(sa.func.count(sa.distinct(quarantine.c.partition))).where(
            in_window(quarantine),
            quarantine.c.status == EntryStatus.QUARANTINED,
            ~sa.exists().where(
                partitions.c.asset == asset,
                partitions.c.partition == quarantine.c.partition,
                known_status,
            ),
        )
    ).scalar_one()
    return max(expected.count - known_count - quarantined_only, 0)


def _one_asset(
    connection: sa.Connection, asset: str, expected: ExpectedKeys, now: dt.datetime
) -> AssetHealth:
    of_asset = partitions.c.asset == asset
    done = sa.and_(of_asset, partitions.c.status == PartitionStatus.DONE)
    open_entry = sa.and_(
        quarantine.c.asset == asset, quarantine.c.status == EntryStatus.QUARANTINED
    )
    done_count, timed, total_seconds, total_rows = connection.execute(
        sa.select(
            sa.func.count(),
            sa.func.count(partitions.c.duration_seconds),
            sa.func.sum(partitions.c.duration_seconds),
            sa.func.sum(partitions.c.row_count),
        ).where(done)
    ).one()
    # A failed partition with an open quarantine entry counts as quarantined only.
    failed = connection.execute(
        sa.select(sa.func.count()).where(
            of_asset,
            partitions.c.status == PartitionStatus.FAILED,
            ~sa.exists().where(open_entry, quarantine.c.partition == partitions.c.partition),
        )
    ).scalar_one()
    quarantined = set(
        connection.execute(sa.select(quarantine.c.partition).where(open_entry)).scalars()
    )
    live = leases.c.expires_at > now
    in_flight, held, oldest_live = connection.execute(
        sa.select(
            sa.func.count().filter(live),
            sa.func.count(),
            sa.func.min(leases.c.acquired_at).filter(live),
        ).where(leases.c.asset == asset, leases.c.holder.is_not(None))
    ).one()
    return AssetHealth(
        done=done_count,
        failed=failed,
        quarantined=len(quarantined),
        missing=_missing(connection, asset, expected, quarantined),
        in_flight=in_flight,
        oldest_lease_age_seconds=(
            round((now - oldest_live).total_seconds(), 3) if oldest_live is not None else None
        ),
        expired_leases=held - in_flight,
        duration_p50_seconds=_percentile(connection, done, timed, 50),
        duration_p95_seconds=_percentile(connection, done, timed, 95),
        rows_per_second=(
            round(int(total_rows or 0) / float(total_seconds), 1) if total_seconds else None
        ),
        rows_rejected=connection.execute(
            sa.select(sa.func.count()).where(rejected_rows.c.asset == asset)
        ).scalar_one(),
    )


def _one_asset_in(
    connection: sa.Connection, asset: str, window: set[str], now: dt.datetime
) -> AssetHealth:
    if not window:
        return AssetHealth(0, 0, 0, 0, 0, None, 0, None, None, None)
    lowest, highest = min(window), max(window)

    def in_range(table: sa.Table) -> sa.ColumnElement[bool]:
        return sa.and_(table.c.asset == asset, table.c.partition.between(lowest, highest))

    states = [
        row
        for row in connection.execute(
            sa.select(
                partitions.c.partition,
                partitions.c.status,
                partitions.c.duration_seconds,
                partitions.c.row_count,
            ).where(in_range(partitions))
        )
        if row.partition in window
    ]
    quarantined = window & set(
        connection.execute(
            sa.select(quarantine.c.partition).where(
                in_range(quarantine), quarantine.c.status == EntryStatus.QUARANTINED
            )
        ).scalars()
    )
    held = [
        row
        for row in connection.execute(
            sa.select(leases.c.partition, leases.c.expires_at, leases.c.acquired_at).where(
                in_range(leases), leases.c.holder.is_not(None)
            )
        )
        if row.partition in window
    ]
    done = [row for row in states if row.status == PartitionStatus.DONE]
    # A failed partition with an open quarantine entry counts as quarantined only.
    failed = [
        row
        for row in states
        if row.status == PartitionStatus.FAILED and row.partition not in quarantined
    ]
    known = {row.partition for row in states if row.status in _DONE_OR_FAILED}
    live = [row for row in held if row.expires_at > now]
    durations = sorted(row.duration_seconds for row in done if row.duration_seconds is not None)
    total_seconds = sum(durations)
    total_rows = sum(row.row_count or 0 for row in done)
    oldest_live = min((row.acquired_at for row in live), default=None)
    return AssetHealth(
        done=len(done),
        failed=len(failed),
        quarantined=len(quarantined),
        missing=len(window - known - quarantined),
        in_flight=len(live),
        oldest_lease_age_seconds=(
            round((now - oldest_live).total_seconds(), 3) if oldest_live is not None else None
        ),
        expired_leases=len(held) - len(live),
        duration_p50_seconds=_nearest_rank(durations, 50),
        duration_p95_seconds=_nearest_rank(durations, 95),
        rows_per_second=round(total_rows / total_seconds, 1) if total_seconds else None,
        rows_rejected=sum(
            count
            for partition, count in connection.execute(
                sa.select(rejected_rows.c.partition, sa.func.count())
                .where(in_range(rejected_rows))
                .group_by(rejected_rows.c.partition)
            )
            if partition in window
        ),
    )


def _nearest_rank(ordered: Sequence[float], percent: float) -> float | None:
    """The nearest-rank percentile of values already in order, as `_percentile` reads it."""
    if not ordered:
        return None
    rank = max(1, -(-len(ordered) * percent // 100))
    return round(ordered[int(rank) - 1], 3)


def _percentile(
    connection: sa.Connection, done: sa.ColumnElement[bool], count: int, percent: float
) -> float | None:
    """Nearest-rank percentile of done partitions' durations; None for none.

    One index-ordered read at the rank (`ix_jp_partitions_status`), on any backend:
    SQLite has no percentile aggregate.
    """
    if not count:
        return None
    rank = max(1, -(-count * percent // 100))  # ceil without floats
    value: float = connection.execute(
        sa.select(partitions.c.duration_seconds)
        .where(done, partitions.c.duration_seconds.is_not(None))
        .order_by(partitions.c.duration_seconds)
        .offset(int(rank) - 1)
        .limit(1)
    ).scalar_one()
    return round(value, 3)


def health_as_dict(report: Mapping[str, AssetHealth]) -> dict[str, dict[str, Any]]:
    return {asset: asdict(health) for asset, health in report.items()}
