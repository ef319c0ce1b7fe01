"""Paused backfills: one row per paused backfill, who paused it, when and why.

`jobs-platform backfill pause` writes the row and `resume` deletes it. While it exists the
attempt gate holds every partition of the backfill (`engine.holding`): no attempt is
recorded and no budget is spent. An attempt already past the gate finishes its partition;
a pause never interrupts one.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from jobs_platform.store.clock import Clock
from jobs_platform.store.rows import TableRow, upsert_row
from jobs_platform.store.schema import backfill_pauses


@dataclass(frozen=True)
class Pause:
    """A paused backfill: who paused it, when and why."""

    asset: str
    by: str
    at: dt.datetime
    reason: str | None = None

    def describe(self) -> str:
        """One line for a person, e.g. `paused by alice since 2026-12-06 21:00 UTC (warehouse
        maintenance)`."""
        text = f"paused by {self.by} since {self.at:%Y-%m-%d %H:%M} UTC"
        return f"{text} ({self.reason})" if self.reason else text


def describe_pause(paused: dict[str, Any] | None) -> str:
    """A pause as `steering_status` reports it, for a person: `paused by alice at …
    (warehouse maintenance)`, or `no`."""
    if paused is None:
        return "no"
    reason = f" ({paused['reason']})" if paused["reason"] else ""
    return f"paused by {paused['by']} at {paused['at']}{reason}"


def _pause(row: TableRow) -> Pause:
    return Pause(asset=row.asset, by=row.paused_by, at=row.paused_at, reason=row.reason)


def pause_of(connection: sa.Connection, asset: str) -> Pause | None:
    """The pause of `asset`'s backfill, or None when it is not paused."""
    row = connection.execute(
        sa.select(backfill_pauses).where(backfill_pauses.c.asset == asset)
    ).first()
    return None if row is None else _pause(row)


def paused_backfills(connection: sa.Connection) -> dict[str, Pause]:
    """Every paused backfill, by asset (`status`, `/metrics` and `platform_health` read it)."""
    rows = connection.execute(sa.select(backfill_pauses).order_by(backfill_pauses.c.asset))
    return {row.asset: _pause(row) for row in rows}


class Pauses:
    """Pausing and resuming backfills, stamped by `clock`."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def pause(
        self, connection: sa.Connection, asset: str, *, by: str, reason: str | None = None
    ) -> Pause:
        """Pause `asset`'s backfill, or return the pause already in place (kept as it was:
        pausing twice does not move the time it was paused)."""
        upsert_row(
            connection,
            backfill_pauses,
            {
                "asset": asset,
                "paused_by": by,
                "paused_at": self.clock.now(connection),
                "reason": reason,
            },
        )
        paused = pause_of(connection, asset)
        assert paused is not None  # written or kept just above, in this transaction
        return paused

    def resume(self, connection: sa.Connection, asset: str) -> Pause | None:
        """Resume `asset`'s backfill: the pause it lifted, or None when it was not paused.

        The partitions its runs held meanwhile are launched again by the holds sensor.
        """
        row = connection.execute(
            sa.delete(backfill_pauses)
            .where(backfill_pauses.c.asset == asset)
            .returning(*backfill_pauses.c)
        ).first()
        return None if row is None else _pause(row)
