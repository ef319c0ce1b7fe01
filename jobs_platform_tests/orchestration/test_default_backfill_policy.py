"""Backfills from the UI run many partitions per run, each still its own unit.

The default policy groups up to 30 partitions in a run; a poison day among them is
quarantined alone, and Dagster's partition view shows it failed and the others
materialized. The last test launches the backfill as the UI does (GraphQL
`launchPartitionBackfill` on a webserver, runs created by a daemon): it takes a minute or
two, most of it the daemon's 30 s tick.
"""

from __future__ import annotations

import datetime as dt

import dagster as dg
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset
from jobs_platform.examples.orders.assets import (
    daily_partitions,
    daily_revenue,
    orders,
    orders_backfill,
    orders_of_day,
)
from jobs_platform.examples.orders.seed import seed_orders
from jobs_platform.examples.orders.tables import orders_table
from jobs_platform.orchestration.backfill_asset import DEFAULT_BACKFILL_POLICY
from jobs_platform.store.schema import quarantine
from jobs_platform_tests.support import engine_from

FIRST, POISON, LAST = dt.date(2024, 8, 1), dt.date(2024, 8, 2), dt.date(2024, 8, 3)
DAYS = [FIRST.isoformat(), POISON.isoformat(), LAST.isoformat()]

one_run_each_table = orders_table.to_metadata(sa.MetaData(), name="one_run_each_orders")


@backfill_asset(
    table=one_run_each_table,
    partitions_def=daily_partitions,
    partition_scope=orders_of_day,
    backfill_policy=dg.BackfillPolicy.multi_run(1),
)
def one_run_each_orders(source: PartitionInput):
    """Orders, one partition per run (a test-only asset)."""
    yield from ()


def statuses(instance: dg.DagsterInstance, asset: str) -> dict[str, str | None]:
    found = instance.get_status_by_partition(dg.AssetKey(asset), DAYS, daily_partitions) or {}
    return {day: (status.value if status else None) for day, status in found.items()}


def quarantined(env) -> list[tuple[str, str]]:
    with engine_from(env).connect() as connection:
        query = sa.select(quarantine.c.asset, quarantine.c.partition).order_by(quarantine.c.id)
        return [tuple(row) for row in connection.execute(query)]


def test_backfills_run_a_month_of_partitions_per_run_unless_told_otherwise():
    from jobs_platform.definitions import defs

    assert orders.backfill_policy == DEFAULT_BACKFILL_POLICY
    assert DEFAULT_BACKFILL_POLICY.max_partitions_per_run == 30
    # The job takes the smallest policy of its assets: still 30 days per run.
    job = defs.resolve_job_def(orders_backfill.name)
    assert job.backfill_policy == DEFAULT_BACKFILL_POLICY
    assert one_run_each_orders.backfill_policy == dg.BackfillPolicy.multi_run(1)


def test_a_downstream_backfill_has_its_own_policy_so_a_poison_day_fails_only_its_own_run():
    # Equal policies would put both assets in one run, where a poison day of orders fails
    # the step and with it every day of daily_revenue in that run.
    assert daily_revenue.backfill_policy != orders.backfill_policy


def test_a_poison_day_in_a_ranged_run_is_quarantined_alone_and_shown_failed(platform_env):
    from jobs_platform.definitions import defs

    seed_orders(
        platform_env["JOBS_PLATFORM_LANDING"], FIRST, LAST, orders_per_day=20, poison_days=[POISON]
    )
    instance = dg.DagsterInstance.get()

    # The run a backfill of these days gets: one run over the range, as the daemon tags it.
    result = dg.materialize(
        [orders],
        instance=instance,
        resources=dict(defs.resources),
        tags={
            "dagster/asset_partition_range_start": FIRST.isoformat(),
            "dagster/asset_partition_range_end": LAST.isoformat(),
        },
        raise_on_error=False,
    )

    assert not result.success
    assert quarantined(platform_env) == [("orders", POISON.isoformat())]
    assert statuses(instance, "orders") == {
        FIRST.isoformat(): "MATERIALIZED",
        POISON.isoformat(): "FAILED",
        LAST.isoformat(): "MATERIALIZED",
    }


def test_a_ui_backfill_with_a_poison_day_quarantines_it_alone_and_computes_the_other_days(
    pg_platform_env, tmp_path
):
    from jobs_platform.bench.daemon import DagsterStack, ui_backfill_params, wait_for_backfill

    env = pg_platform_env
    seed_orders(env["JOBS_PLATFORM_LANDING"], FIRST, LAST, orders_per_day=20, poison_days=[POISON])
    stack_env = {name: env[name] for name in env if name != "DAGSTER_HOME"}

    with DagsterStack(tmp_path / "stack", stack_env) as stack:
        backfill_id = stack.launch_backfill(ui_backfill_params(DAYS, None))
        backfill, records, _ = wait_for_backfill(stack, backfill_id, timeout=600)
        with dg.DagsterInstance.from_config(str(stack.home)) as instance:
            orders_status = statuses(instance, "orders")
            revenue_status = statuses(instance, "daily_revenue")

    assert backfill.status.value == "COMPLETED_FAILED"
    assert quarantined(env) == [("orders", POISON.isoformat())]
    # One run for the three days of orders, then revenue runs for the days that are ready.
    orders_runs = [
        r for r in records if dg.AssetKey("orders") in (r.dagster_run.asset_selection or ())
    ]
    assert len(orders_runs) == 1
    assert orders_status == {
        FIRST.isoformat(): "MATERIALIZED",
        POISON.isoformat(): "FAILED",
        LAST.isoformat(): "MATERIALIZED",
    }
    assert revenue_status[FIRST.isoformat()] == "MATERIALIZED"
    assert revenue_status[LAST.isoformat()] == "MATERIALIZED"
    assert revenue_status[POISON.isoformat()] != "MATERIALIZED"
