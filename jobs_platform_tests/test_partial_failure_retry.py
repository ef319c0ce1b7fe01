"""A worker killed mid-partition: Dagster retries the step and the partition converges.

Each run is a real `dagster job execute` (multiprocess executor, one subprocess per step),
with a failpoint that SIGKILLs the step process once, on its first try. The retry takes
over the dead process's lease, records the killed attempt as a crash, skips the chunks
that committed with their checkpoints, and finishes. The tables must then equal a clean
run of the same input, in a fresh database of the same backend.
"""

from __future__ import annotations

import datetime as dt

import pytest

from jobs_platform.store.db import warehouse_engine
from jobs_platform_tests.commands import ORDERS_BACKFILL_ASSETS, dagster_job_execute
from jobs_platform_tests.databases import sibling_database
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.rows import attempts_of, table_snapshot
from jobs_platform_tests.runs import (
    chunk_rows_config,
    materialize_into,
    stored_materialization_metadata,
)
from orders_example.orders.assets import daily_revenue, orders
from orders_example.orders.seed import seed_orders

DAY = "2024-01-07"
ORDERS_PER_DAY = 100
CHUNK_ROWS = 30
CHUNK_SIZES = (30, 30, 30, 10)  # 100 orders in chunks of 30
CHUNKS = len(CHUNK_SIZES)
TABLES = ("orders", "daily_revenue")

# (failpoint rule, chunks a successful retry finds already committed)
CRASHES = {
    # Chunks 0 and 1 committed with their checkpoints before the kill.
    "after_commit": ("after_commit@orders#1=crash*1", 2),
    # Chunk 1 was written but its transaction never committed: only chunk 0 survives.
    "before_commit": ("before_commit@orders#1=crash*1", 1),
    # The full chunks committed; the last, short one commits in the finalize transaction
    # (its rows, sweep, done, release), which did not.
    "finalize": ("finalize@orders=crash*1", CHUNKS - 1),
}


def _output(completed) -> str:
    return f"exit {completed.returncode}\n{completed.stdout[-4000:]}\n{completed.stderr[-8000:]}"


def _clean_run(platform_env, tmp_path) -> dict[str, list[tuple]]:
    """The tables a clean run of the day leaves in a fresh database of the same backend."""
    with sibling_database(platform_env["JOBS_PLATFORM_DATABASE_URL"], tmp_path) as clean_url:
        materialize_into(clean_url, [orders, daily_revenue], DAY, chunk_rows=CHUNK_ROWS)
        clean_engine = warehouse_engine(clean_url)
        clean = {name: table_snapshot(clean_engine, name) for name in TABLES}
        clean_engine.dispose()
    return clean


@pytest.mark.parametrize("crash_point", list(CRASHES))
def test_killed_worker_is_retried_and_partition_converges_to_a_clean_run(
    crash_point, platform_env, tmp_path
):
    rule, resumed = CRASHES[crash_point]
    day = dt.date.fromisoformat(DAY)
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], day, day, orders_per_day=ORDERS_PER_DAY)
    clean = _clean_run(platform_env, tmp_path)
    env = {**platform_env, "JOBS_PLATFORM_FAILPOINTS": rule}

    completed = dagster_job_execute(
        env, DAY, config=chunk_rows_config(ORDERS_BACKFILL_ASSETS, CHUNK_ROWS)
    )

    assert completed.returncode == 0, _output(completed)
    engine = engine_from(env)
    after = {name: table_snapshot(engine, name) for name in TABLES}
    assert len(after["orders"]) == ORDERS_PER_DAY  # nothing lost, nothing doubled
    assert after == clean
    # The killed attempt never reported; its successor found it and recorded the crash.
    history = attempts_of(engine, "orders", DAY)
    assert [(row.outcome, row.error_class, row.step_retry) for row in history] == [
        ("failed", "crash", 0),
        ("succeeded", None, 1),
    ]
    # What committed before the kill was skipped, not rewritten.
    metadata = stored_materialization_metadata(env, "orders", DAY)
    assert metadata["chunks_resumed"] == resumed
    assert metadata["chunks_written"] == CHUNKS - resumed
    assert metadata["input_rows"] == ORDERS_PER_DAY
    assert metadata["rows_inserted"] == sum(CHUNK_SIZES[resumed:])
