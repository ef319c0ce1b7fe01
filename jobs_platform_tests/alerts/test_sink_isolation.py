"""One sink never delays another: a dead Slack costs the webhook nothing.

The story (issue 42, part 6): with Slack failing, the webhook alerts of a burst of 30
quarantines took minutes to arrive, a few per `dead_letter_sensor` tick, because every
entry waited for Slack's timeout before the next entry was tried on any sink.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.alerts import (
    AlertDeliveryError,
    DeliveryStatus,
    LogSink,
    QuarantineAlert,
    WebhookSink,
    load_alerts,
)
from jobs_platform.alerts.deliveries import (
    RETRY_BASE_SECONDS,
    RETRY_CEILING_SECONDS,
    Undelivered,
    retry_delay,
)
from jobs_platform.alerts.ledger import FAILURES_BEFORE_REST, deliver_all
from jobs_platform.alerts.resource import AlertsResource
from jobs_platform.dead_letter.asset import dead_letter_sensor
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import alert_ledger
from jobs_platform_tests.alert_fixtures import bulk_quarantine_entries, http_receiver, silent_server
from jobs_platform_tests.alerts.test_ledger import AlwaysFails
from jobs_platform_tests.clocks import ManualClock
from jobs_platform_tests.environments import engine_from
from orders_example.definitions import defs

BURST = 30
# Slack's client waits this long for an answer that never comes (10 s in production).
SLACK_TIMEOUT_SECONDS = 2


@pytest.fixture
def daemon_instance(pg_platform_env) -> Iterator[dg.DagsterInstance]:
    with dg.DagsterInstance.get() as instance:
        yield instance


def alerts_to(webhook_url: str, slack_url: str) -> AlertsResource:
    return AlertsResource(
        webhook_url=webhook_url,
        slack_token="xoxb-test-token",
        slack_channel="data-alerts",
        slack_base_url=f"{slack_url}/api/",
        slack_timeout_seconds=SLACK_TIMEOUT_SECONDS,
    )


def tick(
    instance: dg.DagsterInstance, alerts: AlertsResource, cursor: str | None = None
) -> dg.SensorResult:
    with dg.build_sensor_context(
        instance=instance,
        instance_ref=instance.get_ref(),
        cursor=cursor,
        definitions=defs,
        resources={**defs.resources, "alerts": alerts},
    ) as context:
        return dead_letter_sensor.evaluate_tick(context)


def statuses_of(engine: sa.Engine, sink: str) -> list[str]:
    with engine.connect() as connection:
        return list(
            connection.execute(
                sa.select(alert_ledger.c.status).where(alert_ledger.c.sink == sink)
            ).scalars()
        )


def test_a_dead_slack_does_not_delay_the_webhook_alerts_of_a_burst(
    pg_platform_env, daemon_instance
):
    engine = engine_from(pg_platform_env)
    last = bulk_quarantine_entries(engine, BURST)

    with http_receiver() as webhook, silent_server() as slack:
        alerts = alerts_to(webhook.url, slack.url)
        first = tick(daemon_instance, alerts)
        after_one_tick = sorted(map(int, webhook.keys()))
        tick(daemon_instance, alerts, cursor=first.cursor)

    assert after_one_tick == list(range(last - BURST + 1, last + 1))
    assert sorted(map(int, webhook.keys())) == after_one_tick  # none sent twice
    assert slack.connections > 0
    assert "sent" not in statuses_of(engine, "slack")


class WaitsForTheWebhook:
    """A Slack that is down, and whose first send waits until the webhook has every alert
    (or 10 s): it can only see them if the webhook's deliveries do not wait for its own."""

    name = "slack"

    def __init__(self, webhook, expected: int):
        self.webhook = webhook
        self.expected = expected
        self.webhook_had: list[int] = []

    def send(self, alert) -> None:
        if not self.webhook_had:
            deadline = time.monotonic() + 10
            while len(self.webhook.requests) < self.expected and time.monotonic() < deadline:
                time.sleep(0.01)
        self.webhook_had.append(len(self.webhook.requests))
        raise AlertDeliveryError("slack is down")


@pytest.fixture
def engine(upgraded_url) -> sa.Engine:
    return warehouse_engine(upgraded_url)


def alerts_of(engine: sa.Engine, count: int) -> list[QuarantineAlert]:
    last = bulk_quarantine_entries(engine, count)
    with engine.connect() as connection:
        return load_alerts(connection, list(range(last - count + 1, last + 1)))


def test_each_sink_delivers_on_its_own_while_another_hangs(engine):
    alerts = alerts_of(engine, 10)
    with http_receiver() as receiver:
        slack = WaitsForTheWebhook(receiver, expected=10)
        webhook = WebhookSink(receiver.url, sleep=lambda _: None)

        statuses = deliver_all(Warehouse(engine, DATABASE_CLOCK), alerts, [webhook, slack])

    assert slack.webhook_had[0] == 10
    assert [by_sink["webhook"] for by_sink in statuses] == [DeliveryStatus.SENT] * 10


def test_a_sink_that_fails_in_a_row_rests_and_its_untried_alerts_keep_their_tries(engine):
    alerts = alerts_of(engine, 5)
    failing = AlwaysFails()

    statuses = deliver_all(Warehouse(engine, DATABASE_CLOCK), alerts, [LogSink(), failing])

    assert [by_sink["flaky"] for by_sink in statuses] == (
        [DeliveryStatus.FAILED] * FAILURES_BEFORE_REST
        + [DeliveryStatus.PENDING] * (5 - FAILURES_BEFORE_REST)
    )
    assert failing.calls == FAILURES_BEFORE_REST
    assert [by_sink["log"] for by_sink in statuses] == [DeliveryStatus.SENT] * 5
    assert statuses_of(engine, "flaky") == ["failed"] * FAILURES_BEFORE_REST


def test_a_sink_out_of_budget_starts_no_send(engine):
    alerts = alerts_of(engine, 3)
    failing = AlwaysFails()

    statuses = deliver_all(
        Warehouse(engine, DATABASE_CLOCK), alerts, [LogSink(), failing], budget_seconds=-1
    )

    assert statuses == [{"log": DeliveryStatus.PENDING, "flaky": DeliveryStatus.PENDING}] * 3
    assert failing.calls == 0


def test_the_ledger_tells_the_alerts_due_from_those_waiting_for_their_next_try(engine):
    sent, failed_due, failed_waiting, untried = (alert.entry_id for alert in alerts_of(engine, 4))
    clock = ManualClock()
    ledger = Warehouse(engine, clock).alert_ledger
    with engine.begin() as connection:
        for entry in (sent, failed_due, failed_waiting):
            ledger.claim_delivery(connection, entry, "webhook", max_tries=5)
        ledger.mark_sent(connection, sent, "webhook")
        ledger.record_failed_send(connection, failed_due, "webhook", "HTTP 503", max_tries=5)
        clock.advance(RETRY_CEILING_SECONDS)
        ledger.record_failed_send(connection, failed_waiting, "webhook", "HTTP 503", max_tries=5)

        owed = ledger.undelivered(
            connection, [sent, failed_due, failed_waiting, untried], ["webhook"]
        )

    assert owed == Undelivered(due=[failed_due, untried], waiting=[failed_waiting])


@pytest.mark.parametrize("tries", [1, 2, 3, 4, 5, 10])
def test_a_failed_delivery_waits_between_half_and_all_of_a_doubling_ceiling(tries):
    ceiling = min(RETRY_BASE_SECONDS * 2 ** (tries - 1), RETRY_CEILING_SECONDS)

    shortest = retry_delay(tries, uniform=lambda low, high: low)
    longest = retry_delay(tries, uniform=lambda low, high: high)

    assert (shortest.total_seconds(), longest.total_seconds()) == (ceiling / 2, ceiling)
