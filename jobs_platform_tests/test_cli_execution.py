"""The documented command lines run a partition through Dagster, in real processes."""

from __future__ import annotations

import datetime as dt

from jobs_platform_tests.commands import dagster_asset_materialize, dagster_job_execute
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.landing import expected_tables_from_landing
from jobs_platform_tests.rows import attempts_of, declared_rows
from jobs_platform_tests.runs import stored_materialization_metadata
from orders_example.orders.seed import seed_orders
from orders_example.orders.tables import daily_revenue_table, orders_table

ORDERS_PER_DAY = 90


def _seed(env, day: str, **options) -> None:
    date = dt.date.fromisoformat(day)
    seed_orders(env["JOBS_PLATFORM_LANDING"], date, date, orders_per_day=ORDERS_PER_DAY, **options)


def _output(completed) -> str:
    return f"exit {completed.returncode}\n{completed.stdout[-4000:]}\n{completed.stderr[-8000:]}"


def _warehouse(env) -> tuple[list[tuple], list[tuple]]:
    engine = engine_from(env)
    return declared_rows(engine, orders_table), declared_rows(engine, daily_revenue_table)


def test_dagster_job_execute_with_partition_tag_writes_the_days_rows(platform_env):
    _seed(platform_env, "2024-01-02")

    completed = dagster_job_execute(platform_env, "2024-01-02")

    assert completed.returncode == 0, _output(completed)
    expected = expected_tables_from_landing(platform_env["JOBS_PLATFORM_LANDING"], "2024-01-02")
    assert len(expected[0]) == ORDERS_PER_DAY
    assert _warehouse(platform_env) == expected


def test_dagster_asset_materialize_with_config_json_honours_chunk_rows(pg_platform_env):
    _seed(pg_platform_env, "2024-01-03")

    completed = dagster_asset_materialize(
        pg_platform_env, ["orders", "daily_revenue"], "2024-01-03", chunk_rows=40
    )

    assert completed.returncode == 0, _output(completed)
    landing = pg_platform_env["JOBS_PLATFORM_LANDING"]
    assert _warehouse(pg_platform_env) == expected_tables_from_landing(landing, "2024-01-03")
    metadata = stored_materialization_metadata(pg_platform_env, "orders", "2024-01-03")
    assert metadata["chunks_written"] == 3  # 90 orders in chunks of 40


def test_poison_day_exits_non_zero_naming_the_bad_line(pg_platform_env):
    _seed(pg_platform_env, "2024-01-04", poison_days=[dt.date(2024, 1, 4)])
    bad_line = ORDERS_PER_DAY // 2 + 1  # the seeder puts its malformed lines in the middle

    completed = dagster_job_execute(pg_platform_env, "2024-01-04")

    assert completed.returncode != 0, _output(completed)
    output = completed.stdout + completed.stderr
    assert f"line {bad_line}: not valid JSON" in output, _output(completed)
    history = attempts_of(engine_from(pg_platform_env), "orders", "2024-01-04")
    assert [row.error_class for row in history] == ["terminal"]  # stopped, not retried
