"""The redrive: which open dead-letter entries to requeue on their own, and why.

An entry waits for a person until its cause is gone: its backfill's code changed
(`code_changed`), its input changed (`input_changed`), or the outage that used up its
attempts has had time to pass (`cooldown`). `dead_letter_redrive_sensor` asks these
questions tick after tick; each is one set-based query with a LIMIT, so a dead letter of
thousands of entries costs a tick what one page of it costs. Releasing is
`quarantine.release_entries(..., by=RequeuedBy.REDRIVE, reason=...)`, which keeps each
redrive in `jp_requeues`: the limit and the growing cool-down count those rows, per
partition and across its episodes.

Decisions about what cannot be known:
- An entry with no recorded code version (quarantined before migration 0004, or by a
  backfill without `code_version`) is not judged by code: it cannot be told apart from an
  entry of the current code, and an upgrade must not redrive every old entry at once.
  Going from no `code_version` to one therefore does not redrive; a bump from one version
  to another does. A backfill without `code_version` never triggers `code_changed`.
- An entry none of whose failing attempts could fingerprint its input (the file was
  missing, the source unreachable) records `UNREAD_INPUT`: once its input can be
  fingerprinted it has changed (the file arrived). An entry quarantined before
  fingerprints were recorded (NULL) is not judged by input.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Sequence

import sqlalchemy as sa

from jobs_platform.alerts.deliveries import SETTLED, event_sink, nothing_to_do_now
from jobs_platform.dead_letter.releases import RequeuedBy
from jobs_platform.store.clock import Clock
from jobs_platform.store.rows import TableRow
from jobs_platform.store.schema import EntryStatus, alert_ledger, quarantine, requeues


class RedriveReason(enum.StrEnum):
    """Why the redrive released an entry, as its requeue record and metric label say."""

    CODE_CHANGED = "code_changed"  # the backfill's code_version differs from the failing attempts'
    INPUT_CHANGED = "input_changed"  # the partition's input fingerprint differs from theirs
    COOLDOWN = "cooldown"  # an outage-spent entry whose cool-down has passed


# The classes an outage produces: the input was never judged bad, only unreachable. A
# `terminal` entry is wrong input or code, and waiting does not fix that.
COOLDOWN_CLASSES = ("retryable", "crash", "unknown")
COOLDOWN_GROWTH = 4
# 900 s * 4^k passes a year at k = 8: a cool-down that long means "never" in practice,
# and the cap keeps the arithmetic inside what a timedelta holds at any MAX_REDRIVES.
MAX_COOLDOWN_SECONDS = 365 * 24 * 3600.0
# The alert-ledger event of an entry whose redrives ran out: alerted once more per sink.
EXHAUSTED_EVENT = "redrives_exhausted"


def cooldown_seconds(first_cooldown_seconds: float, earlier_cooldown_redrives: int) -> float:
    """How long after its quarantine an outage-spent entry is redriven: the first cool-down,
    4 times longer for each earlier cool-down redrive of the partition (capped at a year)."""
    if earlier_cooldown_redrives >= 32:  # 4^32 s is far past the cap; skip the big power
        return MAX_COOLDOWN_SECONDS
    grown = first_cooldown_seconds * COOLDOWN_GROWTH**earlier_cooldown_redrives
    return float(min(grown, MAX_COOLDOWN_SECONDS))


def code_changed(recorded_version: str | None, current_version: str) -> bool:
    """Whether the code that made a record (`recorded_version`) differs from the backfill's
    now (pure): never when either is unknown (see the module's docstring).

    `code_changed_entries` asks the same of the dead letter in SQL; `jobs-platform plan`
    asks it of a done partition's last attempt.
    """
    return (
        bool(current_version)
        and recorded_version is not None
        and (recorded_version != current_version)
    )


def cooldown_ends(
    entry: TableRow,
    *,
    earlier_cooldown_redrives: int,
    redrives: int,
    first_cooldown_seconds: float,
    max_redrives: int,
) -> dt.datetime | None:
    """When the redrive releases an open entry on its cool-down (pure); None when it never
    will: a class an outage does not produce, or no redrives left to the partition.

    `Redrives.cooldown_due_entries` asks the same in SQL; `jobs-platform plan` says `until`.
    """
    if entry.error_class not in COOLDOWN_CLASSES or redrives >= max_redrives:
        return None
    seconds = cooldown_seconds(first_cooldown_seconds, earlier_cooldown_redrives)
    ends: dt.datetime = entry.quarantined_at + dt.timedelta(seconds=seconds)
    return ends


def redrives_of_partition(reason: RedriveReason | None = None) -> sa.ScalarSelect[int]:
    """The redrives of the entry's partition across its episodes (of one reason if given),
    correlated to `jp_quarantine`; by the index on (asset, partition, by)."""
    query = sa.select(sa.func.count()).where(
        requeues.c.asset == quarantine.c.asset,
        requeues.c.partition == quarantine.c.partition,
        requeues.c.by == str(RequeuedBy.REDRIVE),
    )
    if reason is not None:
        query = query.where(requeues.c.reason == str(reason))
    return query.scalar_subquery()


def _oldest_open_with_redrives_left(
    connection: sa.Connection,
    assets: Sequence[str],
    max_redrives: int,
    limit: int,
    *conditions: sa.ColumnElement[bool],
) -> list[TableRow]:
    """At most `limit` open entries of `assets` whose partition has redrives left and that
    meet `conditions`, oldest first: the candidates of one redrive reason."""
    return list(
        connection.execute(
            sa.select(quarantine)
            .where(
                quarantine.c.status == EntryStatus.QUARANTINED,
                quarantine.c.asset.in_(list(assets)),
                redrives_of_partition() < max_redrives,
                *conditions,
            )
            .order_by(quarantine.c.id)
            .limit(limit)
        )
    )


def code_changed_entries(
    connection: sa.Connection, asset: str, code_version: str, *, max_redrives: int, limit: int
) -> list[TableRow]:
    """Open entries of `asset` whose failing attempts ran another code version than
    `code_version` (the backfill's now), with redrives left; oldest first."""
    if not code_version:
        return []
    return _oldest_open_with_redrives_left(
        connection,
        [asset],
        max_redrives,
        limit,
        quarantine.c.code_version.is_not(None),
        quarantine.c.code_version != code_version,
    )


class Redrives:
    """The redrive's queries that compare a time, on one clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def cooldown_due_entries(
        self,
        connection: sa.Connection,
        assets: Sequence[str],
        *,
        first_cooldown_seconds: float,
        max_redrives: int,
        limit: int,
    ) -> list[TableRow]:
        """Open entries of `assets` that used up their attempts on an outage
        (`COOLDOWN_CLASSES`) and whose cool-down has passed (on `clock`, the database's),
        with redrives left; oldest first.

        The cool-down grows with the partition's earlier cool-down redrives, of which there are
        fewer than `max_redrives`: one threshold per count, computed here by `cooldown_seconds`,
        so the query compares timestamps only (the same SQL on PostgreSQL and SQLite).
        """
        if not assets or max_redrives < 1:
            return []
        earlier = redrives_of_partition(RedriveReason.COOLDOWN)
        now = self.clock.now(connection)
        due = sa.or_(
            *(
                sa.and_(
                    earlier == count,
                    quarantine.c.quarantined_at
                    <= now - dt.timedelta(seconds=cooldown_seconds(first_cooldown_seconds, count)),
                )
                for count in range(max_redrives)
            )
        )
        return _oldest_open_with_redrives_left(
            connection,
            assets,
            max_redrives,
            limit,
            quarantine.c.error_class.in_(COOLDOWN_CLASSES),
            due,
        )


def fingerprinted_entries(
    connection: sa.Connection,
    assets: Sequence[str],
    *,
    after_id: int,
    max_redrives: int,
    limit: int,
) -> list[TableRow]:
    """Open entries of `assets` with a recorded input fingerprint and redrives left, after
    `after_id`, oldest first: the next page of a round-robin walk, since each needs its
    input fingerprinted again (a file hash) to be judged."""
    if not assets:
        return []
    return _oldest_open_with_redrives_left(
        connection,
        assets,
        max_redrives,
        limit,
        quarantine.c.fingerprint.is_not(None),
        quarantine.c.id > after_id,
    )


def exhausted_entries_to_alert(
    connection: sa.Connection,
    assets: Sequence[str],
    *,
    max_redrives: int,
    sinks: Sequence[str],
    limit: int,
    now: dt.datetime | None = None,
) -> list[TableRow]:
    """Open entries of `assets` whose partition was redriven `max_redrives` times (at least
    once) and that some of `sinks` has not yet settled the last alert of; oldest first,
    each with its partition's `redrives`. Given `now`, an entry whose unsettled deliveries
    all wait for their next try is left out: a sink that is down holds up no other."""
    if not assets or not sinks:
        return []
    keys = [event_sink(sink, EXHAUSTED_EVENT) for sink in sinks]
    done = (
        alert_ledger.c.status.in_([str(status) for status in SETTLED])
        if now is None
        else nothing_to_do_now(alert_ledger, now)
    )
    sinks_done = (
        sa.select(sa.func.count())
        .where(alert_ledger.c.entry_id == quarantine.c.id, alert_ledger.c.sink.in_(keys), done)
        .scalar_subquery()
    )
    redrives = redrives_of_partition()
    return list(
        connection.execute(
            sa.select(quarantine, redrives.label("redrives"))
            .where(
                quarantine.c.status == EntryStatus.QUARANTINED,
                quarantine.c.asset.in_(list(assets)),
                redrives >= max(max_redrives, 1),
                sinks_done < len(keys),
            )
            .order_by(quarantine.c.id)
            .limit(limit)
        )
    )


def redrives_by_reason(connection: sa.Connection) -> dict[tuple[str, str], int]:
    """Every redrive so far, counted by (asset, reason): `jobs_platform_redrives_total`."""
    return {
        (asset, reason): count
        for asset, reason, count in connection.execute(
            sa.select(requeues.c.asset, requeues.c.reason, sa.func.count())
            .where(requeues.c.by == str(RequeuedBy.REDRIVE))
            .group_by(requeues.c.asset, requeues.c.reason)
        )
    }


def exhausted_entries(connection: sa.Connection, max_redrives: int) -> dict[str, int]:
    """Open entries per asset whose partition's redrives have run out (at least one was
    made): what waits for a person though the redrive is on."""
    return dict(
        connection.execute(
            sa.select(quarantine.c.asset, sa.func.count())
            .where(
                quarantine.c.status == EntryStatus.QUARANTINED,
                redrives_of_partition() >= max(max_redrives, 1),
            )
            .group_by(quarantine.c.asset)
        ).all()
    )
