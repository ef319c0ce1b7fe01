"""Health at a glance: where every backfill's partitions stand, from the warehouse alone."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import sqlalchemy as sa

from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.partitions import PartitionStatus
from jobs_platform.store.quarantine import QuarantineStatus
from jobs_platform.store.schema import leases, partitions, quarantine


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


def asset_health(
    connection: sa.Connection,
    partition_keys: Mapping[str, Sequence[str]],
    *,
    now: dt.datetime | None = None,
) -> dict[str, AssetHealth]:
    """Health of each asset, given every partition key it should have.

    Leases are judged live or expired on the database's clock, as the workers judge them.
    """
    now = now or DATABASE_CLOCK.now(connection)
    return {
        asset: _one_asset(connection, asset, set(keys), now)
        for asset, keys in partition_keys.items()
    }


def _one_asset(
    connection: sa.Connection, asset: str, expected: set[str], now: dt.datetime
) -> AssetHealth:
    rows = connection.execute(
        sa.select(
            partitions.c.partition,
            partitions.c.status,
            partitions.c.duration_seconds,
            partitions.c.row_count,
        ).where(partitions.c.asset == asset)
    ).all()
    quarantined = set(
        connection.execute(
            sa.select(quarantine.c.partition).where(
                quarantine.c.asset == asset, quarantine.c.status == QuarantineStatus.QUARANTINED
            )
        ).scalars()
    )
    status = {row.partition: row.status for row in rows}
    done = {key for key, state in status.items() if state == PartitionStatus.DONE}
    failed = {key for key, state in status.items() if state == PartitionStatus.FAILED}
    held = connection.execute(
        sa.select(leases.c.acquired_at, leases.c.expires_at).where(
            leases.c.asset == asset, leases.c.holder.is_not(None)
        )
    ).all()
    live = [lease for lease in held if lease.expires_at > now]
    durations = sorted(
        row.duration_seconds
        for row in rows
        if row.status == PartitionStatus.DONE and row.duration_seconds is not None
    )
    total_rows = sum(row.row_count or 0 for row in rows if row.status == PartitionStatus.DONE)
    return AssetHealth(
        done=len(done),
        failed=len(failed - quarantined),
        quarantined=len(quarantined),
        missing=len(expected - done - failed - quarantined),
        in_flight=len(live),
        oldest_lease_age_seconds=_oldest_age(live, now),
        expired_leases=len(held) - len(live),
        duration_p50_seconds=_percentile(durations, 50),
        duration_p95_seconds=_percentile(durations, 95),
        rows_per_second=round(total_rows / sum(durations), 1) if sum(durations) > 0 else None,
    )


def _oldest_age(live: list[sa.Row], now: dt.datetime) -> float | None:
    if not live:
        return None
    return round(max((now - lease.acquired_at).total_seconds() for lease in live), 3)


def _percentile(sorted_values: list[float], percent: float) -> float | None:
    """Nearest-rank percentile; None for no values."""
    if not sorted_values:
        return None
    rank = max(1, -(-len(sorted_values) * percent // 100))  # ceil without floats
    return round(sorted_values[int(rank) - 1], 3)


def health_as_dict(report: Mapping[str, AssetHealth]) -> dict[str, dict]:
    return {asset: asdict(health) for asset, health in report.items()}
