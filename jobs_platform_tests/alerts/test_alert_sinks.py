"""Each sink delivers to a real local receiver, retries what is worth retrying, leaks no secret."""

from __future__ import annotations

import datetime as dt
import logging

import pytest

from jobs_platform.alerts import (
    AlertDeliveryError,
    AttemptRecord,
    EmailSink,
    LogSink,
    QuarantineAlert,
    SlackSink,
    WebhookSink,
    redact_http_url,
)
from jobs_platform.alerts.resource import AlertsResource
from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform_tests.alert_fixtures import http_receiver, smtp_receiver

AT = dt.datetime(2024, 1, 6, 3, 0, tzinfo=dt.UTC)
ALERT = QuarantineAlert(
    entry_id=17,
    asset="orders",
    partition="2024-01-05",
    episode=1,
    status="quarantined",
    attempts=1,
    error_class="terminal",
    last_error="line 2: not valid JSON",
    first_failed_at=AT,
    last_failed_at=AT,
    history=(AttemptRecord(1, 1, "run-1", "terminal", "InputValidationError", "bad", AT),),
)


@pytest.fixture
def receiver():
    with http_receiver() as receiver:
        yield receiver


def no_sleep(_seconds: float) -> None:
    pass


def test_webhook_posts_the_alert_as_json_with_the_entry_as_idempotency_key(receiver):
    WebhookSink(receiver.url, sleep=no_sleep).send(ALERT)

    [request] = receiver.requests
    assert request.headers["idempotency-key"] == "17"
    assert request.headers["content-type"] == "application/json"
    assert request.json()["partition"] == "2024-01-05"
    assert request.json()["history"][0]["at"] == AT.isoformat()


def test_webhook_retries_a_503_within_one_send(receiver):
    receiver.fail_next(503)

    WebhookSink(receiver.url, max_tries=3, sleep=no_sleep).send(ALERT)

    assert receiver.keys() == ["17", "17"]


def test_webhook_backs_off_briefly_between_tries(receiver):
    waits = []
    receiver.fail_next(503, times=2)

    WebhookSink(receiver.url, max_tries=3, sleep=waits.append).send(ALERT)

    assert len(waits) == 2
    assert 0.25 <= waits[0] <= 0.5 <= waits[1] <= 1.0


def test_webhook_honours_retry_after_up_to_a_short_cap(receiver):
    waits = []
    receiver.fail_next(503, times=2)
    receiver.retry_after = "2"
    WebhookSink(receiver.url, max_tries=3, sleep=waits.append).send(ALERT)
    receiver.fail_next(429)
    receiver.retry_after = "3600"
    WebhookSink(receiver.url, max_tries=3, sleep=waits.append).send(ALERT)

    assert waits == [2.0, 2.0, 5.0]


def test_webhook_does_not_retry_a_client_error(receiver):
    receiver.fail_next(400, times=3)

    with pytest.raises(AlertDeliveryError, match="HTTP 400"):
        WebhookSink(receiver.url, max_tries=3, sleep=no_sleep).send(ALERT)

    assert len(receiver.requests) == 1


def test_webhook_gives_up_after_max_tries(receiver):
    receiver.fail_next(503, times=5)

    with pytest.raises(AlertDeliveryError, match="try 3 of 3"):
        WebhookSink(receiver.url, max_tries=3, sleep=no_sleep).send(ALERT)

    assert len(receiver.requests) == 3


def test_webhook_never_logs_or_raises_the_secrets_of_its_url(receiver, caplog):
    secret_url = receiver.url.replace("http://", "http://user:pa55word@") + "/T0K3N?sig=s3cret"
    receiver.fail_next(503, times=2)
    caplog.set_level(logging.DEBUG)

    with pytest.raises(AlertDeliveryError) as raised:
        WebhookSink(secret_url, max_tries=2, sleep=no_sleep).send(ALERT)

    shown = f"{raised.value} {raised.value.__cause__} {caplog.text} {WebhookSink(secret_url)!r}"
    assert receiver.requests  # the request really went out
    for secret in ("pa55word", "T0K3N", "s3cret", "user:"):
        assert secret not in shown


def test_webhook_to_a_closed_port_fails_with_a_retryable_error():
    with http_receiver() as gone:
        url = gone.url

    with pytest.raises(AlertDeliveryError, match="ConnectError"):
        WebhookSink(url, timeout=1, max_tries=2, sleep=no_sleep).send(ALERT)


def test_redacted_url_keeps_only_scheme_host_and_port():
    assert redact_http_url("https://u:p@hooks.example.com:8443/services/T/B/X?k=v") == (
        "https://hooks.example.com:8443/…"
    )
    assert redact_http_url("http://127.0.0.1:9000") == "http://127.0.0.1:9000"


def test_slack_posts_the_summary_through_the_slack_client(receiver):
    sink = SlackSink("xoxb-test-token", "data-alerts", base_url=receiver.url + "/api/")

    sink.send(ALERT)

    [request] = receiver.requests
    assert request.path.endswith("/api/chat.postMessage")
    assert request.headers["authorization"] == "Bearer xoxb-test-token"
    assert b"data-alerts" in request.body
    assert b"dead-letter+requeue" in request.body or b"dead-letter requeue" in request.body


def test_slack_error_becomes_a_delivery_error(receiver):
    receiver.response_body = b'{"ok": false, "error": "channel_not_found"}'

    with pytest.raises(AlertDeliveryError, match="channel_not_found"):
        SlackSink("xoxb-test-token", "nowhere", base_url=receiver.url + "/api/").send(ALERT)


@pytest.mark.parametrize("channel", ["#shop-data", "C0123ABCD"])
def test_slack_names_the_channel_as_configured(receiver, channel):
    receiver.response_body = b'{"ok": false, "error": "channel_not_found"}'
    sink = SlackSink("xoxb-test-token", channel, base_url=receiver.url + "/api/")

    with pytest.raises(AlertDeliveryError) as failed:
        sink.send(ALERT)

    assert str(failed.value).startswith(f"slack {channel}: ")
    assert repr(sink) == f"SlackSink(channel={channel!r})"


def test_email_is_sent_with_a_stable_message_id():
    with smtp_receiver() as smtp:
        sink = EmailSink(smtp.host, smtp.port, "jobs@example.com", ["oncall@example.com"])
        sink.send(ALERT)

    [message] = smtp.messages
    assert message["to"] == ["<oncall@example.com>"]
    assert "Subject: [jobs_platform] quarantined orders/2024-01-05" in message["data"]
    assert "Message-ID: <jobs-platform-quarantine-17@jobs-platform>" in message["data"]
    assert "jobs-platform dead-letter requeue orders 2024-01-05" in message["data"]


def test_email_to_an_unreachable_server_fails_with_a_delivery_error():
    with smtp_receiver() as smtp:
        port = smtp.port

    with pytest.raises(AlertDeliveryError, match=r"email via 127\.0\.0\.1"):
        EmailSink("127.0.0.1", port, "jobs@example.com", ["a@example.com"], timeout=2).send(ALERT)


def test_log_sink_logs_the_summary(caplog):
    caplog.set_level(logging.WARNING, logger="jobs_platform.alerts")

    LogSink().send(ALERT)

    assert "orders/2024-01-05 is quarantined (entry 17)" in caplog.text


def test_alerts_resource_logs_only_by_default(monkeypatch):
    monkeypatch.delenv("JOBS_PLATFORM_ALERT_WEBHOOK_URL", raising=False)

    assert [sink.name for sink in AlertsResource().sinks()] == ["log"]


def test_alerts_resource_reads_the_webhook_variable_when_sinks_are_built(monkeypatch):
    resource = AlertsResource()
    monkeypatch.setenv("JOBS_PLATFORM_ALERT_WEBHOOK_URL", "http://127.0.0.1:9/hook")

    sinks = resource.sinks()

    assert [sink.name for sink in sinks] == ["log", "webhook"]
    assert sinks[1].url == "http://127.0.0.1:9/hook"


def test_alerts_resource_builds_every_configured_sink(monkeypatch):
    monkeypatch.delenv("JOBS_PLATFORM_ALERT_WEBHOOK_URL", raising=False)
    resource = AlertsResource(
        webhook_url="http://127.0.0.1:9/hook",
        slack_token="xoxb-test",
        slack_channel="alerts",
        smtp_host="127.0.0.1",
        smtp_sender="jobs@example.com",
        smtp_recipients=["oncall@example.com"],
    )

    assert [sink.name for sink in resource.sinks()] == ["log", "webhook", "slack", "email"]


def test_alerts_resource_refuses_half_a_slack_configuration():
    with pytest.raises(ValueError, match="slack_token and slack_channel"):
        AlertsResource(slack_token="xoxb-test").sinks()


def test_alerts_resource_takes_the_webhook_from_the_platform_settings(monkeypatch):
    monkeypatch.delenv("JOBS_PLATFORM_ALERT_WEBHOOK_URL", raising=False)
    settings = JobsPlatformResource(alert_webhook_url="http://127.0.0.1:9/from-resource")

    [_, webhook] = AlertsResource().sinks(settings.settings())

    assert webhook.url == "http://127.0.0.1:9/from-resource"
