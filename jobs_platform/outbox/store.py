"""The transactional outbox: backfill requests written in the caller's own transaction.

Application code calls `request_backfill` with the SQLAlchemy `Connection` of the
transaction that changes its state, so the request commits with that change or not at
all: there is no window where the state changed and nobody asked for the backfill, or
the reverse. `backfill_request_sensor` (jobs_platform.outbox.sensor) drains the
table: `claim_pending` takes new requests, `reclaim_unlaunched` takes again those whose
runs Dagster has not shown yet, and `mark_launched` / `mark_rejected` end a claim.

What a request may hold is `jobs_platform.outbox.payload`: identifiers only, checked
here at enqueue and again by the sensor, which treats stored rows as untrusted.

Its rows and their SQL are `jobs_platform.outbox.queue` (the backlog's counts,
`jobs_platform.store.outbox_backlog`). The table is `jp_outbox`,
created with the framework's other tables by `jobs-platform db upgrade` (a deploy step,
before the first request; the sensor never creates it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa

from jobs_platform.outbox import queue as outbox_rows
from jobs_platform.outbox.payload import (
    MAX_ERROR_CHARS,
    MAX_REASON_CHARS,
    OUTBOX_SCHEMA_VERSION,
    InvalidRequest,
    checked_identifier,
    checked_partitions,
    checked_text,
)
from jobs_platform.outbox.queue import Outbox
from jobs_platform.store.clock import DATABASE_CLOCK

# Application code has no `Store`: its requests are stamped on the database's clock.
_OUTBOX = Outbox(DATABASE_CLOCK)


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
    }
    # In the caller's transaction, on the database's clock (`store.clock`).
    return _OUTBOX.insert_request(connection, values)


def mark_rejected(connection: sa.Connection, request_id: int, reason: str) -> bool:
    """Record why the request can never run; False if this claim no longer holds it."""
    return outbox_rows.mark_rejected(connection, request_id, reason[:MAX_ERROR_CHARS])
