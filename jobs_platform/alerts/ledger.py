"""The alert ledger: each alert is delivered once per sink, whatever ticks repeat.

An alert is a quarantine entry's event (kept in `jp_alert_ledger`) or a notice (kept in
`jp_notice_ledger`); both ledgers follow the same rules.

A delivery is claimed (`sending`) in its own transaction before the sink is called and
marked `sent` after, so a repeated or overlapping tick skips what was sent. A tick that
dies between the send and the mark leaves `sending`; the next tick sends again with the
same Idempotency-Key, so the receiver can drop the copy: at-least-once to the sink, once
per entry as the ledger sees it. The network call is never made inside a transaction
(on SQLite that would hold the warehouse's write lock for the whole send).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobs_platform.alerts.alert import QuarantineAlert
from jobs_platform.alerts.deliveries import SETTLED, AlertLedger, DeliveryStatus, event_sink
from jobs_platform.alerts.notices import Notice
from jobs_platform.alerts.sinks import AlertSink

if TYPE_CHECKING:
    # A type only: the warehouse holds this feature's `AlertLedger` (`alerts.deliveries`),
    # so importing it here at run time would be circular.
    from jobs_platform.engine.warehouse import Warehouse

logger = logging.getLogger("jobs_platform.alerts")

# Sends per (entry, sink) across ticks; a webhook also retries a few times within a tick.
DEFAULT_MAX_DELIVERY_TRIES = 5
_MAX_ERROR_CHARS = 2000


def deliver_once(
    store: Warehouse,
    alert: QuarantineAlert | Notice,
    sinks: Sequence[AlertSink],
    *,
    max_tries: int = DEFAULT_MAX_DELIVERY_TRIES,
) -> dict[str, DeliveryStatus]:
    """Send the alert to every sink that has not had it yet; returns each sink's status.

    Once per entry, sink and event (`alert.event`): the redrive's last word on an entry is
    a second event of it, delivered once more. Once per notice and sink.
    """
    names = [sink.name for sink in sinks]
    if len(set(names)) != len(names):
        raise ValueError(f"sink names must be unique, got {names}")
    return {sink.name: _deliver_to(store, alert, sink, max_tries) for sink in sinks}


def is_settled(statuses: dict[str, DeliveryStatus]) -> bool:
    """True when no sink needs another try for this entry."""
    return all(status in SETTLED for status in statuses.values())


def _deliver_to(
    store: Warehouse, alert: QuarantineAlert | Notice, sink: AlertSink, max_tries: int
) -> DeliveryStatus:
    ledger, alert_id, key = _ledger_row(store, alert, sink.name)
    with store.begin() as connection:
        mine, status = ledger.claim_delivery(connection, alert_id, key, max_tries)
    if not mine:
        return status
    try:
        sink.send(alert)
    except Exception as exc:
        return _record_failure(store, ledger, alert, key, exc, max_tries)
    with store.begin() as connection:
        ledger.mark_sent(connection, alert_id, key)
    return DeliveryStatus.SENT


def _ledger_row(
    store: Warehouse, alert: QuarantineAlert | Notice, sink: str
) -> tuple[AlertLedger, int, str]:
    """The ledger that keeps the alert's deliveries, its id there and the sink's key."""
    match alert:
        case Notice():
            return store.notice_ledger, alert.notice_id, sink
        case QuarantineAlert():
            return store.alert_ledger, alert.entry_id, event_sink(sink, alert.event)


def _record_failure(
    store: Warehouse,
    ledger: AlertLedger,
    alert: QuarantineAlert | Notice,
    sink: str,
    error: Exception,
    max_tries: int,
) -> DeliveryStatus:
    message = str(error)[:_MAX_ERROR_CHARS] or type(error).__name__
    alert_id = alert.notice_id if isinstance(alert, Notice) else alert.entry_id
    with store.begin() as connection:
        status, tries = ledger.record_failed_send(connection, alert_id, sink, message, max_tries)
    logger.warning(
        "alert %s to %s failed (try %s of %s): %s",
        _named(alert),
        sink,
        tries,
        max_tries,
        message,
    )
    return status


def _named(alert: QuarantineAlert | Notice) -> str:
    if isinstance(alert, Notice):
        return f"notice {alert.notice_id} ({alert.kind} {alert.asset})"
    return f"for quarantine entry {alert.entry_id}"
