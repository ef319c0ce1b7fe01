"""Quarantine alerts: what they say, where they go, and the ledger that sends each once.

Plain Python over SQLAlchemy and httpx; the Dagster side is `jobs_platform.alerts.resource`
(`AlertsResource`), which this package does not import.
"""

from jobs_platform.alerts.alert import AttemptRecord, QuarantineAlert, load_alert, load_alerts
from jobs_platform.alerts.deliveries import DeliveryStatus
from jobs_platform.alerts.ledger import deliver_once, is_settled
from jobs_platform.alerts.sinks import (
    AlertDeliveryError,
    AlertSink,
    EmailSink,
    LogSink,
    SlackSink,
    WebhookSink,
    redact_http_url,
)

__all__ = [
    "AlertDeliveryError",
    "AlertSink",
    "AttemptRecord",
    "DeliveryStatus",
    "EmailSink",
    "LogSink",
    "QuarantineAlert",
    "SlackSink",
    "WebhookSink",
    "deliver_once",
    "is_settled",
    "load_alert",
    "load_alerts",
    "redact_http_url",
]
