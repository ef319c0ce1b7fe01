"""The examples' `landing` resource reads where `orders-example seed` and the demo write."""

from __future__ import annotations

from jobs_platform.settings import Settings
from orders_example.orders.resources import LandingZone


def test_unconfigured_it_is_the_landing_root_seed_writes_to(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JOBS_PLATFORM_LANDING", raising=False)

    assert LandingZone().resolved_root() == Settings.from_env().landing_root
    assert LandingZone().resolved_root() == str(tmp_path / ".jobs_platform" / "landing")


def test_the_variable_is_read_when_a_step_runs_not_when_the_resource_is_made(monkeypatch):
    landing = LandingZone()
    monkeypatch.setenv("JOBS_PLATFORM_LANDING", "s3://bucket/landing")

    assert landing.resolved_root() == Settings.from_env().landing_root == "s3://bucket/landing"


def test_a_configured_root_wins_over_the_variable(monkeypatch):
    monkeypatch.setenv("JOBS_PLATFORM_LANDING", "/from/the/environment")

    assert LandingZone(root="/configured").resolved_root() == "/configured"
