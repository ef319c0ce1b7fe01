"""The alert ledger: each quarantine entry is alerted once per sink, whatever ticks repeat.

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
from jobs_platform.alerts.deliveries import SETTLED, DeliveryStatus, event_sink
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
    alert: QuarantineAlert,
    sinks: Sequence[AlertSink],
    *,
    max_tries: int = DEFAULT_MAX_DELIVERY_TRIES,
) -> dict[str, DeliveryStatus]:
    """Send the alert to every sink that has not had it yet; returns each sink's status.

    Once per entry, sink and event (`alert.event`): the redrive's last word on an entry is
    a second event of it, delivered once more.
    """
    names = [sink.name for sink in sinks]
    if len(set(names)) != len(names):
        raise ValueError(f"sink names must be unique, got {names}")
    return {sink.name: _deliver_to(store, alert, sink, max_tries) for sink in sinks}


def is_settled(statuses: dict[str, DeliveryStatus]) -> bool:
    """True when no sink needs another try for this entry."""
    return all(status in SETTLED for status in statuses.values())


def _deliver_to(
    store: Warehouse, alert: QuarantineAlert, sink: AlertSink, max_tries: int
) -> DeliveryStatus:
    key = event_sink(sink.name, alert.event)
    with store.begin() as connection:
        mine, status = store.alert_ledger.claim_delivery(connection, alert.entry_id, key, max_tries)
    if not mine:
        return status
    try:
        sink.send(alert)
    except Exception as exc:
        return _record_failure(store, alert.entry_id, key, exc, max_tries)
    with store.begin() as connection:
        store.alert_ledger.mark_sent(connection, alert.entry_id, key)
    return DeliveryStatus.SENT


def _record_failure(
    store: Warehouse, entry_id: int, sink: str, error: Exception, max_tries: int
) -> DeliveryStatus:
    message = str(error)[:_MAX_ERROR_CHARS] or type(error).__name__
    with store.begin() as connection:
        status, tries = store.alert_ledger.record_failed_send(
            connection, entry_id, sink, message, max_tries
        )
    logger.warning(
        "alert for quarantine entry %s to %s failed (try %s of %s): %s",
        entry_id,
        sink,
        tries,
        max_tries,
        message,
    )
    return status
