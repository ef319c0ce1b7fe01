"""Notices: an alert about a backfill as a whole, raised once, delivered once per sink."""

from __future__ import annotations

import datetime as dt
import email
import email.policy
from collections.abc import Iterator

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.alerts import (
    DeliveryStatus,
    EmailSink,
    LogSink,
    Notice,
    WebhookSink,
    deliver_once,
    due_notices,
    load_alert,
    notices_of,
    raise_notice,
)
from jobs_platform.dead_letter.asset import dead_letter_sensor
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import alert_notices, notice_ledger
from jobs_platform_tests.alert_fixtures import http_receiver, quarantine_entry, smtp_receiver
from jobs_platform_tests.environments import engine_from
from orders_example.definitions import defs

CIRCUIT_OPENED = {
    "kind": "circuit_opened",
    "asset": "orders",
    "key": "3f2a9c1b7d4e@2026-12-06T21:00:00+00:00",
    "summary": "the circuit for signature 3f2a9c1b7d4e opened: 5 partitions failed alike",
    "details": {"signature": "3f2a9c1b7d4e", "partitions": 5, "probe": None},
}


@pytest.fixture
def engine(upgraded_url) -> sa.Engine:
    return warehouse_engine(upgraded_url)


@pytest.fixture
def receiver():
    with http_receiver() as receiver:
        yield receiver


def raise_circuit_opened(engine: sa.Engine, **overrides) -> bool:
    with engine.begin() as connection:
        return raise_notice(connection, DATABASE_CLOCK, **{**CIRCUIT_OPENED, **overrides})


def the_notice(engine: sa.Engine) -> Notice:
    with engine.connect() as connection:
        [notice] = notices_of(connection, ["orders"])
    return notice


def test_a_notice_is_raised_once_however_often_it_is_raised(engine):
    first = raise_circuit_opened(engine)
    again = raise_circuit_opened(engine, summary="seen by another worker")

    with engine.connect() as connection:
        rows = list(connection.execute(sa.select(alert_notices)))
    assert (first, again) == (True, False)
    assert [(row.kind, row.summary) for row in rows] == [
        ("circuit_opened", CIRCUIT_OPENED["summary"])
    ]


def test_another_key_or_kind_is_another_notice(engine):
    raise_circuit_opened(engine)

    assert raise_circuit_opened(engine, key="3f2a9c1b7d4e@2026-12-06T22:00:00+00:00")
    assert raise_circuit_opened(engine, kind="circuit_closed")
    assert raise_circuit_opened(engine, asset="daily_revenue")


def test_a_notice_raised_in_a_rolled_back_transaction_is_not_raised(engine):
    with engine.connect() as connection, connection.begin() as transaction:
        raise_notice(connection, DATABASE_CLOCK, **CIRCUIT_OPENED)
        transaction.rollback()

    assert raise_circuit_opened(engine)


def test_a_store_is_clock_enough(engine):
    with engine.begin() as connection:
        raised = raise_notice(connection, Warehouse(engine, DATABASE_CLOCK), **CIRCUIT_OPENED)

    assert raised


def test_a_notice_reaches_the_webhook_once_with_its_own_idempotency_key(engine, receiver):
    raise_circuit_opened(engine)
    notice = the_notice(engine)
    store = Warehouse(engine, DATABASE_CLOCK)
    sinks = [LogSink(), WebhookSink(receiver.url, sleep=lambda _: None)]

    first = deliver_once(store, notice, sinks)
    second = deliver_once(store, notice, sinks)

    assert first == second == {"log": DeliveryStatus.SENT, "webhook": DeliveryStatus.SENT}
    assert receiver.keys() == [f"notice:{notice.notice_id}"]
    body = receiver.requests[0].json()
    assert body["event"] == body["kind"] == "circuit_opened"
    assert (body["asset"], body["key"], body["summary"]) == (
        "orders",
        CIRCUIT_OPENED["key"],
        CIRCUIT_OPENED["summary"],
    )
    assert body["details"] == CIRCUIT_OPENED["details"]


def test_a_notice_and_a_quarantine_entry_with_the_same_id_are_delivered_apart(engine, receiver):
    entry_id = quarantine_entry(engine)
    raise_circuit_opened(engine)
    notice = the_notice(engine)
    with engine.connect() as connection:
        alert = load_alert(connection, entry_id)
    store = Warehouse(engine, DATABASE_CLOCK)
    sinks = [WebhookSink(receiver.url, sleep=lambda _: None)]

    deliver_once(store, alert, sinks)
    deliver_once(store, notice, sinks)

    assert notice.notice_id == entry_id == 1
    assert receiver.keys() == ["1", "notice:1"]


def test_a_failed_notice_delivery_is_kept_in_the_notice_ledger_and_due_again(engine, receiver):
    raise_circuit_opened(engine)
    notice = the_notice(engine)
    store = Warehouse(engine, DATABASE_CLOCK)
    receiver.fail_next(503)
    webhook = WebhookSink(receiver.url, max_tries=1, sleep=lambda _: None)

    failed = deliver_once(store, notice, [LogSink(), webhook])
    with engine.connect() as connection:
        rows = {row.sink: row for row in connection.execute(sa.select(notice_ledger))}
        still_due = due_notices(connection, DATABASE_CLOCK, ["orders"], ["log", "webhook"], limit=9)
        due_to_log = due_notices(connection, DATABASE_CLOCK, ["orders"], ["log"], limit=9)

    assert failed == {"log": DeliveryStatus.SENT, "webhook": DeliveryStatus.FAILED}
    assert (rows["webhook"].status, rows["webhook"].tries) == ("failed", 1)
    assert "HTTP 503" in rows["webhook"].last_error
    assert [n.notice_id for n in still_due] == [notice.notice_id]
    assert due_to_log == []


def test_a_notice_is_mailed_with_its_own_subject_and_message_id(engine):
    raise_circuit_opened(engine)
    notice = the_notice(engine)

    with smtp_receiver() as smtp:
        EmailSink(smtp.host, smtp.port, "jp@example.com", ["ops@example.com"]).send(notice)

    [message] = [
        email.message_from_string(sent["data"], policy=email.policy.default)
        for sent in smtp.messages
    ]
    assert message["Subject"] == "[jobs_platform] circuit_opened orders"
    assert message["Message-ID"] == f"<jobs-platform-notice-{notice.notice_id}@jobs-platform>"
    assert CIRCUIT_OPENED["summary"] in message.get_content()


def test_only_recent_notices_of_the_given_assets_are_due(engine):
    raise_circuit_opened(engine)
    raise_circuit_opened(engine, asset="elsewhere")
    with engine.begin() as connection:
        connection.execute(
            sa.update(alert_notices)
            .where(alert_notices.c.asset == "elsewhere")
            .values(raised_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
        )
        due = due_notices(connection, DATABASE_CLOCK, ["orders", "elsewhere"], ["log"], limit=9)

    assert [notice.asset for notice in due] == ["orders"]


@pytest.fixture
def daemon_instance(platform_env) -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.get() as instance:
        yield instance


def test_the_dead_letter_sensor_delivers_a_notice_once_across_ticks(
    platform_env, daemon_instance, monkeypatch
):
    engine = engine_from(platform_env)
    raise_circuit_opened(engine)

    with http_receiver() as receiver:
        monkeypatch.setenv("JOBS_PLATFORM_ALERT_WEBHOOK_URL", receiver.url)
        for _ in range(2):
            with dg.build_sensor_context(
                instance=daemon_instance,
                instance_ref=daemon_instance.get_ref(),
                definitions=defs,
                resources=dict(defs.resources),
            ) as context:
                dead_letter_sensor.evaluate_tick(context)

    assert receiver.keys() == [f"notice:{the_notice(engine).notice_id}"]
