"""A warehouse missing what the code needs is a deploy step not taken: terminal at once.

`jobs-platform db upgrade` ran, but nobody created the backfill's own table: every attempt
would fail the same way, so the first one quarantines the partition, and the entry names
the table and the step that creates it instead of retrying for minutes.
"""

from __future__ import annotations

import datetime as dt

import pytest

from jobs_platform.dead_letter.entries import active_entry
from jobs_platform.store.db import warehouse_engine
from jobs_platform_tests.environments import enter_environment, platform_environment
from jobs_platform_tests.rows import attempts_of
from jobs_platform_tests.runs import materialize
from orders_example.orders.assets import orders
from orders_example.orders.seed import seed_orders

DAY = dt.date(2024, 1, 3)
PARTITION = DAY.isoformat()


@pytest.fixture
def env_without_orders_table(upgraded_url, tmp_path, monkeypatch) -> dict[str, str]:
    """A deployed warehouse (`db upgrade` ran) where the `orders` table was never created."""
    env = platform_environment(upgraded_url, tmp_path, JOBS_PLATFORM_MAX_ATTEMPTS="5")
    return enter_environment(env, monkeypatch, tmp_path)


def test_a_missing_backfill_table_quarantines_after_one_attempt_naming_the_table_and_the_fix(
    env_without_orders_table,
):
    seed_orders(env_without_orders_table["JOBS_PLATFORM_LANDING"], DAY, DAY)
    engine = warehouse_engine(env_without_orders_table["JOBS_PLATFORM_DATABASE_URL"])

    result = materialize([orders], PARTITION)

    assert not result.success
    history = attempts_of(engine, "orders", PARTITION)
    assert [row.error_class for row in history] == ["terminal"]
    with engine.connect() as connection:
        entry = active_entry(connection, "orders", PARTITION)
    assert entry is not None
    assert (entry.attempts, entry.error_class) == (1, "terminal")
    assert 'table "orders" does not exist' in entry.last_error
    assert "create_user_tables" in entry.last_error
    assert entry.last_error == history[0].message
