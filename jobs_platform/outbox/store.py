"""The transactional outbox: backfill requests written in the caller's own transaction.

Application code calls `request_backfill` with the SQLAlchemy `Connection` of the
transaction that changes its state, so the request commits with that change or not at
all: there is no window where the state changed and nobody asked for the backfill, or
the reverse. `backfill_request_sensor` (jobs_platform.orchestration.outbox) drains the
table: `claim_pending` takes new requests, `reclaim_unlaunched` takes again those whose
runs Dagster has not shown yet, and `mark_launched` / `mark_rejected` end a claim.

What a request may hold is `jobs_platform.outbox.payload`: identifiers only, checked
here at enqueue and again by the sensor, which treats stored rows as untrusted.

The table is `jp_outbox`, created with the framework's other tables by `jobs-platform db
upgrade` (a deploy step, before the first request; the sensor never creates it).
"""

from __future__ import annotations

import datetime as dt
import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.outbox.payload import (
    MAX_ERROR_CHARS,
    MAX_REASON_CHARS,
    OUTBOX_SCHEMA_VERSION,
    InvalidRequest,
    checked_identifier,
    checked_partitions,
    checked_text,
)
from jobs_platform.store.schema import outbox, utcnow


class OutboxStatus(enum.StrEnum):
    """Where a backfill request stands."""

    PENDING = "pending"
    """`request_backfill` wrote it; it commits (or vanishes) with the caller's transaction."""
    CLAIMED = "claimed"
    """A sensor tick took it (`claim_pending`) and requested its runs; every later tick takes
    it again (`reclaim_unlaunched`) and requests the runs Dagster does not have yet."""
    LAUNCHED = "launched"
    """A tick found every run of the request in the Dagster instance (`mark_launched`); final."""
    REJECTED = "rejected"
    """The sensor found it invalid (`mark_rejected`, reason in `error`); final, never retried."""


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


@dataclass(frozen=True)
class QueueStats:
    """How the outbox is doing: the backlog, its age and the outcomes so far."""

    pending: int
    claimed: int
    launched: int
    rejected: int
    oldest_pending_age_seconds: float | None  # None when nothing is pending


def request_backfill(
    connection: sa.Connection,
    asset: str,
    partitions: Sequence[str],
    *,
    reason: str,
    correlation_id: str | None = None,
) -> int:
    """Request a backfill of `asset`'s `partitions` inside the caller's transaction.

    The INSERT runs on `connection` in the transaction already open there; this function
    never commits, rolls back or begins one, so the request is committed exactly when the
    caller's state change is. It creates no table either: `jp_outbox` must exist
    (`jobs-platform db upgrade` at deploy time), else `OutboxNotInstalled`.
    The caller's database must be the warehouse the sensor reads.

    Returns the request id; the run of a one-partition request gets it as its `run_key`.
    Raises `InvalidRequest` (a ValueError) for arguments that can never make a valid
    request; whether the asset and partitions exist is checked by the sensor.
    """
    if not isinstance(connection, sa.Connection):
        raise TypeError(
            "request_backfill needs a SQLAlchemy Connection (with an ORM Session, pass "
            f"session.connection()), got {type(connection).__name__}"
        )
    if not connection.in_transaction():
        raise InvalidRequest(
            "request_backfill writes inside your transaction, and this connection has none: "
            "call it within `with engine.begin() as connection:` (or after connection.begin()) "
            "together with the state change it belongs to"
        )
    values = {
        "schema_version": OUTBOX_SCHEMA_VERSION,
        "asset": checked_identifier(asset, "asset"),
        "partitions": json.dumps(checked_partitions(partitions), ensure_ascii=False),
        "reason": checked_text(reason, "reason", MAX_REASON_CHARS, printable=False),
        "correlation_id": None
        if correlation_id is None
        else checked_identifier(correlation_id, "correlation_id"),
        "status": OutboxStatus.PENDING,
        "created_at": utcnow(),
    }
    try:
        return connection.execute(
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


def claim_pending(
    connection: sa.Connection, limit: int, *, now: dt.datetime | None = None
) -> list[ClaimedRequest]:
    """Claim up to `limit` pending requests, oldest first.

    Runs in the caller's transaction; the claim holds once it commits. On PostgreSQL the
    SELECT takes `FOR UPDATE SKIP LOCKED`, so concurrent claimers split the queue between
    them instead of waiting for, or sharing, each other's rows. SQLite has no row locks
    and the clause compiles to nothing there: it serialises writers instead (the
    warehouse engine begins every transaction IMMEDIATE). On both, the UPDATE repeats the
    claimable condition and only the rows it changed count as claimed.
    """
    return _claim(connection, outbox.c.status == OutboxStatus.PENDING, (outbox.c.id,), limit, now)


def reclaim_unlaunched(
    connection: sa.Connection, limit: int, *, now: dt.datetime | None = None
) -> list[ClaimedRequest]:
    """Claim again up to `limit` claimed requests, the longest-claimed first.

    A claimed request stays claimable until a tick finds all its runs in the Dagster
    instance and marks it launched: a tick that died, timed out or whose run requests
    never reached Dagster loses nothing. Each reclaim stamps `claimed_at`, so the requests
    rotate and one whose runs never appear cannot hold the others back.
    """
    return _claim(
        connection,
        outbox.c.status == OutboxStatus.CLAIMED,
        (outbox.c.claimed_at, outbox.c.id),
        limit,
        now,
    )


def mark_launched(
    connection: sa.Connection, request_id: int, run_key: str, *, now: dt.datetime | None = None
) -> bool:
    """Record that every run of the request exists in Dagster; False if it is not claimed."""
    return _finish_claim(
        connection,
        request_id,
        status=OutboxStatus.LAUNCHED,
        launched_at=now or utcnow(),
        run_key=run_key,
    )


def mark_rejected(connection: sa.Connection, request_id: int, reason: str) -> bool:
    """Record why the request can never run; False if this claim no longer holds it."""
    return _finish_claim(
        connection, request_id, status=OutboxStatus.REJECTED, error=reason[:MAX_ERROR_CHARS]
    )


def queue_stats(connection: sa.Connection, *, now: dt.datetime | None = None) -> QueueStats:
    """Requests per status and the age of the oldest pending one, in one grouped query."""
    counts = {str(status): 0 for status in OutboxStatus}
    oldest_pending = None
    for status, count, oldest in connection.execute(
        sa.select(outbox.c.status, sa.func.count(), sa.func.min(outbox.c.created_at)).group_by(
            outbox.c.status
        )
    ):
        if status in counts:
            counts[status] = count
        if status == OutboxStatus.PENDING:
            oldest_pending = oldest
    age = None
    if oldest_pending is not None:
        age = max(0.0, ((now or utcnow()) - oldest_pending).total_seconds())
    return QueueStats(
        pending=counts[OutboxStatus.PENDING],
        claimed=counts[OutboxStatus.CLAIMED],
        launched=counts[OutboxStatus.LAUNCHED],
        rejected=counts[OutboxStatus.REJECTED],
        oldest_pending_age_seconds=age,
    )


def list_requests(
    connection: sa.Connection,
    *,
    limit: int,
    statuses: Sequence[OutboxStatus] | None = None,
) -> list[sa.Row]:
    """The newest `limit` requests (of `statuses`, if given), oldest first."""
    query = sa.select(outbox).order_by(outbox.c.id.desc()).limit(limit)
    if statuses:
        query = query.where(outbox.c.status.in_([str(status) for status in statuses]))
    return list(reversed(connection.execute(query).all()))


def _claim(
    connection: sa.Connection,
    claimable: sa.ColumnElement[bool],
    order_by: tuple[sa.ColumnElement, ...],
    limit: int,
    now: dt.datetime | None,
) -> list[ClaimedRequest]:
    if limit < 1:
        return []
    now = now or utcnow()
    candidates = connection.execute(
        sa.select(outbox)
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
        ClaimedRequest(
            id=row.id,
            schema_version=row.schema_version,
            asset=row.asset,
            partitions=row.partitions,
            reason=row.reason,
            correlation_id=row.correlation_id,
            created_at=row.created_at,
            claimed_at=now,
        )
        for row in candidates
        if row.id in claimed
    ]


def _finish_claim(connection: sa.Connection, request_id: int, **values) -> bool:
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
