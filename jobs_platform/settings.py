"""Every setting of the framework, read lazily from the environment in one place."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Defaults and why they are what they are.
DEFAULT_MAX_ATTEMPTS = 5  # enough to ride out a transient outage, few enough to surface poison fast
DEFAULT_RETRY_DELAY_SECONDS = 2.0  # base of the exponential backoff; full jitter spreads herds
DEFAULT_LEASE_SECONDS = 60.0  # heartbeats renew every third, so two missed beats still hold
DEFAULT_ATTEMPT_TIMEOUT_SECONDS = 3600.0  # a partition attempt should never take an hour
DEFAULT_STATE_DIR = ".jobs_platform"


class SettingsError(ValueError):
    """A setting has a value the framework cannot use."""


def embedded_database_url() -> str:
    """The warehouse when `JOBS_PLATFORM_DATABASE_URL` is unset: SQLite in the working directory.

    It is the zero-set-up default of the demo and `dagster dev`, so it upgrades its own
    schema; any other warehouse is upgraded at deploy time (`jobs-platform db upgrade`).
    """
    return f"sqlite:///{Path.cwd() / DEFAULT_STATE_DIR / 'warehouse.db'}"


@dataclass(frozen=True)
class Settings:
    """The framework's settings; `Settings.from_env()` reads them when they are needed."""

    database_url: str
    landing_root: str
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    retry_delay_seconds: float = DEFAULT_RETRY_DELAY_SECONDS
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    attempt_timeout_seconds: float = DEFAULT_ATTEMPT_TIMEOUT_SECONDS
    alert_webhook_url: str | None = None
    failpoints: str | None = None
    log_format: str = "human"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        state_dir = Path.cwd() / DEFAULT_STATE_DIR
        return cls(
            database_url=env.get("JOBS_PLATFORM_DATABASE_URL") or embedded_database_url(),
            landing_root=env.get("JOBS_PLATFORM_LANDING") or str(state_dir / "landing"),
            max_attempts=_positive_int(env, "JOBS_PLATFORM_MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS),
            retry_delay_seconds=_non_negative_float(
                env, "JOBS_PLATFORM_RETRY_DELAY_SECONDS", DEFAULT_RETRY_DELAY_SECONDS
            ),
            lease_seconds=_positive_float(
                env, "JOBS_PLATFORM_LEASE_SECONDS", DEFAULT_LEASE_SECONDS
            ),
            attempt_timeout_seconds=_positive_float(
                env, "JOBS_PLATFORM_ATTEMPT_TIMEOUT_SECONDS", DEFAULT_ATTEMPT_TIMEOUT_SECONDS
            ),
            alert_webhook_url=env.get("JOBS_PLATFORM_ALERT_WEBHOOK_URL") or None,
            failpoints=env.get("JOBS_PLATFORM_FAILPOINTS") or None,
            log_format=_log_format(env),
        )


def _number(env: Mapping[str, str], name: str, default, kind):
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a valid {kind.__name__}") from None
    # float() accepts "nan" and "inf": NaN slips past every range check below, and
    # neither makes a usable delay or lease.
    if not math.isfinite(value):
        raise SettingsError(f"{name}={raw!r} is not a finite number")
    return value


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    value = _number(env, name, default, int)
    if value < 1:
        raise SettingsError(f"{name} must be at least 1, got {value}")
    return value


def _positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    value = _number(env, name, default, float)
    if value <= 0:
        raise SettingsError(f"{name} must be greater than 0, got {value}")
    return value


def _non_negative_float(env: Mapping[str, str], name: str, default: float) -> float:
    value = _number(env, name, default, float)
    if value < 0:
        raise SettingsError(f"{name} must be 0 or more, got {value}")
    return value


def _log_format(env: Mapping[str, str]) -> str:
    value = (env.get("JOBS_PLATFORM_LOG_FORMAT") or "human").strip().lower()
    if value not in ("human", "json"):
        raise SettingsError(f"JOBS_PLATFORM_LOG_FORMAT must be 'human' or 'json', got {value!r}")
    return value
