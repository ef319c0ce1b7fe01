"""Where alerts go: each sink is a tiny class with a `name` and `send(alert)`.

An alert is a quarantine entry's (`alerts.alert.QuarantineAlert`) or a notice about a
backfill as a whole (`alerts.notices.Notice`); a sink reads only what `Alert` names. A
sink raises `AlertDeliveryError` when it could not deliver; the ledger records that and
tries again on a later tick. Error messages never carry a secret from a URL or a token.
"""

from __future__ import annotations

import logging
import random
import smtplib
import ssl
import time
import urllib.parse
from collections.abc import Callable, Sequence
from email.message import EmailMessage
from typing import TYPE_CHECKING, Any, Protocol

from jobs_platform.errors import Classification, JobsPlatformError, classify

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger("jobs_platform.alerts")

DEFAULT_WEBHOOK_TIMEOUT_SECONDS = 5.0
DEFAULT_WEBHOOK_MAX_TRIES = 3
# Short on purpose: sinks run inside a sensor tick, which Dagster times out after a minute.
WEBHOOK_BACKOFF_SECONDS = 0.5
MAX_WEBHOOK_WAIT_SECONDS = 5.0
DEFAULT_SMTP_TIMEOUT_SECONDS = 10.0
DEFAULT_SLACK_TIMEOUT_SECONDS = 10  # slack_sdk waits 30 s by default: too long for a tick


class AlertDeliveryError(JobsPlatformError):
    """A sink could not deliver an alert; the message is safe to log."""


class Alert(Protocol):
    """What a sink needs of an alert, whichever kind it is."""

    @property
    def idempotency_key(self) -> str:
        """The same for every delivery of one alert: `17`, `17:redrives_exhausted`, `notice:3`."""
        ...

    @property
    def subject(self) -> str:
        """One line naming the alert, for a mail's subject: `quarantined orders/2024-01-05`."""
        ...

    @property
    def message_id(self) -> str:
        """A stable, mail-safe token per alert, for a mail's Message-ID: `quarantine-17`."""
        ...

    def summary(self) -> str:
        """A few lines of plain text for chat and mail."""
        ...

    def as_dict(self) -> dict[str, Any]:
        """The alert as JSON-ready values."""
        ...

    def to_json(self) -> str: ...


class AlertSink(Protocol):
    """Something that delivers an alert, or raises `AlertDeliveryError`."""

    name: str

    def send(self, alert: Alert) -> None: ...


class LogSink:
    """Writes the alert to the `jobs_platform.alerts` logger; always on."""

    name = "log"

    def send(self, alert: Alert) -> None:
        logger.warning("%s", alert.summary())


class WebhookSink:
    """POSTs the alert as JSON, with its `Idempotency-Key` so repeats can be dropped."""

    name = "webhook"

    def __init__(
        self,
        url: str,
        timeout: float = DEFAULT_WEBHOOK_TIMEOUT_SECONDS,
        max_tries: int = DEFAULT_WEBHOOK_MAX_TRIES,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if max_tries < 1:
            raise ValueError("max_tries must be at least 1")
        self.url = url
        self.timeout = timeout
        self.max_tries = max_tries
        self._sleep = sleep
        _redact_httpx_request_logs()

    def __repr__(self) -> str:
        return f"WebhookSink({redact_http_url(self.url)!r})"

    def send(self, alert: Alert) -> None:
        import httpx  # here, not at import: every CLI command loads this module

        headers = {"Content-Type": "application/json", "Idempotency-Key": alert.idempotency_key}
        body = alert.to_json()
        with httpx.Client(timeout=self.timeout) as client:
            for try_number in range(1, self.max_tries + 1):
                try:
                    client.post(self.url, content=body, headers=headers).raise_for_status()
                    return
                except Exception as exc:
                    verdict = classify(exc)
                    if verdict.classification is Classification.TERMINAL or (
                        try_number == self.max_tries
                    ):
                        # `from None`: httpx puts the full URL in its messages and tracebacks.
                        raise AlertDeliveryError(
                            f"webhook {redact_http_url(self.url)}: {self._describe(exc)} "
                            f"({verdict.classification}, try {try_number} of {self.max_tries})"
                        ) from None
                    self._sleep(self._wait(try_number, verdict.retry_after))

    def _wait(self, try_number: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, MAX_WEBHOOK_WAIT_SECONDS)
        ceiling = min(WEBHOOK_BACKOFF_SECONDS * 2 ** (try_number - 1), MAX_WEBHOOK_WAIT_SECONDS)
        return random.uniform(ceiling / 2, ceiling)

    def _describe(self, exc: Exception) -> str:
        import httpx

        if isinstance(exc, httpx.HTTPStatusError):
            return f"HTTP {exc.response.status_code} {exc.response.reason_phrase}"
        return f"{type(exc).__name__}: {exc}".replace(self.url, redact_http_url(self.url))


class SlackSink:
    """Posts the alert's summary to a Slack channel (needs the `slack` extra)."""

    name = "slack"

    def __init__(
        self,
        token: str,
        channel: str,
        *,
        timeout: int = DEFAULT_SLACK_TIMEOUT_SECONDS,
        base_url: str | None = None,
    ):
        self.channel = channel
        self._client = _slack_client(token, timeout, base_url)

    def __repr__(self) -> str:
        return f"SlackSink(channel={self.channel!r})"

    def send(self, alert: Alert) -> None:
        try:
            self._client.chat_postMessage(channel=self.channel, text=alert.summary())
        except Exception as exc:
            raise AlertDeliveryError(f"slack {self.channel}: {type(exc).__name__}: {exc}") from exc


class EmailSink:
    """Mails the alert's summary through an SMTP server."""

    name = "email"

    def __init__(
        self,
        host: str,
        port: int,
        sender: str,
        recipients: Sequence[str],
        username: str | None = None,
        password: str | None = None,
        starttls: bool = False,
        *,
        timeout: float = DEFAULT_SMTP_TIMEOUT_SECONDS,
    ):
        if not recipients:
            raise ValueError("EmailSink needs at least one recipient")
        self.host = host
        self.port = port
        self.sender = sender
        self.recipients = list(recipients)
        self.username = username
        self.password = password
        self.starttls = starttls
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"EmailSink({self.host}:{self.port} → {', '.join(self.recipients)})"

    def send(self, alert: Alert) -> None:
        try:
            with smtplib.SMTP(self.host, self.port, timeout=self.timeout) as smtp:
                if self.starttls:
                    smtp.starttls(context=ssl.create_default_context())
                if self.username:
                    smtp.login(self.username, self.password or "")
                smtp.send_message(self.message(alert))
        except (OSError, smtplib.SMTPException) as exc:
            raise AlertDeliveryError(
                f"email via {self.host}:{self.port}: {type(exc).__name__}: {exc}"
            ) from None

    def message(self, alert: Alert) -> EmailMessage:
        message = EmailMessage()
        message["Subject"] = f"[jobs_platform] {alert.subject}"
        message["From"] = self.sender
        message["To"] = ", ".join(self.recipients)
        # A stable Message-ID per alert lets mail systems drop a resent copy.
        message["Message-ID"] = f"<jobs-platform-{alert.message_id}@jobs-platform>"
        message.set_content(alert.summary())
        return message


def redact_http_url(url: str | httpx.URL) -> str:
    """Scheme, host and port only: webhook URLs often carry a token in the path or query."""
    try:
        parts = urllib.parse.urlsplit(str(url))
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unparseable URL>"
    hidden = "/…" if parts.path.strip("/") or parts.query else ""
    return f"{parts.scheme}://{host}{port}{hidden}"


def _slack_client(token: str, timeout: int, base_url: str | None) -> Any:
    # The `slack` extra installs dagster-slack, whose client is slack_sdk's WebClient;
    # importing slack_sdk directly keeps the alerts core free of Dagster.
    try:
        from slack_sdk import WebClient
    except ImportError:
        raise ImportError(
            "SlackSink needs the slack extra: pip install 'jobs_platform[slack]'"
        ) from None
    if base_url:
        return WebClient(token=token, timeout=timeout, base_url=base_url)
    return WebClient(token=token, timeout=timeout)


class _RedactUrls(logging.Filter):
    """Rewrites URLs in httpx's own request logs ("HTTP Request: POST <url> ...")."""

    def filter(self, record: logging.LogRecord) -> bool:
        import httpx  # loaded already: only httpx logs through this logger

        if isinstance(record.args, tuple):
            record.args = tuple(
                redact_http_url(arg) if isinstance(arg, httpx.URL) else arg for arg in record.args
            )
        return True


def _redact_httpx_request_logs() -> None:
    httpx_logger = logging.getLogger("httpx")
    if not any(isinstance(existing, _RedactUrls) for existing in httpx_logger.filters):
        httpx_logger.addFilter(_RedactUrls())
