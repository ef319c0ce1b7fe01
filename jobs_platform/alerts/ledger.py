"""The alert ledger: each alert is delivered once per sink, whatever ticks repeat.

An alert is a quarantine entry's event (kept in `jp_alert_ledger`) or a notice (kept in
`jp_notice_ledger`); both ledgers follow the same rules.

A delivery is claimed (`sending`) in its own transaction before the sink is called and
marked `sent` after, so a repeated or overlapping tick skips what was sent. A tick that
dies between the send and the mark leaves `sending`; the next tick sends again with the
same Idempotency-Key, so the receiver can drop the copy: at-least-once to the sink, once
per entry as the ledger sees it. The network call is never made inside a transaction
(on SQLite that would hold the warehouse's write lock for the whole send).

One sink never delays another. `deliver_all` gives each sink its own worker thread, which
walks the alerts in order. A failed send is not retried within the call: the ledger keeps
its `next_try_at` (`deliveries.retry_delay`), and a later tick tries it then. A sink that
fails `FAILURES_BEFORE_REST` sends in a row looks down: it rests until the next call, and
the alerts it did not try keep their tries. Each worker starts sends only within its
budget, and a send started in time ends by its sink's own timeout, so a call is bounded
whatever the sinks do.
"""

from __future__ import annotations

import logging
import threading
import time
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

# Sends per (alert, sink) across ticks, `deliveries.retry_delay` apart; a webhook also
# retries a few times within one send.
DEFAULT_MAX_DELIVERY_TRIES = 5
SINK_BUDGET_SECONDS = 20.0
"""How long each sink's worker starts new sends in one call (a sensor tick)."""
FAILURES_BEFORE_REST = 2
"""Sends failed in a row after which a sink rests until the next call."""
# A worker whose send outlives its sink's timeout (a user's sink without one) is left
# behind after this long past the budget. Its delivery stays `sending` and is resent later
# with the same key. 20 + 30 s keeps a tick within Dagster's 60 s sensor timeout.
_ABANDON_AFTER_SECONDS = 30.0
_MAX_ERROR_CHARS = 2000

AnyAlert = QuarantineAlert | Notice


def deliver_once(
    store: Warehouse,
    alert: AnyAlert,
    sinks: Sequence[AlertSink],
    *,
    max_tries: int = DEFAULT_MAX_DELIVERY_TRIES,
) -> dict[str, DeliveryStatus]:
    """Send the alert to every sink that has not had it yet; returns each sink's status.

    Once per entry, sink and event (`alert.event`): the redrive's last word on an entry is
    a second event of it, delivered once more. Once per notice and sink.
    """
    [statuses] = deliver_all(store, [alert], sinks, max_tries=max_tries)
    return statuses


def deliver_all(
    store: Warehouse,
    alerts: Sequence[AnyAlert],
    sinks: Sequence[AlertSink],
    *,
    max_tries: int = DEFAULT_MAX_DELIVERY_TRIES,
    budget_seconds: float = SINK_BUDGET_SECONDS,
) -> list[dict[str, DeliveryStatus]]:
    """Send each alert to every sink that has not had it yet, one worker per sink; returns
    each alert's statuses by sink, in the order of `alerts`.

    A sink's worker tries its deliveries one after another and never waits for another
    sink: a dead Slack costs the webhook nothing. What a worker does not reach (out of
    budget, or resting) is `pending`; a later call tries it.
    """
    names = [sink.name for sink in sinks]
    if len(set(names)) != len(names):
        raise ValueError(f"sink names must be unique, got {names}")
    statuses = [dict.fromkeys(names, DeliveryStatus.PENDING) for _ in alerts]
    deadline = time.monotonic() + budget_seconds
    if len(sinks) == 1:
        _SinkWorker(store, sinks[0], max_tries, deadline).deliver(alerts, statuses)
        return statuses
    workers = [_SinkWorker(store, sink, max_tries, deadline) for sink in sinks]
    threads = [
        threading.Thread(
            target=worker.run,
            args=(alerts, statuses),
            name=f"jobs-platform-alerts-{worker.sink.name}",
            daemon=True,  # one stuck past its sink's timeout must not keep a process alive
        )
        for worker in workers
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline + _ABANDON_AFTER_SECONDS - time.monotonic()))
    for worker, thread in zip(workers, threads, strict=True):
        if thread.is_alive():
            logger.warning(
                "alerts to %s: a send outlived the budget; left running, resent later",
                worker.sink.name,
            )
        elif worker.error is not None:
            raise worker.error
    # A copy: a worker left running must not change what the caller was given.
    return [dict(alert_statuses) for alert_statuses in statuses]


def is_settled(statuses: dict[str, DeliveryStatus]) -> bool:
    """True when no sink needs another try for this alert."""
    return all(status in SETTLED for status in statuses.values())


class _SinkWorker:
    """One sink's deliveries in one call: in order, within the budget, resting after
    `FAILURES_BEFORE_REST` failed sends in a row."""

    def __init__(self, store: Warehouse, sink: AlertSink, max_tries: int, deadline: float):
        self.store = store
        self.sink = sink
        self.max_tries = max_tries
        self.deadline = deadline
        self.error: BaseException | None = None

    def run(self, alerts: Sequence[AnyAlert], statuses: list[dict[str, DeliveryStatus]]) -> None:
        """`deliver` in a thread: an error is kept for the caller to raise."""
        try:
            self.deliver(alerts, statuses)
        except BaseException as error:  # a database error, or a sink's SystemExit
            self.error = error

    def deliver(
        self, alerts: Sequence[AnyAlert], statuses: list[dict[str, DeliveryStatus]]
    ) -> None:
        failed_in_a_row = 0
        for index, alert in enumerate(alerts):
            if failed_in_a_row >= FAILURES_BEFORE_REST:
                logger.warning(
                    "alerts to %s: %s sends failed in a row; it rests until the next tick "
                    "(%s alert(s) wait, their tries unspent)",
                    self.sink.name,
                    failed_in_a_row,
                    len(alerts) - index,
                )
                return
            if time.monotonic() > self.deadline:
                return  # the rest stay pending: the next tick tries them
            status, sent = _deliver_to(self.store, alert, self.sink, self.max_tries)
            statuses[index][self.sink.name] = status
            if sent:
                failed_in_a_row = 0 if status is DeliveryStatus.SENT else failed_in_a_row + 1


def _deliver_to(
    store: Warehouse, alert: AnyAlert, sink: AlertSink, max_tries: int
) -> tuple[DeliveryStatus, bool]:
    """The delivery's status, and whether the sink was called."""
    ledger, alert_id, key = _ledger_row(store, alert, sink.name)
    with store.begin() as connection:
        mine, status = ledger.claim_delivery(connection, alert_id, key, max_tries)
    if not mine:
        return status, False
    try:
        sink.send(alert)
    except Exception as exc:
        return _record_failure(store, ledger, alert, key, exc, max_tries), True
    with store.begin() as connection:
        ledger.mark_sent(connection, alert_id, key)
    return DeliveryStatus.SENT, True


def _ledger_row(store: Warehouse, alert: AnyAlert, sink: str) -> tuple[AlertLedger, int, str]:
    """The ledger that keeps the alert's deliveries, its id there and the sink's key."""
    match alert:
        case Notice():
            return store.notice_ledger, alert.notice_id, sink
        case QuarantineAlert():
            return store.alert_ledger, alert.entry_id, event_sink(sink, alert.event)


def _record_failure(
    store: Warehouse,
    ledger: AlertLedger,
    alert: AnyAlert,
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


def _named(alert: AnyAlert) -> str:
    if isinstance(alert, Notice):
        return f"notice {alert.notice_id} ({alert.kind} {alert.asset})"
    return f"for quarantine entry {alert.entry_id}"
