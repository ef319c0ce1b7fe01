"""The dead letter's releases: requeuing entries, the requeue log, launch marks, resolving.

A release moves an open entry (`jp_quarantine`) to requeued, keeps who and why in the
requeue log (`jp_requeues`) and starts the partition's next episode; the run that then
succeeds resolves it. A requeued entry whose run ended before its new episode recorded an
attempt may be released again: the log keeps each release, and the number of releases
tells the entry's runs apart. Creating and reading entries is `dead_letter.entries`, whose
`DeadLetter` is a `Releases`.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Mapping, Sequence

import sqlalchemy as sa

from jobs_platform.store.clock import Clock, now_in_statement
from jobs_platform.store.partitions import PartitionStatus
from jobs_platform.store.rows import TableRow
from jobs_platform.store.schema import EntryStatus, attempts, partitions, quarantine, requeues

# The reason of a release again in the requeue log, before its cause: how one is counted.
AGAIN = "requested again"


class RequeuedBy(enum.StrEnum):
    """Who released an entry, as kept in its history."""

    CLI = "cli"  # a person, with `jobs-platform dead-letter requeue`
    UI = "ui"  # a person, with the `requeue_dead_letter` job in the Dagster UI
    REDRIVE = "redrive"  # `dead_letter_redrive_sensor`, when the entry's cause was gone


class Releases:
    """The dead letter's releases, stamped on one clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def release_entries(
        self, connection: sa.Connection, entries: Sequence[TableRow], *, by: RequeuedBy, reason: str
    ) -> list[TableRow]:
        """Release these open entries together; returns those released (an entry released
        meanwhile by someone else is left out, so each is released once).

        Each release is kept in the requeue log with `by` and `reason`, and each partition
        starts a new episode with a fresh attempt budget.
        """
        if not entries:
            return []
        now = self.clock.now(connection)
        by_id = {entry.id: entry for entry in entries}
        released_ids = [
            row.id
            for row in connection.execute(
                sa.update(quarantine)
                .where(
                    quarantine.c.id.in_(list(by_id)),
                    quarantine.c.status == EntryStatus.QUARANTINED,
                )
                .values(status=EntryStatus.REQUEUED, requeued_at=now)
                .returning(quarantine.c.id)
            )
        ]
        released = [by_id[entry_id] for entry_id in sorted(released_ids)]
        if not released:
            return []
        connection.execute(
            sa.insert(requeues),
            [
                {
                    "entry_id": entry.id,
                    "asset": entry.asset,
                    "partition": entry.partition,
                    "by": str(by),
                    "reason": reason,
                    "at": now,
                }
                for entry in released
            ],
        )
        # Each released partition opens the episode after its entry's, in one statement
        # whatever the number (a redrive tick or a group releases hundreds). A quarantined
        # partition always has its row: quarantining it set its state.
        of_partition = sa.and_(
            quarantine.c.id.in_(released_ids),
            quarantine.c.asset == partitions.c.asset,
            quarantine.c.partition == partitions.c.partition,
        )
        connection.execute(
            sa.update(partitions)
            .where(sa.exists().where(of_partition))
            .values(
                status=str(PartitionStatus.FAILED),
                episode=sa.select(quarantine.c.episode + 1).where(of_partition).scalar_subquery(),
                updated_at=now,
            )
        )
        return released

    def release_again(
        self, connection: sa.Connection, causes: Mapping[int, str], *, by: RequeuedBy
    ) -> list[int]:
        """Release requeued entries again, each for its cause, by id; returns the ids
        released (an entry whose partition has since recorded an attempt is left out).

        For an entry whose run ended without touching its partition (it failed before its
        step, or was canceled): a person asks for another run. Each is kept in the requeue
        log with the reason `requested again: <cause>`, so the entry's next run has a key of
        its own (`release_numbers`). The partition stays in the episode the first release
        opened, its budget unspent.
        """
        reasons = {entry_id: f"{AGAIN}: {cause}" for entry_id, cause in causes.items()}
        if not reasons:
            return []
        now = self.clock.now(connection)
        rows = sorted(
            connection.execute(
                sa.update(quarantine)
                .where(quarantine.c.id.in_(list(reasons)), _awaiting_run())
                .values(requeued_at=now, requeue_launched_at=None)
                .returning(quarantine.c.id, quarantine.c.asset, quarantine.c.partition)
            ),
            key=lambda row: row.id,
        )
        if not rows:
            return []
        connection.execute(
            sa.insert(requeues),
            [
                {
                    "entry_id": row.id,
                    "asset": row.asset,
                    "partition": row.partition,
                    "by": str(by),
                    "reason": reasons[row.id],
                    "at": now,
                }
                for row in rows
            ],
        )
        return [row.id for row in rows]

    def mark_requeue_launched(self, connection: sa.Connection, entry_ids: Sequence[int]) -> None:
        """Record that a sensor found these requeues' runs (the lost-launch rules:
        `dead_letter.requeue`)."""
        if entry_ids:
            connection.execute(
                sa.update(quarantine)
                .where(quarantine.c.id.in_(list(entry_ids)))
                .values(requeue_launched_at=self.clock.now(connection))
            )

    def forget_requeue_launched(self, connection: sa.Connection, entry_ids: Sequence[int]) -> None:
        """Clear the launch marks of these requeues: the sensor looks for their runs at its
        next tick, not after its grace (a person asked)."""
        if entry_ids:
            connection.execute(
                sa.update(quarantine)
                .where(quarantine.c.id.in_(list(entry_ids)))
                .values(requeue_launched_at=None)
            )

    def requeues_awaiting_run(
        self, connection: sa.Connection, assets: Sequence[str], limit: int, *, grace: dt.timedelta
    ) -> list[TableRow]:
        """Requeued entries of `assets` whose run may never have been launched, never-launched
        first: no attempt in the episode the requeue opened, and no launch marked within
        `grace` of now (on `clock`). The query only: the rules are `dead_letter.requeue`'s."""
        if not assets:
            return []
        recent = self.clock.now(connection) - grace
        launched_at = quarantine.c.requeue_launched_at
        return list(
            connection.execute(
                sa.select(quarantine)
                .where(
                    _awaiting_run(),
                    quarantine.c.asset.in_(list(assets)),
                    sa.or_(launched_at.is_(None), launched_at < recent),
                )
                .order_by(launched_at.is_not(None), launched_at, quarantine.c.id)
                .limit(limit)
            )
        )

    def resolve_requeued(self, connection: sa.Connection, asset: str, partition: str) -> int:
        """Mark requeued entries of the partition resolved once it has succeeded."""
        return connection.execute(
            sa.update(quarantine)
            .where(
                quarantine.c.asset == asset,
                quarantine.c.partition == partition,
                quarantine.c.status == EntryStatus.REQUEUED,
            )
            .values(
                status=EntryStatus.RESOLVED,
                resolved_at=now_in_statement(self.clock, connection),
            )
        ).rowcount


def requeue_log(connection: sa.Connection, asset: str, partition: str) -> list[TableRow]:
    """Every release of the partition's entries, oldest first (who, why, when)."""
    return list(
        connection.execute(
            sa.select(requeues)
            .where(requeues.c.asset == asset, requeues.c.partition == partition)
            .order_by(requeues.c.id)
        )
    )


def requeue_awaiting_run(connection: sa.Connection, asset: str, partition: str) -> TableRow | None:
    """The partition's latest entry if it is requeued and its new episode has not started
    (the lost-launch rules: `dead_letter.requeue`)."""
    latest = (
        sa.select(sa.func.max(quarantine.c.id))
        .where(quarantine.c.asset == asset, quarantine.c.partition == partition)
        .scalar_subquery()
    )
    return connection.execute(
        sa.select(quarantine).where(quarantine.c.id == latest, _awaiting_run())
    ).first()


def requeues_awaiting_run_matching(
    connection: sa.Connection,
    *,
    signature: str | None = None,
    asset: str | None = None,
    error_class: str | None = None,
    assets: Sequence[str] | None = None,
) -> list[TableRow]:
    """Requeued entries whose new episode has not started, matching every filter given,
    oldest first: those of a selection a person may requeue again once their run ended."""
    query = sa.select(quarantine).where(
        _awaiting_run(), *entry_filters(signature, asset, error_class, assets)
    )
    return list(connection.execute(query.order_by(quarantine.c.id)))


def entry_filters(
    signature: str | None,
    asset: str | None,
    error_class: str | None,
    assets: Sequence[str] | None,
) -> list[sa.ColumnElement[bool]]:
    """The conditions on dead-letter entries of a selection's filters, those given only."""
    conditions: list[sa.ColumnElement[bool]] = []
    if signature is not None:
        conditions.append(quarantine.c.signature == signature)
    if asset is not None:
        conditions.append(quarantine.c.asset == asset)
    if error_class is not None:
        conditions.append(quarantine.c.error_class == error_class)
    if assets is not None:
        conditions.append(quarantine.c.asset.in_(list(assets)))
    return conditions


def release_numbers(connection: sa.Connection, entry_ids: Sequence[int]) -> dict[int, int]:
    """The number of each entry's latest release, by id: 1, plus one for each time it was
    released again. A requeue run's key names the release it runs.

    Counted from the releases again only: an entry requeued before the requeue log existed
    has no row for its first release."""
    if not entry_ids:
        return {}
    rows = connection.execute(
        sa.select(requeues.c.entry_id, sa.func.count())
        .where(requeues.c.entry_id.in_(list(entry_ids)), requeues.c.reason.startswith(AGAIN))
        .group_by(requeues.c.entry_id)
    )
    again = {int(entry_id): int(count) for entry_id, count in rows}
    return {entry_id: 1 + again.get(entry_id, 0) for entry_id in entry_ids}


def _awaiting_run() -> sa.ColumnElement[bool]:
    # The requeue opened episode + 1; an attempt in it proves a run of the partition started.
    started = sa.exists().where(
        attempts.c.asset == quarantine.c.asset,
        attempts.c.partition == quarantine.c.partition,
        attempts.c.episode == quarantine.c.episode + 1,
    )
    return sa.and_(quarantine.c.status == EntryStatus.REQUEUED, ~started)


def resolved_since(
    connection: sa.Connection,
    assets: Sequence[str],
    since: dt.datetime | None,
    limit: int,
) -> list[TableRow]:
    """Entries of `assets` whose requeued partition succeeded at or after `since`, oldest
    first: what a fixed partition relaunches downstream (the requeue sensor's cursor)."""
    if not assets:
        return []
    query = sa.select(quarantine).where(
        quarantine.c.status == EntryStatus.RESOLVED, quarantine.c.asset.in_(list(assets))
    )
    if since is not None:
        query = query.where(quarantine.c.resolved_at >= since)
    return list(
        connection.execute(query.order_by(quarantine.c.resolved_at, quarantine.c.id).limit(limit))
    )
