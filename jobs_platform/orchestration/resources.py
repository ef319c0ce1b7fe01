"""The Dagster resource that carries the framework's settings into a code location."""

from __future__ import annotations

import dataclasses
from typing import Any

import dagster as dg
import sqlalchemy as sa

from jobs_platform.engine.warehouse import Warehouse, ready_store
from jobs_platform.settings import Settings, configured_database_url, require_shared_warehouse
from jobs_platform.store.migrate import ready_warehouse


class JobsPlatformResource(dg.ConfigurableResource):
    """Framework settings; each field left unset falls back to its environment variable.

    The variables are read when a step runs, never at import, so a shell, a test or a
    deployment can set them without code.
    """

    database_url: str | None = None
    max_attempts: int | None = None
    retry_delay_seconds: float | None = None
    lease_seconds: float | None = None
    attempt_timeout_seconds: float | None = None
    alert_webhook_url: str | None = None
    redrive_cooldown_seconds: float | None = None
    max_redrives: int | None = None

    def settings(self) -> Settings:
        overrides: dict[str, Any] = {
            "database_url": self.database_url,
            "max_attempts": self.max_attempts,
            "retry_delay_seconds": self.retry_delay_seconds,
            "lease_seconds": self.lease_seconds,
            "attempt_timeout_seconds": self.attempt_timeout_seconds,
            "alert_webhook_url": self.alert_webhook_url,
            "redrive_cooldown_seconds": self.redrive_cooldown_seconds,
            "max_redrives": self.max_redrives,
        }
        return dataclasses.replace(
            Settings.from_env(), **{k: v for k, v in overrides.items() if v is not None}
        )

    def ready_warehouse(self) -> sa.Engine:
        """The warehouse, ready: its schema at head, or `SchemaNotReady` (no DDL, except
        that the embedded default makes itself ready: `store.migrate.ready_warehouse`)."""
        return ready_warehouse(self.settings().database_url)

    def ready_store(self) -> Warehouse:
        """The ready warehouse as a `Warehouse`, on the database's clock (`engine.warehouse`)."""
        return ready_store(self.settings().database_url)

    def settings_for_step(self, *, remote: bool) -> Settings:
        """Settings for a step; one that may run on another machine is never given a guess.

        Raises `WarehouseNotShared` (terminal) before anything is written when `remote`
        and the warehouse is unset or a relative SQLite path.
        """
        if remote:
            require_shared_warehouse(self.database_url or configured_database_url())
        return self.settings()
