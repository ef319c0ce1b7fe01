"""Backfills from the UI run many partitions per run, each still its own unit.

The default policy groups up to 30 partitions in a run; a poison day among them is
quarantined alone, and Dagster's partition view shows it failed and the others
materialized. The last two tests launch the backfill as the UI does (GraphQL
`launchPartitionBackfill` on a webserver, runs created by a daemon looping every second
(`daemon_loops`) rather than Dagster's fixed 30 s). A month and a day from the asset graph
is split into runs of 30 and 1.
"""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset
from jobs_platform.orchestration.backfill_asset import DEFAULT_BACKFILL_POLICY
from jobs_platform.store.schema import quarantine
from jobs_platform_tests.daemon_loops import fast_daemon_loops
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.landing import expected_tables_from_landing
from jobs_platform_tests.rows import declared_rows
from orders_example.orders.assets import (
    daily_partitions,
    orders,
    orders_backfill,
    orders_of_day,
    revenue_of_day,
)
from orders_example.orders.seed import seed_orders
from orders_example.orders.tables import daily_revenue_table, orders_table

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
    from orders_example.definitions import defs

    assert orders.backfill_policy == DEFAULT_BACKFILL_POLICY
    assert DEFAULT_BACKFILL_POLICY.max_partitions_per_run == 30
    # The job takes the smallest policy of its assets: still 30 days per run.
    job = defs.resolve_job_def(orders_backfill.name)
    assert job.backfill_policy == DEFAULT_BACKFILL_POLICY
    assert one_run_each_orders.backfill_policy == dg.BackfillPolicy.multi_run(1)


def test_a_backfills_policy_is_dagsters_own_as_given():
    """No subclass that answers one reader `single_run()` and another `multi_run(n)`."""
    policies = [
        DEFAULT_BACKFILL_POLICY,
        orders.backfill_policy,
        one_run_each_orders.backfill_policy,
    ]

    assert {type(policy) for policy in policies} == {dg.BackfillPolicy}
    assert str(DEFAULT_BACKFILL_POLICY) == str(dg.BackfillPolicy.multi_run(30))


def test_backfills_that_read_one_another_run_as_one_step_a_month_per_run():
    from orders_example.definitions import defs

    chain = defs.get_assets_def(dg.AssetKey("daily_revenue"))
    assert chain is defs.get_assets_def(dg.AssetKey("orders"))
    assert chain.can_subset
    assert chain.backfill_policy == DEFAULT_BACKFILL_POLICY


def test_a_poison_day_in_a_ranged_run_is_quarantined_alone_and_shown_failed(platform_env):
    from orders_example.definitions import defs

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


def ui_backfill(env, tmp_path, params: dict):
    """Launch a backfill through the webserver's GraphQL as the UI does; wait for the end."""
    from benchmarks.daemon import DagsterStack, wait_for_backfill

    stack_env = fast_daemon_loops({name: env[name] for name in env if name != "DAGSTER_HOME"})
    with DagsterStack(tmp_path / "stack", stack_env) as stack:
        backfill_id = stack.launch_backfill(params)
        backfill, records, _ = wait_for_backfill(stack, backfill_id, timeout=600)
        instance = dg.DagsterInstance.from_config(str(stack.home))
        return backfill, records, instance


@pytest.mark.slow
def test_a_backfill_from_the_asset_graph_runs_30_days_a_run_and_withholds_the_poison_day(
    pg_platform_env, tmp_path
):
    """31 days: a run of 30 and a run of 1."""
    from benchmarks.daemon import ui_backfill_params
    from jobs_platform_tests.test_isolation import (
        DAYS,
        assert_poison_day_alone_withheld,
        orders_of,
    )

    month = [(dt.date(2024, 5, 1) + dt.timedelta(days=n)).isoformat() for n in range(31)]
    assert set(DAYS) < set(month)
    seed_orders(
        pg_platform_env["JOBS_PLATFORM_LANDING"],
        dt.date.fromisoformat(month[0]),
        dt.date.fromisoformat(month[-1]),
        orders_per_day=5,
        poison_days=[dt.date(2024, 5, 3)],
    )
    backfill, records, instance = ui_backfill(
        pg_platform_env, tmp_path, ui_backfill_params(month, None)
    )
    with instance:
        assert backfill.status.value == "COMPLETED_FAILED"
        # Both assets in each run, as one step: the range split by the default policy.
        assert sorted(days_of(record.dagster_run.tags) for record in records) == [
            month[:30],
            month[30:],
        ]
        assert_poison_day_alone_withheld(pg_platform_env, instance)
    engine = engine_from(pg_platform_env)
    for day in month[5:]:
        expected_orders, expected_revenue = expected_tables_from_landing(
            pg_platform_env["JOBS_PLATFORM_LANDING"], day
        )
        assert declared_rows(engine, orders_table, orders_of(day)) == expected_orders, day
        where = revenue_of_day(daily_revenue_table, day)
        assert declared_rows(engine, daily_revenue_table, where) == expected_revenue, day


def days_of(run_tags: dict[str, str]) -> list[str]:
    """The partitions a run of a daily backfill covers, from its range (or partition) tags."""
    if "dagster/partition" in run_tags:
        return [run_tags["dagster/partition"]]
    span = dg.PartitionKeyRange(
        run_tags["dagster/asset_partition_range_start"],
        run_tags["dagster/asset_partition_range_end"],
    )
    return daily_partitions.get_partition_keys_in_range(span)


@pytest.mark.slow
def test_a_backfill_from_the_job_page_withholds_only_the_poison_days_revenue(
    pg_platform_env, tmp_path
):
    """ "Materialize all…" on Jobs → orders_backfill: a *job* backfill over the range."""
    from jobs_platform_tests.test_isolation import DAYS, assert_poison_day_alone_withheld

    seed_with_poison(pg_platform_env)
    params = {
        "selector": {
            "partitionSetName": "orders_backfill_partition_set",
            "repositorySelector": {
                "repositoryLocationName": "orders_example.definitions",
                "repositoryName": "__repository__",
            },
        },
        "assetSelection": [{"path": ["orders"]}, {"path": ["daily_revenue"]}],
        "partitionNames": DAYS,
        "fromFailure": False,
        "tags": [],
    }
    backfill, records, instance = ui_backfill(pg_platform_env, tmp_path, params)
    with instance:
        assert backfill.status.value == "COMPLETED_FAILED"
        assert [record.dagster_run.job_name for record in records] == ["orders_backfill"]
        assert_poison_day_alone_withheld(pg_platform_env, instance)


def seed_with_poison(env) -> None:
    from jobs_platform_tests.test_isolation import seed_with_poison as seed

    seed(env)
