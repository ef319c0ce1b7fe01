"""Re-running a partition is safe: same tables, and no new row versions when unchanged."""

from __future__ import annotations

import datetime as dt

from jobs_platform.examples.orders.assets import daily_revenue, orders
from jobs_platform.examples.orders.seed import seed_orders
from jobs_platform_tests.support import (
    engine_from,
    materialize,
    metadata_of,
    row_versions,
    table_snapshot,
)

DAY = dt.date(2024, 1, 5)


def test_same_partition_twice_gives_identical_tables(platform_env):
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], DAY, DAY, orders_per_day=120)
    first = materialize([orders, daily_revenue], DAY.isoformat(), chunk_rows=50)
    assert first.success
    engine = engine_from(platform_env)
    orders_after_first = table_snapshot(engine, "orders")
    revenue_after_first = table_snapshot(engine, "daily_revenue")
    assert len(orders_after_first) == 120
    assert metadata_of(first, "orders")["rows_inserted"] == 120

    second = materialize([orders, daily_revenue], DAY.isoformat(), chunk_rows=50)

    assert second.success
    assert table_snapshot(engine, "orders") == orders_after_first
    assert table_snapshot(engine, "daily_revenue") == revenue_after_first
    assert metadata_of(second, "orders")["rows_inserted"] == 0
    assert metadata_of(second, "orders")["rows_updated"] == 0


def test_unchanged_rerun_creates_no_new_row_versions(pg_platform_env):
    seed_orders(pg_platform_env["JOBS_PLATFORM_LANDING"], DAY, DAY, orders_per_day=120)
    assert materialize([orders, daily_revenue], DAY.isoformat(), chunk_rows=50).success
    engine = engine_from(pg_platform_env)
    versions = {name: row_versions(engine, name) for name in ("orders", "daily_revenue")}

    assert materialize([orders, daily_revenue], DAY.isoformat(), chunk_rows=50).success
    # A different chunk size re-reads every chunk and merges it: still no row rewritten.
    assert materialize([orders, daily_revenue], DAY.isoformat(), chunk_rows=33).success

    assert {name: row_versions(engine, name) for name in versions} == versions
