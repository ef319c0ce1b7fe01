"""Notices: alerts about a backfill as a whole, each raised once.

A quarantine alert speaks of one dead-letter entry. A notice speaks of a backfill: "the
circuit for signature S of `orders` opened", "partition P of `orders` is not ready past
its max_wait". Whoever sees it calls `raise_notice` in its own transaction; the notice
commits (or vanishes) with the caller's decision. Its `(kind, asset, key)` names it, so a
second call with the same three is a no-op: each occurrence is alerted once, however
many workers or ticks see it.

`dead_letter_sensor` delivers the recent notices of its location's backfills to every
configured sink, through the notices' own ledger (`jp_notice_ledger`), with the ledger
semantics of quarantine alerts: claimed, sent or failed per sink, tries bounded.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from jobs_platform.alerts.deliveries import SETTLED
from jobs_platform.store.clock import Clock
from jobs_platform.store.rows import TableRow, upsert_row
from jobs_platform.store.schema import alert_notices, notice_ledger

NoticeDetails = Mapping[str, str | int | None]
"""What a notice says beyond its summary, as flat JSON: `{"signature": "3f2a…", "count": 5}`."""

NOTICE_MAX_AGE = dt.timedelta(days=1)
"""Notices older than this are no longer delivered: a sink configured today is not sent
last month's. They stay in the table for `status` and `plan` to read."""


@dataclass(frozen=True)
class Notice:
    """One notice as the sinks send it (`summary()`, `as_dict()`, `idempotency_key`)."""

    notice_id: int
    kind: str
    """What happened, one word a receiver can switch on: `circuit_opened`, `not_ready`."""
    asset: str
    key: str
    """Which occurrence of `kind` on `asset`: a signature and when it opened, a partition."""
    text: str
    """The one-line summary given to `raise_notice`."""
    details: dict[str, str | int | None]
    raised_at: dt.datetime

    @classmethod
    def from_row(cls, row: TableRow) -> Notice:
        return cls(
            notice_id=row.id,
            kind=row.kind,
            asset=row.asset,
            key=row.key,
            text=row.summary,
            details=json.loads(row.details),
            raised_at=row.raised_at,
        )

    @property
    def event(self) -> str:
        """The same field as a quarantine alert's `event`, so a receiver reads one field."""
        return self.kind

    @property
    def idempotency_key(self) -> str:
        """The same for every delivery of this notice, and never a quarantine entry's."""
        return f"notice:{self.notice_id}"

    @property
    def subject(self) -> str:
        return f"{self.kind} {self.asset}"

    @property
    def message_id(self) -> str:
        return f"notice-{self.notice_id}"

    def as_dict(self) -> dict[str, Any]:
        """The notice as JSON-ready values (`raised_at` in ISO 8601)."""
        return {
            "event": self.event,
            "notice_id": self.notice_id,
            "kind": self.kind,
            "asset": self.asset,
            "key": self.key,
            "summary": self.text,
            "details": dict(self.details),
            "raised_at": self.raised_at.isoformat(),
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict())

    def summary(self) -> str:
        """A few lines of plain text for chat and mail."""
        lines = [f"jobs_platform: {self.asset}: {self.text}"]
        lines += [f"{name}: {value}" for name, value in self.details.items()]
        lines.append(f"({self.kind}, raised {self.raised_at.isoformat()})")
        return "\n".join(lines)


def raise_notice(
    connection: sa.Connection,
    clock: Clock,
    *,
    kind: str,
    asset: str,
    key: str,
    summary: str,
    details: NoticeDetails,
) -> bool:
    """Record a notice in the caller's transaction; True if it is new.

    A notice with the same `kind`, `asset` and `key` raised before makes this a no-op
    (False): callers that race or repeat alert once. Put what distinguishes occurrences in
    `key` (a circuit that opens twice raises two notices: key it by when it opened).
    `clock` is a `Clock` or anything with its `now(connection)`, e.g. a `Store`.
    """
    created = upsert_row(
        connection,
        alert_notices,
        {
            "kind": kind,
            "asset": asset,
            "key": key,
            "summary": summary,
            "details": json.dumps(dict(details)),
            "raised_at": clock.now(connection),
        },
        key=["kind", "asset", "key"],
    )
    return created is not None


def due_notices(
    connection: sa.Connection,
    clock: Clock,
    assets: Sequence[str],
    sinks: Sequence[str],
    *,
    limit: int,
    max_age: dt.timedelta = NOTICE_MAX_AGE,
) -> list[Notice]:
    """Recent notices of `assets` that some of `sinks` has not settled; oldest first.

    Settled is sent or given up, as the ledger says. Whether a retry is due yet is the
    delivery's to judge (`AlertLedger.claim_delivery`), not this query's.
    """
    if not assets or not sinks:
        return []
    settled = (
        sa.select(sa.func.count())
        .where(
            notice_ledger.c.notice_id == alert_notices.c.id,
            notice_ledger.c.sink.in_(list(sinks)),
            notice_ledger.c.status.in_([str(status) for status in SETTLED]),
        )
        .scalar_subquery()
    )
    rows = connection.execute(
        sa.select(alert_notices)
        .where(
            alert_notices.c.raised_at >= clock.now(connection) - max_age,
            alert_notices.c.asset.in_(list(assets)),
            settled < len(sinks),
        )
        .order_by(alert_notices.c.id)
        .limit(limit)
    )
    return [Notice.from_row(row) for row in rows]


def notices_of(
    connection: sa.Connection,
    assets: Sequence[str],
    *,
    kinds: Sequence[str] = (),
    since: dt.datetime | None = None,
) -> list[Notice]:
    """The notices of `assets` (of `kinds`, raised at or after `since`, when given); oldest
    first. For `status` and `plan` to say what was raised."""
    query = sa.select(alert_notices).where(alert_notices.c.asset.in_(list(assets)))
    if kinds:
        query = query.where(alert_notices.c.kind.in_(list(kinds)))
    if since is not None:
        query = query.where(alert_notices.c.raised_at >= since)
    return [Notice.from_row(row) for row in connection.execute(query.order_by(alert_notices.c.id))]
