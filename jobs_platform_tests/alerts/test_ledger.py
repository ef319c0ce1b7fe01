"""The alert ledger sends each quarantine entry's alert once per sink, whatever repeats."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import sqlalchemy as sa

from jobs_platform.alerts import (
    AlertDeliveryError,
    DeliveryStatus,
    LogSink,
    QuarantineAlert,
    WebhookSink,
    deliver_once,
    load_alert,
)
from jobs_platform.alerts.deliveries import RETRY_CEILING_SECONDS
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.errors import Classification
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import alert_ledger
from jobs_platform_tests.alert_fixtures import http_receiver, quarantine_entry
from jobs_platform_tests.clocks import ManualClock


@pytest.fixture
def engine(upgraded_url) -> sa.Engine:
    return warehouse_engine(upgraded_url)


@pytest.fixture
def receiver():
    with http_receiver() as receiver:
        yield receiver


def delivery_rows(connection: sa.Connection, entry_id: int) -> list[sa.Row]:
    """The ledger rows of one entry, by sink name."""
    return list(
        connection.execute(
            sa.select(alert_ledger)
            .where(alert_ledger.c.entry_id == entry_id)
            .order_by(alert_ledger.c.sink)
        )
    )


def alert_of(engine: sa.Engine, entry_id: int) -> QuarantineAlert:
    with engine.connect() as connection:
        return load_alert(connection, entry_id)


def webhook(receiver, max_tries: int = 3) -> WebhookSink:
    return WebhookSink(receiver.url, timeout=5, max_tries=max_tries, sleep=lambda _: None)


class DiesAfterSending:
    """A sink whose process dies right after the send, before the ledger marks it sent."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name

    def send(self, alert):
        self.inner.send(alert)
        raise SystemExit("tick killed after sending")


class AlwaysFails:
    name = "flaky"

    def __init__(self):
        self.calls = 0

    def send(self, alert):
        self.calls += 1
        raise AlertDeliveryError("receiver down")


def test_alert_is_sent_once_per_entry_however_often_it_is_delivered(engine, receiver):
    alert = alert_of(engine, quarantine_entry(engine))

    first = deliver_once(Warehouse(engine, DATABASE_CLOCK), alert, [LogSink(), webhook(receiver)])
    second = deliver_once(Warehouse(engine, DATABASE_CLOCK), alert, [LogSink(), webhook(receiver)])

    assert first == {"log": DeliveryStatus.SENT, "webhook": DeliveryStatus.SENT}
    assert second == first
    assert receiver.keys() == [str(alert.entry_id)]
    assert receiver.requests[0].json()["requeue_command"] == (
        "jobs-platform dead-letter requeue orders 2024-01-05"
    )


def test_each_entry_gets_its_own_alert(engine, receiver):
    first = alert_of(engine, quarantine_entry(engine, partition="2024-01-05"))
    second = alert_of(engine, quarantine_entry(engine, partition="2024-01-06"))

    for alert in (first, second, first, second):
        deliver_once(Warehouse(engine, DATABASE_CLOCK), alert, [webhook(receiver)])

    assert receiver.keys() == [str(first.entry_id), str(second.entry_id)]


def test_failed_delivery_is_recorded_and_retried_once_its_next_try_is_due(engine, receiver):
    alert = alert_of(engine, quarantine_entry(engine))
    receiver.fail_next(503, times=3)
    clock = ManualClock()
    store = Warehouse(engine, clock)

    failed = deliver_once(store, alert, [webhook(receiver, max_tries=3)])
    with engine.connect() as connection:
        [row] = delivery_rows(connection, alert.entry_id)
    clock.advance(29)
    too_soon = deliver_once(store, alert, [webhook(receiver, max_tries=3)])
    clock.advance(31)
    retried = deliver_once(store, alert, [webhook(receiver, max_tries=3)])

    assert failed == too_soon == {"webhook": DeliveryStatus.FAILED}
    assert (row.status, row.tries) == ("failed", 1)
    assert "HTTP 503" in row.last_error
    # The first retry waits 30-60 s (`retry_delay`): equal jitter on a 60 s ceiling.
    assert clock.now() - dt.timedelta(seconds=60) <= row.next_try_at
    assert row.next_try_at <= clock.now()
    assert retried == {"webhook": DeliveryStatus.SENT}
    assert receiver.keys() == [str(alert.entry_id)] * 4


def test_delivery_left_sending_by_a_dead_tick_is_resent_with_the_same_key(engine, receiver):
    alert = alert_of(engine, quarantine_entry(engine))
    with pytest.raises(SystemExit):
        deliver_once(
            Warehouse(engine, DATABASE_CLOCK), alert, [DiesAfterSending(webhook(receiver))]
        )
    with engine.connect() as connection:
        [left] = delivery_rows(connection, alert.entry_id)

    resent = deliver_once(Warehouse(engine, DATABASE_CLOCK), alert, [webhook(receiver)])
    again = deliver_once(Warehouse(engine, DATABASE_CLOCK), alert, [webhook(receiver)])

    assert left.status == DeliveryStatus.SENDING
    assert resent == again == {"webhook": DeliveryStatus.SENT}
    assert receiver.keys() == [str(alert.entry_id), str(alert.entry_id)]


def test_delivery_gives_up_after_the_try_bound(engine):
    alert = alert_of(engine, quarantine_entry(engine))
    sink = AlwaysFails()
    clock = ManualClock()

    statuses = []
    for _ in range(5):
        statuses.append(deliver_once(Warehouse(engine, clock), alert, [sink], max_tries=3)["flaky"])
        clock.advance(RETRY_CEILING_SECONDS)

    assert statuses == ["failed", "failed", "gave_up", "gave_up", "gave_up"]
    assert sink.calls == 3
    with engine.connect() as connection:
        [row] = delivery_rows(connection, alert.entry_id)
    assert (row.status, row.tries, row.last_error) == ("gave_up", 3, "receiver down")


def test_one_failing_sink_does_not_resend_the_others(engine, receiver):
    alert = alert_of(engine, quarantine_entry(engine))
    flaky = AlwaysFails()

    clock = ManualClock()
    deliver_once(Warehouse(engine, clock), alert, [webhook(receiver), flaky])
    clock.advance(RETRY_CEILING_SECONDS)
    deliver_once(Warehouse(engine, clock), alert, [webhook(receiver), flaky])

    assert flaky.calls == 2
    assert receiver.keys() == [str(alert.entry_id)]


def test_alert_carries_the_entry_its_history_and_the_requeue_command(engine):
    entry_id = quarantine_entry(
        engine, failures=3, error_class=Classification.TERMINAL, message="line 2: not JSON"
    )

    alert = alert_of(engine, entry_id)
    payload = json.loads(alert.to_json())

    assert (payload["entry_id"], payload["asset"], payload["partition"]) == (
        entry_id,
        "orders",
        "2024-01-05",
    )
    assert (payload["attempts"], payload["error_class"]) == (3, "terminal")
    assert payload["last_error"] == "line 2: not JSON"
    assert [attempt["attempt"] for attempt in payload["history"]] == [1, 2, 3]
    assert {attempt["run_id"] for attempt in payload["history"]} == {"run-0", "run-1", "run-2"}
    assert payload["first_failed_at"] <= payload["last_failed_at"]
    assert "jobs-platform dead-letter requeue orders 2024-01-05" in alert.summary()


def test_an_alert_suggests_a_quoted_requeue_naming_its_code_location(engine):
    entry_id = quarantine_entry(engine, asset="events", partition="2024-03-03|apac")

    with engine.connect() as connection:
        alert = load_alert(connection, entry_id, location="acme.defs")

    suggested = "jobs-platform dead-letter requeue -m acme.defs events '2024-03-03|apac'"
    assert alert.requeue_command == suggested
    assert f"Requeue with: {suggested}" in alert.summary()
    assert json.loads(alert.to_json())["location"] == "acme.defs"
