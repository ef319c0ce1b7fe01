"""Every setting of the framework, read lazily from the environment in one place."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from jobs_platform.errors import WarehouseNotShared

# Defaults and why they are what they are.
DEFAULT_MAX_ATTEMPTS = 5  # enough to ride out a transient outage, few enough to surface poison fast
DEFAULT_RETRY_DELAY_SECONDS = 2.0  # base of the exponential backoff; full jitter spreads herds
DEFAULT_LEASE_SECONDS = 60.0  # heartbeats renew every third, so two missed beats still hold
DEFAULT_ATTEMPT_TIMEOUT_SECONDS = 3600.0  # a partition attempt should never take an hour
# A dead-letter entry that ran out of attempts on an outage is tried again after 15 minutes,
# then after 1 h and 4 h (4 times longer each time): an outage of any length ends by itself, and one
# that lasts costs a few runs a day, not a crash loop.
DEFAULT_REDRIVE_COOLDOWN_SECONDS = 900.0
# Three redrives per partition, then it waits for a person: a cause that comes back after
# three fixes or outages is not going away on its own.
DEFAULT_MAX_REDRIVES = 3
# The circuit breaker (`steering.circuits`): one cause failing 5 distinct partitions of a
# backfill within 5 minutes is an outage, not 5 bad partitions (0 partitions turns it off).
# While open, one probe partition tries after 10 s, then 20, 40, … up to 5 minutes: an
# outage of any length costs one attempt per interval, and its end is noticed within one.
DEFAULT_CIRCUIT_PARTITIONS = 5
DEFAULT_CIRCUIT_WINDOW_SECONDS = 300.0
DEFAULT_CIRCUIT_PROBE_SECONDS = 10.0
DEFAULT_CIRCUIT_PROBE_MAX_SECONDS = 300.0
DEFAULT_STATE_DIR = ".jobs_platform"
# Where the steps of a run execute: one process per step on this machine unless told.
DEFAULT_EXECUTOR = "multiprocess"
EXECUTORS = ("multiprocess", "in_process", "celery")
# A local RabbitMQ's guest account and Celery's result replies over the same broker.
DEFAULT_CELERY_BROKER = "amqp://guest:guest@127.0.0.1:5672//"
DEFAULT_CELERY_BACKEND = "rpc://"


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
    executor: str = DEFAULT_EXECUTOR
    celery_broker: str = DEFAULT_CELERY_BROKER
    celery_backend: str = DEFAULT_CELERY_BACKEND
    redrive_cooldown_seconds: float = DEFAULT_REDRIVE_COOLDOWN_SECONDS
    max_redrives: int = DEFAULT_MAX_REDRIVES
    circuit_partitions: int = DEFAULT_CIRCUIT_PARTITIONS
    circuit_window_seconds: float = DEFAULT_CIRCUIT_WINDOW_SECONDS
    circuit_probe_seconds: float = DEFAULT_CIRCUIT_PROBE_SECONDS
    circuit_probe_max_seconds: float = DEFAULT_CIRCUIT_PROBE_MAX_SECONDS
    # Off for a reader that must run on the engine's thread (`engine.read_ahead`).
    read_ahead: bool = True

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
            log_format=_choice(
                env, "JOBS_PLATFORM_LOG_FORMAT", "human", ("human", "json"), "'human' or 'json'"
            ),
            executor=_choice(
                env, "JOBS_PLATFORM_EXECUTOR", DEFAULT_EXECUTOR, EXECUTORS, f"one of {EXECUTORS}"
            ),
            read_ahead=_choice(
                env, "JOBS_PLATFORM_READ_AHEAD", "on", ("on", "off"), "'on' or 'off'"
            )
            == "on",
            celery_broker=env.get("JOBS_PLATFORM_CELERY_BROKER") or DEFAULT_CELERY_BROKER,
            celery_backend=env.get("JOBS_PLATFORM_CELERY_BACKEND") or DEFAULT_CELERY_BACKEND,
            redrive_cooldown_seconds=_non_negative_float(
                env, "JOBS_PLATFORM_REDRIVE_COOLDOWN_SECONDS", DEFAULT_REDRIVE_COOLDOWN_SECONDS
            ),
            # 0 turns the redrive off everywhere (a backfill turns it off with redrive=False).
            max_redrives=_non_negative_int(env, "JOBS_PLATFORM_MAX_REDRIVES", DEFAULT_MAX_REDRIVES),
            # 0 turns the circuit breaker off.
            circuit_partitions=_non_negative_int(
                env, "JOBS_PLATFORM_CIRCUIT_PARTITIONS", DEFAULT_CIRCUIT_PARTITIONS
            ),
            circuit_window_seconds=_positive_float(
                env, "JOBS_PLATFORM_CIRCUIT_WINDOW_SECONDS", DEFAULT_CIRCUIT_WINDOW_SECONDS
            ),
            circuit_probe_seconds=_positive_float(
                env, "JOBS_PLATFORM_CIRCUIT_PROBE_SECONDS", DEFAULT_CIRCUIT_PROBE_SECONDS
            ),
            circuit_probe_max_seconds=_positive_float(
                env, "JOBS_PLATFORM_CIRCUIT_PROBE_MAX_SECONDS", DEFAULT_CIRCUIT_PROBE_MAX_SECONDS
            ),
        )


def require_shared_warehouse(url: str | None) -> str:
    """The warehouse URL a step on any machine can use, or `WarehouseNotShared` naming why."""
    if not url:
        raise WarehouseNotShared(
            "JOBS_PLATFORM_DATABASE_URL is not set on this worker: under a remote executor a "
            "step must be told its warehouse (the embedded SQLite default serves local runs only)"
        )
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_absolute():
        raise WarehouseNotShared(
            f"JOBS_PLATFORM_DATABASE_URL names a relative or in-memory SQLite database "
            f"({parsed.database or ':memory:'!r}): under a remote executor each worker would "
            "write its own file; point it at the shared warehouse (PostgreSQL)"
        )
    return url


def configured_database_url(environ: Mapping[str, str] | None = None) -> str | None:
    """`JOBS_PLATFORM_DATABASE_URL` as given, or None where the embedded default applies."""
    env = os.environ if environ is None else environ
    return env.get("JOBS_PLATFORM_DATABASE_URL") or None


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


def _checked_number(env: Mapping[str, str], name: str, default, kind, ok, needed: str):
    """`_number`, refused with a `SettingsError` saying it must be `needed` unless `ok`."""
    value = _number(env, name, default, kind)
    if not ok(value):
        raise SettingsError(f"{name} must be {needed}, got {value}")
    return value


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    return _checked_number(env, name, default, int, lambda value: value >= 1, "at least 1")


def _non_negative_int(env: Mapping[str, str], name: str, default: int) -> int:
    return _checked_number(env, name, default, int, lambda value: value >= 0, "0 or more")


def _positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    return _checked_number(env, name, default, float, lambda value: value > 0, "greater than 0")


def _non_negative_float(env: Mapping[str, str], name: str, default: float) -> float:
    return _checked_number(env, name, default, float, lambda value: value >= 0, "0 or more")


def _choice(
    env: Mapping[str, str], name: str, default: str, choices: tuple[str, ...], needed: str
) -> str:
    """`name` (case and surrounding spaces aside), or `default` when unset; one of `choices`."""
    value = (env.get(name) or default).strip().lower()
    if value not in choices:
        raise SettingsError(f"{name} must be {needed}, got {value!r}")
    return value
