"""Specifications of the settings (read from the environment) and of warehouse URL handling."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from jobs_platform.settings import Settings, SettingsError
from jobs_platform.store.db import normalize_url, redact_url

# Settings


def test_defaults_put_the_warehouse_and_landing_zone_under_the_working_directory(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)

    settings = Settings.from_env({})

    assert settings.database_url == f"sqlite:///{tmp_path / '.jobs_platform' / 'warehouse.db'}"
    assert settings.landing_root == str(tmp_path / ".jobs_platform" / "landing")


def test_defaults_of_the_numbers_and_options():
    settings = Settings.from_env({})

    assert settings.max_attempts == 5
    assert settings.retry_delay_seconds == 2.0
    assert settings.lease_seconds == 60.0
    assert settings.attempt_timeout_seconds == 3600.0
    assert settings.alert_webhook_url is None
    assert settings.failpoints is None


def test_every_variable_is_read():
    settings = Settings.from_env(
        {
            "JOBS_PLATFORM_DATABASE_URL": "postgresql://jobs@db/warehouse",
            "JOBS_PLATFORM_LANDING": "s3://bucket/landing",
            "JOBS_PLATFORM_MAX_ATTEMPTS": "7",
            "JOBS_PLATFORM_RETRY_DELAY_SECONDS": "0.25",
            "JOBS_PLATFORM_LEASE_SECONDS": "12.5",
            "JOBS_PLATFORM_ATTEMPT_TIMEOUT_SECONDS": "90",
            "JOBS_PLATFORM_ALERT_WEBHOOK_URL": "https://hooks.example/alert",
            "JOBS_PLATFORM_FAILPOINTS": "read=transient*1",
        }
    )

    assert settings == Settings(
        database_url="postgresql://jobs@db/warehouse",
        landing_root="s3://bucket/landing",
        max_attempts=7,
        retry_delay_seconds=0.25,
        lease_seconds=12.5,
        attempt_timeout_seconds=90.0,
        alert_webhook_url="https://hooks.example/alert",
        failpoints="read=transient*1",
    )


def test_process_environment_is_read_when_no_mapping_is_given(monkeypatch):
    monkeypatch.setenv("JOBS_PLATFORM_MAX_ATTEMPTS", "9")
    monkeypatch.setenv("JOBS_PLATFORM_DATABASE_URL", "sqlite:///elsewhere.db")

    settings = Settings.from_env()

    assert (settings.max_attempts, settings.database_url) == (9, "sqlite:///elsewhere.db")


@pytest.mark.parametrize("blank", ["", "   "])
def test_blank_numbers_mean_the_default(blank):
    settings = Settings.from_env(
        {
            "JOBS_PLATFORM_MAX_ATTEMPTS": blank,
            "JOBS_PLATFORM_RETRY_DELAY_SECONDS": blank,
            "JOBS_PLATFORM_LEASE_SECONDS": blank,
            "JOBS_PLATFORM_ATTEMPT_TIMEOUT_SECONDS": blank,
        }
    )

    assert (settings.max_attempts, settings.lease_seconds) == (5, 60.0)
    assert (settings.retry_delay_seconds, settings.attempt_timeout_seconds) == (2.0, 3600.0)


def test_empty_optional_strings_mean_unset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    settings = Settings.from_env(
        {
            "JOBS_PLATFORM_DATABASE_URL": "",
            "JOBS_PLATFORM_ALERT_WEBHOOK_URL": "",
            "JOBS_PLATFORM_FAILPOINTS": "",
        }
    )

    assert settings.database_url.startswith("sqlite:///")
    assert (settings.alert_webhook_url, settings.failpoints) == (None, None)


def test_numbers_may_carry_surrounding_spaces():
    settings = Settings.from_env({"JOBS_PLATFORM_MAX_ATTEMPTS": " 4 "})

    assert settings.max_attempts == 4


def test_zero_retry_delay_is_allowed():
    assert Settings.from_env({"JOBS_PLATFORM_RETRY_DELAY_SECONDS": "0"}).retry_delay_seconds == 0


@pytest.mark.parametrize(
    ("name", "raw", "problem"),
    [
        ("JOBS_PLATFORM_MAX_ATTEMPTS", "many", "is not a valid int"),
        ("JOBS_PLATFORM_MAX_ATTEMPTS", "2.5", "is not a valid int"),
        ("JOBS_PLATFORM_MAX_ATTEMPTS", "0", "must be at least 1, got 0"),
        ("JOBS_PLATFORM_MAX_ATTEMPTS", "-2", "must be at least 1, got -2"),
        ("JOBS_PLATFORM_RETRY_DELAY_SECONDS", "soon", "is not a valid float"),
        ("JOBS_PLATFORM_RETRY_DELAY_SECONDS", "-0.5", "must be 0 or more, got -0.5"),
        ("JOBS_PLATFORM_RETRY_DELAY_SECONDS", "nan", "is not a finite number"),
        ("JOBS_PLATFORM_LEASE_SECONDS", "0", "must be greater than 0, got 0.0"),
        ("JOBS_PLATFORM_LEASE_SECONDS", "-1", "must be greater than 0"),
        ("JOBS_PLATFORM_LEASE_SECONDS", "60s", "is not a valid float"),
        ("JOBS_PLATFORM_LEASE_SECONDS", "inf", "is not a finite number"),
        ("JOBS_PLATFORM_LEASE_SECONDS", "NaN", "is not a finite number"),
        ("JOBS_PLATFORM_ATTEMPT_TIMEOUT_SECONDS", "0", "must be greater than 0"),
        ("JOBS_PLATFORM_ATTEMPT_TIMEOUT_SECONDS", "1e400", "is not a finite number"),
    ],
)
def test_bad_number_is_refused_naming_the_variable_and_the_problem(name, raw, problem):
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({name: raw})

    assert name in str(refused.value)
    assert problem in str(refused.value)


def test_settings_error_is_a_value_error():
    assert issubclass(SettingsError, ValueError)


# Database URLs


def test_redacted_url_hides_the_password():
    redacted = redact_url("postgresql+psycopg://jobs:s3cr%40t!@db.internal:5432/warehouse")

    assert "s3cr" not in redacted
    assert redacted == "postgresql+psycopg://jobs:***@db.internal:5432/warehouse"


def test_redacted_url_without_a_password_is_unchanged():
    assert redact_url("postgresql://jobs@db/warehouse") == "postgresql://jobs@db/warehouse"


def test_redacted_url_accepts_a_parsed_url():
    url = sa.make_url("postgresql://jobs:secret@db/warehouse")

    assert "secret" not in redact_url(url)


def test_unparseable_url_is_redacted_entirely():
    assert redact_url("not a url with password secret") == "<unparseable database URL>"


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_bare_postgresql_url_gets_the_psycopg_driver(scheme):
    url = normalize_url(f"{scheme}://jobs:secret@db:6543/warehouse?sslmode=require")

    assert url.drivername == "postgresql+psycopg"
    assert url.render_as_string(hide_password=False) == (
        "postgresql+psycopg://jobs:secret@db:6543/warehouse?sslmode=require"
    )


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg2://jobs@db/warehouse",
        "postgresql+psycopg://jobs@db/warehouse",
        "sqlite:///warehouse.db",
    ],
)
def test_url_with_an_explicit_driver_or_another_backend_is_kept(url):
    assert normalize_url(url).render_as_string(hide_password=False) == url


def test_the_redrive_waits_15_minutes_first_and_redrives_a_partition_3_times_by_default():
    settings = Settings.from_env({})

    assert (settings.redrive_cooldown_seconds, settings.max_redrives) == (900.0, 3)


def test_the_redrive_settings_are_read_and_zero_redrives_is_allowed():
    settings = Settings.from_env(
        {"JOBS_PLATFORM_REDRIVE_COOLDOWN_SECONDS": "0.5", "JOBS_PLATFORM_MAX_REDRIVES": "0"}
    )

    assert (settings.redrive_cooldown_seconds, settings.max_redrives) == (0.5, 0)


@pytest.mark.parametrize(
    ("name", "raw", "problem"),
    [
        ("JOBS_PLATFORM_REDRIVE_COOLDOWN_SECONDS", "-1", "must be 0 or more, got -1.0"),
        ("JOBS_PLATFORM_REDRIVE_COOLDOWN_SECONDS", "inf", "is not a finite number"),
        ("JOBS_PLATFORM_MAX_REDRIVES", "-1", "must be 0 or more, got -1"),
        ("JOBS_PLATFORM_MAX_REDRIVES", "two", "is not a valid int"),
    ],
)
def test_refused_redrive_settings_name_the_variable(name, raw, problem):
    with pytest.raises(SettingsError, match=problem) as raised:
        Settings.from_env({name: raw})

    assert name in str(raised.value)


def test_the_resource_carries_the_redrive_settings_over_the_environment(monkeypatch):
    from jobs_platform.orchestration.resources import JobsPlatformResource

    monkeypatch.setenv("JOBS_PLATFORM_MAX_REDRIVES", "5")
    resource = JobsPlatformResource(redrive_cooldown_seconds=60.0, max_redrives=1)

    settings = resource.settings()

    assert (settings.redrive_cooldown_seconds, settings.max_redrives) == (60.0, 1)
    assert JobsPlatformResource().settings().max_redrives == 5
