"""The outbox's rows (`jp_outbox`): backfill requests, and the sensor's claims on them.

`outbox.store` checks what a request may hold and writes it in the caller's transaction;
`backfill_request_sensor` (`outbox.sensor`) drains the table with the claims below. Every
time here is the database's (`store.clock`): the application, the sensor and the
metrics read one another's stamps from different hosts.

The outbox's pure part, below the engine: `engine.warehouse.Warehouse` holds an `Outbox`
(`store.outbox`). The backlog's counts are the store's (`store.outbox_backlog`), because
`status` and `platform_health` (`store.health`) read them and the store imports no feature.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from jobs_platform.store.clock import Clock
from jobs_platform.store.rows import TableRow
from jobs_platform.store.schema import OutboxStatus, outbox


class OutboxNotInstalled(RuntimeError):
    """The warehouse has no `jp_outbox` table yet."""


@dataclass(frozen=True)
class ClaimedRequest:
    """A request a sensor tick now holds, as stored (not yet validated)."""

    id: int
    schema_version: int
    asset: str
    partitions: str  # the stored JSON text; `payload.parse_partitions` checks it
    reason: str
    correlation_id: str | None
    created_at: dt.datetime
    claimed_at: dt.datetime


# The columns a claim reads, in the order of ClaimedRequest's fields (all but claimed_at).
_STORED_REQUEST = [
    outbox.c[name]
    for name in (field.name for field in dataclasses.fields(ClaimedRequest))
    if name != "claimed_at"
]


class Outbox:
    """The outbox's claims and counts, stamped and judged on one clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def insert_request(self, connection: sa.Connection, request: Mapping[str, object]) -> int:
        """Add a checked request as pending, in the caller's transaction; returns its id.

        Raises `OutboxNotInstalled` when the warehouse has no `jp_outbox` table.
        """
        values = {
            **request,
            "status": OutboxStatus.PENDING,
            "created_at": self.clock.now(connection),
        }
        try:
            request_id: int = connection.execute(
                sa.insert(outbox).values(**values).returning(outbox.c.id)
            ).scalar_one()
        except sa.exc.DBAPIError as error:
            if _is_missing_table(error):
                raise OutboxNotInstalled(
                    "the warehouse has no jp_outbox table: run: jobs-platform db upgrade (a deploy "
                    "step) before requesting backfills; request_backfill never creates tables "
                    "inside your transaction"
                ) from error
            raise
        return request_id

    def claim_pending(
        self, connection: sa.Connection, limit: int, *, assets: Sequence[str] | None = None
    ) -> list[ClaimedRequest]:
        """Claim up to `limit` pending requests (for `assets` if given), oldest first.

        A code location's sensor passes the assets it serves: a request for another
        location's asset stays pending for that location, however many share the warehouse.

        Runs in the caller's transaction; the claim holds once it commits. On PostgreSQL the
        SELECT takes `FOR UPDATE SKIP LOCKED`, so concurrent claimers split the queue between
        them instead of waiting for, or sharing, each other's rows. SQLite has no row locks
        and the clause compiles to nothing there: it serialises writers instead (the
        warehouse engine begins every transaction IMMEDIATE). On both, the UPDATE repeats the
        claimable condition and only the rows it changed count as claimed.
        """
        return self._claim(
            connection, outbox.c.status == OutboxStatus.PENDING, (outbox.c.id,), limit, assets
        )

    def reclaim_unlaunched(
        self, connection: sa.Connection, limit: int, *, assets: Sequence[str] | None = None
    ) -> list[ClaimedRequest]:
        """Claim again up to `limit` claimed requests (for `assets` if given), the
        longest-claimed first.

        A claimed request stays claimable until a tick finds all its runs in the Dagster
        instance and marks it launched: a tick that died, timed out or whose run requests
        never reached Dagster loses nothing. Each reclaim stamps `claimed_at`, so the requests
        rotate and one whose runs never appear cannot hold the others back.
        """
        return self._claim(
            connection,
            outbox.c.status == OutboxStatus.CLAIMED,
            (outbox.c.claimed_at, outbox.c.id),
            limit,
            assets,
        )

    def mark_launched(self, connection: sa.Connection, request_id: int, run_key: str) -> bool:
        """Record that every run of the request exists in Dagster; False if it is not claimed."""
        return _finish_claim(
            connection,
            request_id,
            status=OutboxStatus.LAUNCHED,
            launched_at=self.clock.now(connection),
            run_key=run_key,
        )

    def _claim(
        self,
        connection: sa.Connection,
        claimable: sa.ColumnElement[bool],
        order_by: tuple[sa.ColumnElement[Any], ...],
        limit: int,
        assets: Sequence[str] | None,
    ) -> list[ClaimedRequest]:
        if limit < 1 or (assets is not None and not assets):
            return []
        if assets is not None:
            claimable = sa.and_(claimable, outbox.c.asset.in_(list(assets)))
        now = self.clock.now(connection)
        candidates = connection.execute(
            sa.select(*_STORED_REQUEST)
            .where(claimable)
            .order_by(*order_by)
            .limit(limit)
            .with_for_update(skip_locked=True)
        ).all()
        if not candidates:
            return []
        claimed = set(
            connection.execute(
                sa.update(outbox)
                .where(outbox.c.id.in_([row.id for row in candidates]), claimable)
                .values(status=OutboxStatus.CLAIMED, claimed_at=now)
                .returning(outbox.c.id)
            ).scalars()
        )
        return [
            ClaimedRequest(**row._mapping, claimed_at=now)
            for row in candidates
            if row.id in claimed
        ]


def mark_rejected(connection: sa.Connection, request_id: int, error: str) -> bool:
    """Record why the request can never run; False if this claim no longer holds it."""
    return _finish_claim(connection, request_id, status=OutboxStatus.REJECTED, error=error)


def list_requests(
    connection: sa.Connection,
    *,
    limit: int,
    statuses: Sequence[OutboxStatus] | None = None,
) -> list[TableRow]:
    """The newest `limit` requests (of `statuses`, if given), oldest first."""
    query = sa.select(outbox).order_by(outbox.c.id.desc()).limit(limit)
    if statuses:
        query = query.where(outbox.c.status.in_([str(status) for status in statuses]))
    return list(reversed(connection.execute(query).all()))


def _finish_claim(connection: sa.Connection, request_id: int, **values: object) -> bool:
    # Only a claimed request moves on: a tick that lost the race finds the request already
    # finished by another tick, and changes nothing.
    return (
        connection.execute(
            sa.update(outbox)
            .where(outbox.c.id == request_id, outbox.c.status == OutboxStatus.CLAIMED)
            .values(**values)
        ).rowcount
        == 1
    )


def _is_missing_table(error: sa.exc.DBAPIError) -> bool:
    # PostgreSQL: undefined_table (42P01); SQLite: "no such table: jp_outbox".
    if getattr(error.orig, "sqlstate", None) == "42P01":
        return True
    return "no such table" in str(error.orig)
