"""A ranged run processes many partitions, each its own unit of checkpoint and quarantine."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset
from jobs_platform.orchestration.tags import PARTITION_RANGE_END_TAG, PARTITION_RANGE_START_TAG
from jobs_platform.store.schema import quarantine
from jobs_platform_tests.environments import engine_from
from orders_example.orders.assets import daily_partitions, orders_of_day
from orders_example.orders.landing import landing_file, read_order_chunks
from orders_example.orders.resources import LandingZone
from orders_example.orders.seed import seed_orders
from orders_example.orders.tables import orders_table

FIRST, POISON, LAST = dt.date(2024, 7, 1), dt.date(2024, 7, 2), dt.date(2024, 7, 3)

ranged_metadata = sa.MetaData()
ranged_orders_table = orders_table.to_metadata(ranged_metadata, name="ranged_orders")


@backfill_asset(
    table=ranged_orders_table,
    partitions_def=daily_partitions,
    partition_scope=orders_of_day,
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def ranged_orders(source: PartitionInput, landing: LandingZone):
    """Orders of a day, backfilled many days per run (a test-only asset)."""
    path = landing_file(landing.resolved_root(), source.partition_key)
    yield from read_order_chunks(path, source.partition_key, source.chunk_rows)


def materialize_range(first: dt.date, last: dt.date) -> dg.ExecuteInProcessResult:
    from orders_example.definitions import defs

    return dg.materialize(
        [ranged_orders],
        instance=dg.DagsterInstance.get(),
        resources=dict(defs.resources),
        tags={
            PARTITION_RANGE_START_TAG: first.isoformat(),
            PARTITION_RANGE_END_TAG: last.isoformat(),
        },
        raise_on_error=False,
    )


def rows_per_day(env) -> dict[str, int]:
    day = sa.func.substr(sa.cast(ranged_orders_table.c.ordered_at, sa.String), 1, 10)
    with engine_from(env).connect() as connection:
        return dict(
            connection.execute(sa.select(day, sa.func.count()).group_by(day).order_by(day)).all()
        )


def test_range_with_a_poison_partition_commits_the_others_and_quarantines_only_it(platform_env):
    seed_orders(
        platform_env["JOBS_PLATFORM_LANDING"], FIRST, LAST, orders_per_day=30, poison_days=[POISON]
    )

    result = materialize_range(FIRST, LAST)

    assert not result.success
    counts = rows_per_day(platform_env)
    assert counts[FIRST.isoformat()] == 30 and counts[LAST.isoformat()] == 30
    with engine_from(platform_env).connect() as connection:
        entries = connection.execute(sa.select(quarantine.c.asset, quarantine.c.partition)).all()
    assert entries == [("ranged_orders", POISON.isoformat())]
    records = (
        dg.DagsterInstance.get()
        .fetch_materializations(dg.AssetKey("ranged_orders"), limit=10)
        .records
    )
    materialized = {record.asset_materialization.partition for record in records}
    assert materialized == {FIRST.isoformat(), LAST.isoformat()}
    failure = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE)
    assert POISON.isoformat() in failure.event_specific_data.error.message


def test_clean_range_materializes_every_partition_in_one_run(platform_env):
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], FIRST, LAST, orders_per_day=30)

    result = materialize_range(FIRST, LAST)

    assert result.success
    assert rows_per_day(platform_env) == {d.isoformat(): 30 for d in (FIRST, POISON, LAST)}
    (event,) = result.get_asset_materialization_events()[:1]
    assert event.materialization.metadata["partitions"].value == 3
