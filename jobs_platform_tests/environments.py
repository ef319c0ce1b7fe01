"""The environment of a framework run: its variables, set in the test's process or passed to
subprocesses."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from jobs_platform.settings import Settings
from jobs_platform.store.db import warehouse_engine
from jobs_platform_tests.dagster_homes import fresh_dagster_home

# The orders example's code location (examples/orders), which most tests run.
EXAMPLE_MODULE = "orders_example.definitions"

# Small numbers so that retries and leases play out in seconds, not minutes.
TEST_ENV_DEFAULTS = {
    "JOBS_PLATFORM_RETRY_DELAY_SECONDS": "0.05",
    "JOBS_PLATFORM_MAX_ATTEMPTS": "3",
    "JOBS_PLATFORM_LEASE_SECONDS": "10",
}


def platform_environment(warehouse_url: str, folder: Path, **overrides: str) -> dict[str, str]:
    """Variables for a run against `warehouse_url`, with everything else under `folder`."""
    dagster_home = folder / "dagster_home"
    fresh_dagster_home(dagster_home)
    env = {
        "JOBS_PLATFORM_DATABASE_URL": warehouse_url,
        "JOBS_PLATFORM_LANDING": str(folder / "landing"),
        "DAGSTER_HOME": str(dagster_home),
        # The code location the commands work on, as a user exports it once.
        "JOBS_PLATFORM_MODULE": EXAMPLE_MODULE,
        **TEST_ENV_DEFAULTS,
    }
    env.update(overrides)
    return env


def enter_environment(env: dict[str, str], monkeypatch, folder: Path) -> dict[str, str]:
    """Set `env` in this process (for in-process runs) and work in `folder`; returns `env`."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(folder)
    return env


def settings_from(env: dict[str, str]) -> Settings:
    return Settings.from_env(env)


def engine_from(env: dict[str, str]) -> sa.Engine:
    return warehouse_engine(env["JOBS_PLATFORM_DATABASE_URL"])
