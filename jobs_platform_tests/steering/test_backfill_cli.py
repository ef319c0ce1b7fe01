"""`jobs-platform backfill pause|resume -m MODULE ASSET` and what `status` says of a pause,
from a user's own code location (`jobs_platform_tests.locations.steered`) on PostgreSQL."""

from __future__ import annotations

import getpass
import json

from jobs_platform.steering.pauses import pause_of
from jobs_platform_tests.cli_in_process import jobs_platform_in_process
from jobs_platform_tests.environments import engine_from

MODULE = "jobs_platform_tests.locations.steered"
ASSET = "landed_events"


def cli(env, *args):
    return jobs_platform_in_process(list(args), env)


def test_pause_records_the_person_and_reason_and_status_says_it(pg_platform_env):
    paused = cli(pg_platform_env, "backfill", "pause", "-m", MODULE, ASSET, "--reason", "vacuum")

    assert paused.returncode == 0, paused.stderr
    assert f"paused by {getpass.getuser()}" in paused.stdout
    assert f"jobs-platform backfill resume -m {MODULE} {ASSET}" in paused.stdout
    status = cli(pg_platform_env, "status", "-m", MODULE, "--load-location", "--json")
    shown = json.loads(status.stdout)["assets"][ASSET]
    assert shown["paused"]["by"] == getpass.getuser()
    assert shown["paused"]["reason"] == "vacuum"
    assert shown["held"] == {"paused": 0, "not_ready": 0}
    text = cli(pg_platform_env, "status", "-m", MODULE, "--load-location")
    assert f"{ASSET}: paused by {getpass.getuser()}" in text.stdout


def test_resume_lifts_the_pause_and_says_who_had_paused(pg_platform_env):
    cli(pg_platform_env, "backfill", "pause", "-m", MODULE, ASSET)

    resumed = cli(pg_platform_env, "backfill", "resume", "-m", MODULE, ASSET)

    assert resumed.returncode == 0, resumed.stderr
    assert f"{ASSET} resumed (it was paused by {getpass.getuser()}" in resumed.stdout
    with engine_from(pg_platform_env).connect() as connection:
        assert pause_of(connection, ASSET) is None
    again = cli(pg_platform_env, "backfill", "resume", "-m", MODULE, ASSET)
    assert "was not paused" in again.stdout


def test_pausing_a_backfill_the_location_does_not_serve_changes_nothing(pg_platform_env):
    refused = cli(pg_platform_env, "backfill", "pause", "-m", MODULE, "orders")

    assert refused.returncode == 2
    assert "has no backfill 'orders'" in refused.stderr
    with engine_from(pg_platform_env).connect() as connection:
        assert pause_of(connection, "orders") is None
