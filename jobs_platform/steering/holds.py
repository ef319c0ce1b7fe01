"""Held partitions: what a run held back without an attempt, and why.

The attempt gate holds a partition when its backfill is paused or its input is not ready
(`HoldReason`). A hold records no attempt and spends no budget; it is not a failure of the
input. The gate writes one row per held partition (`Holds.hold`), so that the holds sensor
launches it again once the pause is lifted or the input is ready, then forgets it.

A row's life: the gate inserts it (`since`, the first time it was held for this reason),
or updates it when a later run holds it again. The sensor requests a run for it under a
run key (`Holds.mark_launched`); once that run exists the sensor deletes the row
(`Holds.forget_launched`). A run that holds the partition again clears its launch, so the
sensor launches it again under a new key.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from jobs_platform.steering.pauses import paused_backfills
from jobs_platform.store.clock import Clock
from jobs_platform.store.rows import TableRow, upsert_row
from jobs_platform.store.schema import backfill_holds
from jobs_platform.store.schema import partitions as partition_states


class HoldReason(enum.StrEnum):
    """Why the gate held a partition back without an attempt."""

    PAUSED = "paused"
    """Its backfill is paused (`jobs-platform backfill pause`); resuming launches it again."""
    NOT_READY = "not_ready"
    """Its `ready=` function said its input is not ready; the sensor launches it once it is."""


@dataclass(frozen=True)
class Hold:
    """One held partition, as the gate last recorded it."""

    asset: str
    partition: str
    reason: HoldReason
    since: dt.datetime
    """When it was first held for this reason: what `max_wait` is measured from."""
    run_id: str | None
    """The last run that held it."""
    held_at: dt.datetime
    checked_at: dt.datetime | None = None
    """When the sensor last asked whether its input is ready."""
    reported_at: dt.datetime | None = None
    """When it was reported as not ready past its `max_wait` (None: not reported)."""
    launch_key: str | None = None
    """The run key of the run the sensor requested for it (None: none yet)."""

    @property
    def reported(self) -> bool:
        """Whether it was reported as waiting past its `max_wait`."""
        return self.reported_at is not None


def _hold(row: TableRow) -> Hold:
    return Hold(
        asset=row.asset,
        partition=row.partition,
        reason=HoldReason(row.reason),
        since=row.since,
        run_id=row.run_id,
        held_at=row.held_at,
        checked_at=row.checked_at,
        reported_at=row.reported_at,
        launch_key=row.launch_key,
    )


def held_partitions(
    connection: sa.Connection, asset: str, partitions: Iterable[str] | None = None
) -> dict[str, Hold]:
    """The held partitions of `asset` (only those among `partitions` when given), by key."""
    query = sa.select(backfill_holds).where(backfill_holds.c.asset == asset)
    if partitions is not None:
        query = query.where(backfill_holds.c.partition.in_(list(partitions)))
    return {row.partition: _hold(row) for row in connection.execute(query)}


def hold_counts(connection: sa.Connection) -> dict[tuple[str, HoldReason], int]:
    """How many partitions each backfill holds, per reason (`status`, `/metrics`)."""
    rows = connection.execute(
        sa.select(backfill_holds.c.asset, backfill_holds.c.reason, sa.func.count()).group_by(
            backfill_holds.c.asset, backfill_holds.c.reason
        )
    )
    return {(asset, HoldReason(reason)): count for asset, reason, count in rows}


def overdue_counts(connection: sa.Connection) -> dict[str, int]:
    """How many partitions of each backfill were reported not ready past their `max_wait`."""
    rows = connection.execute(
        sa.select(backfill_holds.c.asset, sa.func.count())
        .where(backfill_holds.c.reported_at.is_not(None))
        .group_by(backfill_holds.c.asset)
    )
    return {asset: count for asset, count in rows}


def steering_status(connection: sa.Connection, assets: Iterable[str]) -> dict[str, dict[str, Any]]:
    """What `status`, `platform_health` and `/metrics` say of each backfill's steering:
    `paused` (`by`, `at`, `reason`; None when not paused), how many partitions it holds per
    reason, and how many waited for their input past `max_wait`."""
    pauses = paused_backfills(connection)
    counts = hold_counts(connection)
    overdue = overdue_counts(connection)
    report: dict[str, dict[str, Any]] = {}
    for asset in assets:
        paused = pauses.get(asset)
        report[asset] = {
            "paused": None
            if paused is None
            else {"by": paused.by, "at": paused.at.isoformat(), "reason": paused.reason},
            "held": {str(reason): counts.get((asset, reason), 0) for reason in HoldReason},
            "not_ready_past_max_wait": overdue.get(asset, 0),
        }
    return report


class Holds:
    """Recording, launching and forgetting held partitions, stamped by `clock`."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def hold(
        self,
        connection: sa.Connection,
        asset: str,
        partition: str,
        reason: HoldReason,
        *,
        run_id: str | None,
    ) -> Hold:
        """Record that `run_id` held `partition` back for `reason`.

        Held again for the same reason, it keeps its `since` and its report; for another
        reason, both start over. Either way its launch is cleared: this run was that
        launch, or came after it, so the sensor launches the partition again.
        """
        now = self.clock.now(connection)
        table = backfill_holds.c
        same_reason = table.reason == reason.value
        held_again = connection.execute(
            sa.update(backfill_holds)
            .where(table.asset == asset, table.partition == partition)
            .values(
                since=sa.case((same_reason, table.since), else_=now),
                reported_at=sa.case((same_reason, table.reported_at), else_=None),
                reason=reason.value,
                run_id=run_id,
                held_at=now,
                launch_key=None,
                launched_at=None,
            )
        )
        if held_again.rowcount == 0:
            # Two runs holding the same partition at once both insert: the later one's
            # run and time win, as they would have by the update above.
            upsert_row(
                connection,
                backfill_holds,
                {
                    "asset": asset,
                    "partition": partition,
                    "reason": reason.value,
                    "since": now,
                    "run_id": run_id,
                    "held_at": now,
                },
                update=("run_id", "held_at"),
            )
        return held_partitions(connection, asset, [partition])[partition]

    def mark_launched(
        self, connection: sa.Connection, asset: str, partitions: Sequence[str], run_key: str
    ) -> None:
        """Record that the sensor requested the run `run_key` for these held partitions."""
        table = backfill_holds.c
        connection.execute(
            sa.update(backfill_holds)
            .where(table.asset == asset, table.partition.in_(list(partitions)))
            .values(launch_key=run_key, launched_at=self.clock.now(connection))
        )

    def forget_launched(self, connection: sa.Connection, run_keys: Iterable[str]) -> int:
        """Forget the held partitions whose run (by key) exists now: returns how many.

        A row held again since its launch has no key any more, so it is kept.
        """
        keys = list(run_keys)
        if not keys:
            return 0
        deleted = connection.execute(
            sa.delete(backfill_holds).where(backfill_holds.c.launch_key.in_(keys))
        )
        return deleted.rowcount

    def forget_done(self, connection: sa.Connection, asset: str) -> int:
        """Forget the held partitions of `asset` that another run has done since they were
        held (a person relaunched them, or the Dagster backfill was retried)."""
        table = backfill_holds.c
        done_since = (
            sa.select(partition_states.c.partition)
            .where(
                partition_states.c.asset == table.asset,
                partition_states.c.partition == table.partition,
                partition_states.c.status == "done",
                partition_states.c.updated_at > table.held_at,
            )
            .exists()
        )
        deleted = connection.execute(
            sa.delete(backfill_holds).where(table.asset == asset, done_since)
        )
        return deleted.rowcount

    def mark_checked(
        self, connection: sa.Connection, asset: str, partitions: Sequence[str]
    ) -> None:
        """Record that the sensor asked whether these partitions' input is ready."""
        table = backfill_holds.c
        connection.execute(
            sa.update(backfill_holds)
            .where(table.asset == asset, table.partition.in_(list(partitions)))
            .values(checked_at=self.clock.now(connection))
        )

    def mark_reported(
        self, connection: sa.Connection, asset: str, partitions: Sequence[str]
    ) -> list[str]:
        """Record that these partitions were reported waiting past their `max_wait`: returns
        those not reported before (each is reported once)."""
        table = backfill_holds.c
        rows = connection.execute(
            sa.update(backfill_holds)
            .where(
                table.asset == asset,
                table.partition.in_(list(partitions)),
                table.reported_at.is_(None),
            )
            .values(reported_at=self.clock.now(connection))
            .returning(table.partition)
        )
        return sorted(row.partition for row in rows)

    def report_overdue(
        self, connection: sa.Connection, asset: str, max_wait: dt.timedelta
    ) -> list[str]:
        """Mark the partitions of `asset` held as not ready for longer than `max_wait` and
        not reported yet: returns them (each is reported once, never quarantined)."""
        table = backfill_holds.c
        rows = connection.execute(
            sa.update(backfill_holds)
            .where(
                table.asset == asset,
                table.reason == HoldReason.NOT_READY.value,
                table.reported_at.is_(None),
                table.since < self.clock.now(connection) - max_wait,
            )
            .values(reported_at=self.clock.now(connection))
            .returning(table.partition)
        )
        return sorted(row.partition for row in rows)

    def to_check(self, connection: sa.Connection, asset: str, limit: int) -> list[Hold]:
        """At most `limit` partitions of `asset` held as not ready and not launched, the
        least recently checked first (never checked before all): one tick's readiness checks."""
        table = backfill_holds.c
        rows = connection.execute(
            sa.select(backfill_holds)
            .where(
                table.asset == asset,
                table.reason == HoldReason.NOT_READY.value,
                table.launch_key.is_(None),
            )
            .order_by(table.checked_at.asc().nulls_first(), table.partition)
            .limit(limit)
        )
        return [_hold(row) for row in rows]

    def to_launch(self, connection: sa.Connection, asset: str) -> list[Hold]:
        """The partitions of `asset` held by a pause that is lifted now, or launched before
        and not yet found: what the sensor requests runs for."""
        table = backfill_holds.c
        rows = connection.execute(
            sa.select(backfill_holds)
            .where(
                table.asset == asset,
                sa.or_(table.reason == HoldReason.PAUSED.value, table.launch_key.is_not(None)),
            )
            .order_by(table.partition)
        )
        return [_hold(row) for row in rows]
