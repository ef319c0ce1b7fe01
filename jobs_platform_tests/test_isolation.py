"""A poison day blocks only itself and its own downstream, however the backfill is launched.

Five days of orders, one of them poison (a malformed line): on every launch path the four
good days' `orders` and `daily_revenue` equal a reference computed here from the landing
files, the poison day alone is quarantined, and its revenue is neither written nor shown
materialized. The paths: a job run over a range (the job page's runs, a schedule's, `dagster
job execute` in CI), the outbox sensor's runs, a schedule tick, and a requeue after the
input is fixed. The backfill daemon's two paths (job page and asset graph, through the
webserver's GraphQL) are in `orchestration/test_default_backfill_policy.py`; `dagster
asset materialize --partition-range` under `single_run()` (the one policy Dagster's CLI
takes a range under) in `test_partition_range_cli.py`; Celery's in `distributed/`.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.store.schema import partitions, quarantine
from jobs_platform_tests.commands import DAGSTER, run_cli
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.landing import expected_tables_from_landing
from jobs_platform_tests.rows import declared_rows
from orders_example.orders.assets import daily_partitions, revenue_of_day
from orders_example.orders.seed import seed_orders
from orders_example.orders.tables import daily_revenue_table, orders_table

FIRST, POISON, LAST = dt.date(2024, 5, 1), dt.date(2024, 5, 3), dt.date(2024, 5, 5)
DAYS = [(FIRST + dt.timedelta(days=n)).isoformat() for n in range(5)]
GOOD_DAYS = [day for day in DAYS if day != POISON.isoformat()]
RANGE_TAGS = {
    "dagster/asset_partition_range_start": FIRST.isoformat(),
    "dagster/asset_partition_range_end": LAST.isoformat(),
}


def seed_with_poison(env: dict[str, str]) -> None:
    seed_orders(env["JOBS_PLATFORM_LANDING"], FIRST, LAST, orders_per_day=25, poison_days=[POISON])


def orders_of(day: str) -> sa.ColumnElement[bool]:
    start = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC)
    return sa.and_(
        orders_table.c.ordered_at >= start, orders_table.c.ordered_at < start + dt.timedelta(1)
    )


def statuses(instance: dg.DagsterInstance, asset: str) -> dict[str, str | None]:
    found = instance.get_status_by_partition(dg.AssetKey(asset), DAYS, daily_partitions) or {}
    return {day: (status.value if status else None) for day, status in found.items()}


def assert_poison_day_alone_withheld(
    env: dict[str, str], instance: dg.DagsterInstance | None = None
) -> None:
    """Good days equal the reference in both tables; the poison day is quarantined alone."""
    engine = engine_from(env)
    landing = env["JOBS_PLATFORM_LANDING"]
    for day in GOOD_DAYS:
        expected_orders, expected_revenue = expected_tables_from_landing(landing, day)
        assert declared_rows(engine, orders_table, orders_of(day)) == expected_orders, day
        got_revenue = declared_rows(
            engine, daily_revenue_table, revenue_of_day(daily_revenue_table, day)
        )
        assert got_revenue == expected_revenue, day
    poison = POISON.isoformat()
    with engine.connect() as connection:
        entries = connection.execute(sa.select(quarantine.c.asset, quarantine.c.partition)).all()
        revenue_state = connection.execute(
            sa.select(partitions.c.status).where(
                partitions.c.asset == "daily_revenue", partitions.c.partition == poison
            )
        ).all()
    assert [tuple(entry) for entry in entries] == [("orders", poison)]
    assert revenue_state == []  # never attempted, so never computed from partial input
    where = revenue_of_day(daily_revenue_table, poison)
    assert declared_rows(engine, daily_revenue_table, where) == []
    if instance is not None:
        for asset in ("orders", "daily_revenue"):
            shown = statuses(instance, asset)
            assert {day: shown[day] for day in GOOD_DAYS} == dict.fromkeys(
                GOOD_DAYS, "MATERIALIZED"
            ), asset
            assert shown[poison] != "MATERIALIZED", asset


def test_a_job_run_over_a_range_computes_every_good_days_revenue(platform_env):
    """The run the job page, a schedule or `dagster job execute` over a range makes."""
    from orders_example.definitions import defs

    seed_with_poison(platform_env)
    instance = dg.DagsterInstance.get()
    result = defs.resolve_job_def("orders_backfill").execute_in_process(
        instance=instance, tags=RANGE_TAGS, raise_on_error=False
    )

    assert not result.success  # a partition was quarantined: the run says so
    assert_poison_day_alone_withheld(platform_env, instance)


@pytest.mark.slow
def test_job_execute_over_a_range_withholds_only_the_poison_day_until_it_is_requeued(
    pg_platform_env,
):
    env = pg_platform_env
    seed_with_poison(env)
    executed = run_cli(
        [
            DAGSTER, "job", "execute", "-m", "orders_example.definitions", "-j", "orders_backfill",
            "--tags", json.dumps(RANGE_TAGS),
        ],
        env,
    )  # fmt: skip

    assert executed.returncode == 1, executed.stdout[-2000:]
    with dg.DagsterInstance.get() as instance:
        assert_poison_day_alone_withheld(env, instance)

    seed_orders(env["JOBS_PLATFORM_LANDING"], POISON, POISON, orders_per_day=25)  # fixed
    jobs_platform = str(Path(DAGSTER).with_name("jobs-platform"))
    # No daemon here: the command runs the requeue's run itself, and returns once it ended.
    requeued = run_cli(
        [jobs_platform, "dead-letter", "requeue", "orders", POISON.isoformat(), "--wait"], env
    )
    assert requeued.returncode == 0, requeued.stdout[-2000:] + requeued.stderr[-2000:]
    assert "1 run succeeded" in requeued.stdout
    engine = engine_from(env)
    for day in DAYS:
        expected_orders, expected_revenue = expected_tables_from_landing(
            env["JOBS_PLATFORM_LANDING"], day
        )
        assert declared_rows(engine, orders_table, orders_of(day)) == expected_orders, day
        where = revenue_of_day(daily_revenue_table, day)
        assert declared_rows(engine, daily_revenue_table, where) == expected_revenue, day


def test_the_daily_schedule_runs_each_day_alone_so_a_poison_day_withholds_only_itself(
    platform_env,
):
    from orders_example.definitions import defs

    seed_with_poison(platform_env)
    instance = dg.DagsterInstance.get()
    schedule = defs.resolve_schedule_def("orders_daily_schedule")
    job = defs.resolve_job_def("orders_backfill")
    for day in DAYS:
        tick_at = dt.datetime.fromisoformat(day).replace(tzinfo=dt.UTC) + dt.timedelta(
            days=1, minutes=30
        )
        context = dg.build_schedule_context(instance=instance, scheduled_execution_time=tick_at)
        (request,) = schedule.evaluate_tick(context).run_requests
        assert request.partition_key == day
        job.execute_in_process(
            instance=instance, partition_key=day, tags=request.tags, raise_on_error=False
        )

    assert_poison_day_alone_withheld(platform_env, instance)


def test_an_outbox_request_over_the_range_withholds_only_the_poison_days_revenue(platform_env):
    from jobs_platform.outbox import request_backfill
    from jobs_platform.outbox.sensor import backfill_request_sensor
    from orders_example.definitions import defs

    seed_with_poison(platform_env)
    instance = dg.DagsterInstance.get()
    with engine_from(platform_env).begin() as connection:
        request_backfill(connection, "orders", DAYS, reason="isolation test")
    context = dg.build_sensor_context(
        instance=instance, definitions=defs, resources=dict(defs.resources)
    )
    requests = backfill_request_sensor.evaluate_tick(context).run_requests
    assert sorted(request.partition_key for request in requests) == DAYS
    job = defs.resolve_implicit_global_asset_job_def()
    for request in requests:
        job.execute_in_process(
            instance=instance,
            partition_key=request.partition_key,
            asset_selection=request.asset_selection,
            tags=request.tags,
            raise_on_error=False,
        )

    assert_poison_day_alone_withheld(platform_env, instance)


def test_a_downstream_partition_alone_is_not_computed_while_its_upstream_is_quarantined(
    platform_env,
):
    from orders_example.definitions import defs

    seed_with_poison(platform_env)
    instance = dg.DagsterInstance.get()
    job = defs.resolve_implicit_global_asset_job_def()
    assert not job.execute_in_process(
        instance=instance,
        partition_key=POISON.isoformat(),
        asset_selection=[dg.AssetKey("orders")],
        raise_on_error=False,
    ).success

    result = job.execute_in_process(
        instance=instance,
        partition_key=POISON.isoformat(),
        asset_selection=[dg.AssetKey("daily_revenue")],
        raise_on_error=False,
    )

    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.user_failure_data
    assert "orders/2024-05-03 (quarantined)" in failure.metadata["errors"].text
    assert statuses(instance, "daily_revenue")[POISON.isoformat()] == "FAILED"
    where = revenue_of_day(daily_revenue_table, POISON.isoformat())
    assert declared_rows(engine_from(platform_env), daily_revenue_table, where) == []
