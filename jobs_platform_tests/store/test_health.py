"""Specifications of the health figures behind `status` and `platform_health`."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.health import Health, KeyWindow
from jobs_platform.store.schema import leases, partitions, quarantine
from jobs_platform_tests.clocks import ManualClock

NOW = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)
CLOCK = ManualClock(NOW)  # the database's clock, fixed: every reading is at NOW
EXPECTED = [f"2024-01-{day:02d}" for day in range(1, 11)]


@pytest.fixture
def warehouse(upgraded_url) -> sa.Engine:
    return warehouse_engine(upgraded_url)


def partition(key: str, status: str, duration: float | None = None, rows: int | None = None):
    return {
        "asset": "orders", "partition": key, "status": status, "episode": 1,
        "duration_seconds": duration, "row_count": rows, "updated_at": NOW,
    }  # fmt: skip


def entry(key: str, status: str = "quarantined") -> dict:
    return {
        "asset": "orders", "partition": key, "episode": 1, "status": status, "attempts": 3,
        "error_class": "terminal", "quarantined_at": NOW,
    }  # fmt: skip


def lease(key: str, *, acquired_minutes_ago: float, expires_in_minutes: float) -> dict:
    return {
        "asset": "orders", "partition": key, "token": 1, "holder": "host:1",
        "acquired_at": NOW - dt.timedelta(minutes=acquired_minutes_ago),
        "expires_at": NOW + dt.timedelta(minutes=expires_in_minutes),
    }  # fmt: skip


def a_known_scenario(warehouse: sa.Engine, *, outside: bool = True) -> None:
    """Every state over EXPECTED; with `outside`, a done partition before it too."""
    done = [partition(EXPECTED[n], "done", duration=float(n + 1), rows=100) for n in range(5)]
    before = [partition("2023-12-31", "done", duration=None, rows=5)] if outside else []
    with warehouse.begin() as connection:
        connection.execute(
            sa.insert(partitions),
            [
                *done,
                partition(EXPECTED[5], "failed"),
                partition(EXPECTED[6], "failed"),  # failed, then quarantined: counted once
                partition(EXPECTED[7], "quarantined"),
                *before,  # not expected
            ],
        )
        connection.execute(
            sa.insert(quarantine),
            [entry(EXPECTED[6]), entry(EXPECTED[7]), {**entry(EXPECTED[0], "resolved")}],
        )
        connection.execute(
            sa.insert(leases),
            [
                lease(EXPECTED[8], acquired_minutes_ago=2, expires_in_minutes=1),
                lease(EXPECTED[9], acquired_minutes_ago=5, expires_in_minutes=3),
                lease(EXPECTED[5], acquired_minutes_ago=9, expires_in_minutes=-1),
            ],
        )


def test_health_counts_states_percentiles_and_leases_of_a_known_scenario(warehouse):
    a_known_scenario(warehouse)

    with warehouse.connect() as connection:
        health = Health(CLOCK).asset_health(connection, {"orders": EXPECTED})["orders"]

    assert (health.done, health.failed, health.quarantined) == (6, 1, 2)
    # 10 expected: 5 done, 2 failed (one of them quarantined), 1 quarantined -> 2 missing.
    assert health.missing == 2
    assert (health.in_flight, health.expired_leases) == (2, 1)
    assert health.oldest_lease_age_seconds == 300.0
    # Nearest rank over the durations 1..5 (the done partition without one is left out).
    assert (health.duration_p50_seconds, health.duration_p95_seconds) == (3.0, 5.0)
    assert health.rows_per_second == round(505 / 15, 1)


def test_health_of_an_asset_with_no_state_is_all_missing(warehouse):
    with warehouse.connect() as connection:
        health = Health(CLOCK).asset_health(connection, {"orders": EXPECTED})["orders"]

    assert (health.done, health.failed, health.quarantined, health.missing) == (0, 0, 0, 10)
    assert health.duration_p50_seconds is None and health.rows_per_second is None
    assert health.oldest_lease_age_seconds is None and health.in_flight == 0


def test_a_window_counts_only_its_own_partitions(warehouse):
    a_known_scenario(warehouse)
    with warehouse.begin() as connection:
        connection.execute(
            sa.insert(partitions),
            [partition("2024-02-01", "failed"), partition("2024-02-02", "done", 9.0, 900)],
        )
        connection.execute(sa.insert(quarantine), [entry("2024-02-03")])
        connection.execute(
            sa.insert(leases), [lease("2024-02-04", acquired_minutes_ago=1, expires_in_minutes=5)]
        )
    # Every expected day but the 5th, which sorts inside the window's range: left out too.
    window = [key for key in EXPECTED if key != EXPECTED[4]]

    with warehouse.connect() as connection:
        health = Health(CLOCK).window_health(connection, {"orders": window})["orders"]

    assert (health.done, health.failed, health.quarantined) == (4, 1, 2)
    assert health.missing == 2  # the 9th and 10th: leased, no state yet
    assert (health.in_flight, health.expired_leases) == (2, 1)
    assert health.oldest_lease_age_seconds == 300.0
    assert (health.duration_p50_seconds, health.duration_p95_seconds) == (2.0, 4.0)
    assert health.rows_per_second == 40.0


def test_a_window_of_every_key_reads_as_the_whole_asset(warehouse):
    a_known_scenario(warehouse, outside=False)

    with warehouse.connect() as connection:
        whole = Health(CLOCK).asset_health(connection, {"orders": EXPECTED})
        window = Health(CLOCK).window_health(connection, {"orders": EXPECTED})

    assert window == whole


def test_an_empty_window_counts_nothing(warehouse):
    a_known_scenario(warehouse)

    with warehouse.connect() as connection:
        health = Health(CLOCK).window_health(connection, {"orders": []})["orders"]

    assert (health.done, health.missing, health.in_flight, health.rows_per_second) == (
        0, 0, 0, None,
    )  # fmt: skip


def test_a_key_window_counts_what_the_list_of_its_keys_counts(warehouse):
    """A time-window backfill's window (first key, last key, count) gives the figures its
    listed keys give: rows outside the range, and rows inside it of another key length
    (a format the backfill had before), are no keys of it."""
    a_known_scenario(warehouse)  # a done day before the window too
    with warehouse.begin() as connection:
        connection.execute(
            sa.insert(partitions),
            [
                partition("2024-01-11", "done", 1.0, 10),  # after the window
                partition("2024-01-05-10:00", "done", 1.0, 10),  # inside, another format
                partition("2024-01-03-00:00", "failed"),
            ],
        )
        connection.execute(
            sa.insert(quarantine),
            [entry(EXPECTED[9]), entry("2024-01-04-00:00"), entry("2024-01-12")],
        )
    window = KeyWindow(EXPECTED[0], EXPECTED[-1], len(EXPECTED))

    with warehouse.connect() as connection:
        listed = Health(CLOCK).asset_health(connection, {"orders": EXPECTED})["orders"]
        windowed = Health(CLOCK).asset_health(connection, {"orders": window})["orders"]

    assert windowed == listed
    # 10 days: 5 done, 2 failed (one quarantined), 2 quarantined only (the 8th, the 10th).
    assert listed.missing == 1  # the 9th: leased, no state yet


def test_an_empty_key_window_misses_nothing(warehouse):
    a_known_scenario(warehouse)

    with warehouse.connect() as connection:
        health = Health(CLOCK).asset_health(connection, {"orders": KeyWindow("", "", 0)})["orders"]

    assert health.missing == 0 and health.done == 6
