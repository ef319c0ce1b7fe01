"""The alert ledger: each quarantine entry is alerted once per sink, whatever ticks repeat.

A delivery is claimed (`sending`) in its own transaction before the sink is called and
marked `sent` after, so a repeated or overlapping tick skips what was sent. A tick that
dies between the send and the mark leaves `sending`; the next tick sends again with the
same Idempotency-Key, so the receiver can drop the copy: at-least-once to the sink, once
per entry as the ledger sees it. The network call is never made inside a transaction
(on SQLite that would hold the warehouse's write lock for the whole send).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence

import sqlalchemy as sa

from jobs_platform.alerts.alert import QuarantineAlert
from jobs_platform.alerts.sinks import AlertSink
from jobs_platform.store.schema import alert_ledger, utcnow

logger = logging.getLogger("jobs_platform.alerts")

# Sends per (entry, sink) across ticks; a webhook also retries a few times within a tick.
DEFAULT_MAX_DELIVERY_TRIES = 5
_MAX_ERROR_CHARS = 2000


class DeliveryStatus(enum.StrEnum):
    """Where the delivery of one entry's alert to one sink stands."""

    SENDING = "sending"
    """Claimed just before the send; still so if that tick died mid-send, so it is resent."""
    SENT = "sent"
    """The sink accepted the alert; it is never sent there again."""
    FAILED = "failed"
    """The last send raised; a later tick tries again while tries remain."""
    GAVE_UP = "gave_up"
    """Every allowed try failed; the last error stays in the ledger for a person."""


SETTLED = frozenset({DeliveryStatus.SENT, DeliveryStatus.GAVE_UP})


def deliver_once(
    engine: sa.Engine,
    alert: QuarantineAlert,
    sinks: Sequence[AlertSink],
    *,
    max_tries: int = DEFAULT_MAX_DELIVERY_TRIES,
) -> dict[str, DeliveryStatus]:
    """Send the alert to every sink that has not had it yet; returns each sink's status."""
    names = [sink.name for sink in sinks]
    if len(set(names)) != len(names):
        raise ValueError(f"sink names must be unique, got {names}")
    return {sink.name: _deliver_to(engine, alert, sink, max_tries) for sink in sinks}


def is_settled(statuses: dict[str, DeliveryStatus]) -> bool:
    """True when no sink needs another try for this entry."""
    return all(status in SETTLED for status in statuses.values())


def delivery_rows(connection: sa.Connection, entry_id: int) -> list[sa.Row]:
    """The ledger rows of one entry, by sink name."""
    return list(
        connection.execute(
            sa.select(alert_ledger)
            .where(alert_ledger.c.entry_id == entry_id)
            .order_by(alert_ledger.c.sink)
        )
    )


def _deliver_to(
    engine: sa.Engine, alert: QuarantineAlert, sink: AlertSink, max_tries: int
) -> DeliveryStatus:
    mine, status = _claim(engine, alert.entry_id, sink.name, max_tries)
    if not mine:
        return status
    try:
        sink.send(alert)
    except Exception as exc:
        return _record_failure(engine, alert.entry_id, sink.name, exc, max_tries)
    with engine.begin() as connection:
        _update(connection, alert.entry_id, sink.name, status=DeliveryStatus.SENT, last_error=None)
    return DeliveryStatus.SENT


def _claim(
    engine: sa.Engine, entry_id: int, sink: str, max_tries: int
) -> tuple[bool, DeliveryStatus]:
    """Mark the delivery `sending` when it is ours to make; (ours?, current status)."""
    try:
        with engine.begin() as connection:
            row = connection.execute(
                sa.select(alert_ledger)
                .where(alert_ledger.c.entry_id == entry_id, alert_ledger.c.sink == sink)
                .with_for_update()
            ).first()
            if row is None:
                connection.execute(
                    sa.insert(alert_ledger).values(
                        entry_id=entry_id,
                        sink=sink,
                        status=DeliveryStatus.SENDING,
                        tries=1,
                        updated_at=utcnow(),
                    )
                )
                return True, DeliveryStatus.SENDING
            status = DeliveryStatus(row.status)
            if status in SETTLED:
                return False, status
            if row.tries >= max_tries:
                _update(connection, entry_id, sink, status=DeliveryStatus.GAVE_UP)
                return False, DeliveryStatus.GAVE_UP
            # FAILED, or SENDING left by a tick that died: send again, same Idempotency-Key.
            _update(connection, entry_id, sink, status=DeliveryStatus.SENDING, tries=row.tries + 1)
            return True, DeliveryStatus.SENDING
    except sa.exc.IntegrityError:
        # Another process inserted the claim first; that process sends.
        return False, DeliveryStatus.SENDING


def _record_failure(
    engine: sa.Engine, entry_id: int, sink: str, error: Exception, max_tries: int
) -> DeliveryStatus:
    message = str(error)[:_MAX_ERROR_CHARS] or type(error).__name__
    with engine.begin() as connection:
        tries = connection.execute(
            sa.select(alert_ledger.c.tries).where(
                alert_ledger.c.entry_id == entry_id, alert_ledger.c.sink == sink
            )
        ).scalar_one()
        status = DeliveryStatus.GAVE_UP if tries >= max_tries else DeliveryStatus.FAILED
        _update(connection, entry_id, sink, status=status, last_error=message)
    logger.warning(
        "alert for quarantine entry %s to %s failed (try %s of %s): %s",
        entry_id,
        sink,
        tries,
        max_tries,
        message,
    )
    return status


def _update(connection: sa.Connection, entry_id: int, sink: str, **values) -> None:
    connection.execute(
        sa.update(alert_ledger)
        .where(alert_ledger.c.entry_id == entry_id, alert_ledger.c.sink == sink)
        .values(**values, updated_at=utcnow())
    )
