"""Re-running a partition is safe: same tables, and no new row versions when unchanged."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from functools import partial

from jobs_platform.engine.runner import Attempter, PartitionRunner
from jobs_platform_tests.databases import loaded_backfills
from jobs_platform_tests.environments import engine_from, settings_from
from jobs_platform_tests.rows import row_versions, table_snapshot
from jobs_platform_tests.runs import materialize, metadata_of
from orders_example.orders.assets import daily_revenue, orders
from orders_example.orders.resources import LandingZone
from orders_example.orders.seed import seed_orders

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
    # A different chunk size: still no row rewritten.
    assert materialize([orders, daily_revenue], DAY.isoformat(), chunk_rows=33).success

    assert {name: row_versions(engine, name) for name in versions} == versions


def test_unchanged_input_of_a_done_partition_finishes_without_rewriting(platform_env):
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], DAY, DAY, orders_per_day=120)
    assert materialize([orders], DAY.isoformat(), chunk_rows=50).success

    rerun = metadata_of(materialize([orders], DAY.isoformat(), chunk_rows=50), "orders")

    assert (rerun["input_rows"], rerun["rows_unchanged"]) == (120, 120)
    assert (rerun["chunks_written"], rerun["chunks_resumed"]) == (0, 3)
    assert rerun["rows_inserted"] == rerun["rows_updated"] == rerun["rows_swept"] == 0


def test_a_new_reader_version_recomputes_a_done_partition(platform_env):
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], DAY, DAY, orders_per_day=120)
    assert materialize([orders], DAY.isoformat(), chunk_rows=50).success
    spec = loaded_backfills()["orders"]
    # The engine calls the reader and the fingerprint with the input alone: bind their
    # resource as a step does (`orchestration.backfill_asset.with_resources`).
    landing = LandingZone(root=platform_env["JOBS_PLATFORM_LANDING"])
    assert spec.fingerprint is not None
    spec = replace(
        spec,
        version="2",
        read_chunks=partial(spec.read_chunks, landing=landing),
        fingerprint=partial(spec.fingerprint, landing=landing),
    )
    runner = PartitionRunner(spec, settings_from(platform_env))
    report = runner.attempt(DAY.isoformat(), Attempter(run_id="v2"), chunk_rows=50)

    # The input was read again (every chunk compared, none rewritten: same rows).
    assert report.fingerprint.endswith("@2")
    assert (report.chunks_written, report.counts.unchanged) == (3, 120)
    assert len(table_snapshot(engine_from(platform_env), "orders")) == 120
