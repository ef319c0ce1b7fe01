"""Alerts: what they say, where they go, and the ledger that sends each once.

Two kinds: a quarantine entry's (`QuarantineAlert`) and a notice about a backfill as a
whole (`Notice`, raised by `raise_notice`).

Plain Python over SQLAlchemy and httpx; the Dagster side is `jobs_platform.alerts.resource`
(`AlertsResource`), which this package does not import.
"""

from jobs_platform.alerts.alert import AttemptRecord, QuarantineAlert, load_alert, load_alerts
from jobs_platform.alerts.deliveries import DeliveryStatus
from jobs_platform.alerts.ledger import deliver_once, is_settled
from jobs_platform.alerts.notices import Notice, due_notices, notices_of, raise_notice
from jobs_platform.alerts.sinks import (
    Alert,
    AlertDeliveryError,
    AlertSink,
    EmailSink,
    LogSink,
    SlackSink,
    WebhookSink,
    redact_http_url,
)

__all__ = [
    "Alert",
    "AlertDeliveryError",
    "AlertSink",
    "AttemptRecord",
    "DeliveryStatus",
    "EmailSink",
    "LogSink",
    "Notice",
    "QuarantineAlert",
    "SlackSink",
    "WebhookSink",
    "deliver_once",
    "due_notices",
    "is_settled",
    "load_alert",
    "load_alerts",
    "notices_of",
    "raise_notice",
    "redact_http_url",
]
