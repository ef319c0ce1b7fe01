"""The `alerts` resource: which sinks quarantine alerts go to, configured in the code location."""

import dagster as dg

from jobs_platform.alerts.sinks import (
    DEFAULT_SLACK_TIMEOUT_SECONDS,
    DEFAULT_WEBHOOK_TIMEOUT_SECONDS,
    AlertSink,
    EmailSink,
    LogSink,
    SlackSink,
    WebhookSink,
)
from jobs_platform.settings import Settings

ALERTS_RESOURCE_KEY = "alerts"


class AlertsResource(dg.ConfigurableResource):
    """Alert sinks; the log always, the others when configured.

    Pass secrets (`slack_token`, `smtp_password`, a webhook URL with a token) as
    `dg.EnvVar(...)` so they never land in the run config shown in the UI.
    """

    webhook_url: str | None = None
    webhook_timeout_seconds: float = DEFAULT_WEBHOOK_TIMEOUT_SECONDS
    slack_token: str | None = None
    slack_channel: str | None = None
    slack_timeout_seconds: int = DEFAULT_SLACK_TIMEOUT_SECONDS
    slack_base_url: str | None = None
    """Slack's Web API unless set: a proxy in front of it, or a stand-in in tests."""
    smtp_host: str | None = None
    smtp_port: int = 25
    smtp_sender: str | None = None
    smtp_recipients: list[str] = []
    smtp_username: str | None = None
    smtp_password: str | None = None
    smtp_starttls: bool = False

    def sinks(self, settings: Settings | None = None) -> list[AlertSink]:
        """The sinks to alert; the webhook defaults to the settings' `alert_webhook_url`."""
        sinks: list[AlertSink] = [LogSink()]
        # Read at call time, never at import: JOBS_PLATFORM_ALERT_WEBHOOK_URL is the default.
        webhook_url = self.webhook_url or (settings or Settings.from_env()).alert_webhook_url
        if webhook_url:
            sinks.append(WebhookSink(webhook_url, timeout=self.webhook_timeout_seconds))
        if bool(self.slack_token) != bool(self.slack_channel):
            raise ValueError("alerts: slack_token and slack_channel must be set together")
        if self.slack_token and self.slack_channel:
            sinks.append(
                SlackSink(
                    self.slack_token,
                    self.slack_channel,
                    timeout=self.slack_timeout_seconds,
                    base_url=self.slack_base_url,
                )
            )
        if self.smtp_host:
            if not self.smtp_sender or not self.smtp_recipients:
                raise ValueError("alerts: smtp_host needs smtp_sender and smtp_recipients")
            sinks.append(
                EmailSink(
                    self.smtp_host,
                    self.smtp_port,
                    self.smtp_sender,
                    self.smtp_recipients,
                    username=self.smtp_username,
                    password=self.smtp_password,
                    starttls=self.smtp_starttls,
                )
            )
        return sinks
