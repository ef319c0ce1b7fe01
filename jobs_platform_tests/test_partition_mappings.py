"""A backfill reading one partitioned differently waits for every partition its mapping names.

An hourly backfill and a daily one computed from it (Dagster's default mapping for the
pair: a day reads its 24 hours); a static per-tenant backfill and a (day x tenant)
multi-partitioned one reading it through a `MultiToSingleDimensionPartitionMapping`. A day
with a poison hour, or with hours never run, is blocked (not attempted, nothing recorded
or written); once the hour is fixed and requeued, the requeue sensor launches the day,
which then equals a reference computed here from the input.
"""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pandas as pd
import sqlalchemy as sa

from jobs_platform import PartitionInput, TerminalError, backfill_asset
from jobs_platform.dead_letter.entries import DeadLetter, list_entries
from jobs_platform.dead_letter.requeue import requeue_sensor
from jobs_platform.orchestration.tags import (
    PARTITION_RANGE_END_TAG,
    PARTITION_RANGE_START_TAG,
    downstream_run_key,
)
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.schema import create_user_tables
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.rows import attempts_of

DAY = "2024-03-02"
POISON_HOUR = f"{DAY}-05:00"
EVENTS_PER_HOUR = 10
poison_hours: set[str] = set()

mapped = sa.MetaData()
events_table = sa.Table(
    "mapped_events",
    mapped,
    sa.Column("event_id", sa.BigInteger, primary_key=True),
    sa.Column("hour", sa.String(16), nullable=False),
    sa.Column("amount_cents", sa.BigInteger, nullable=False),
)
daily_table = sa.Table(
    "mapped_events_daily",
    mapped,
    sa.Column("day", sa.String(10), primary_key=True),
    sa.Column("events", sa.BigInteger, nullable=False),
    sa.Column("amount_cents", sa.BigInteger, nullable=False),
)
hourly = dg.HourlyPartitionsDefinition(start_date="2024-03-01-00:00")
daily = dg.DailyPartitionsDefinition(start_date="2024-03-01")


def hour_events(hour: str) -> list[dict]:
    """The hour's input: EVENTS_PER_HOUR events with ids unique across hours."""
    start = dt.datetime.strptime(hour, "%Y-%m-%d-%H:%M")
    first = int(start.timestamp()) // 3600 * 100
    return [
        {"event_id": first + n, "hour": hour, "amount_cents": 100 + n + start.hour}
        for n in range(EVENTS_PER_HOUR)
    ]


@backfill_asset(
    table=events_table,
    partitions_def=hourly,
    partition_scope=lambda table, hour: table.c.hour == hour,
    key_prefix=["mapped"],
)
def events(source: PartitionInput):
    """An hour of events (test-only); a poison hour fails terminally."""
    if source.partition_key in poison_hours:
        raise TerminalError(f"malformed input for {source.partition_key}")
    yield pd.DataFrame(hour_events(source.partition_key))


@backfill_asset(
    table=daily_table,
    partitions_def=daily,
    partition_scope=lambda table, day: table.c.day == day,
    deps=[events],
    key_prefix=["mapped"],
)
def events_daily(source: PartitionInput):
    """A day's totals, computed from the hourly backfill's rows (test-only)."""
    hours = events_table.c.hour
    with source.warehouse.connect() as connection:
        count, total = connection.execute(
            sa.select(
                sa.func.count(), sa.func.coalesce(sa.func.sum(events_table.c.amount_cents), 0)
            ).where(sa.func.substr(hours, 1, 10) == source.partition_key)
        ).one()
    yield pd.DataFrame([{"day": source.partition_key, "events": count, "amount_cents": total}])


def day_reference(day: str) -> list[tuple]:
    rows = [e for h in range(24) for e in hour_events(f"{day}-{h:02d}:00")]
    return [(day, len(rows), sum(e["amount_cents"] for e in rows))]


def location() -> dg.Definitions:
    from orders_example.definitions import defs

    return dg.Definitions(
        assets=[events, events_daily], sensors=[requeue_sensor], resources=dict(defs.resources)
    )


def run(assets_key: dg.AssetKey, **partition) -> dg.ExecuteInProcessResult:
    job = location().resolve_implicit_global_asset_job_def()
    return job.execute_in_process(
        instance=dg.DagsterInstance.get(),
        asset_selection=[assets_key],
        raise_on_error=False,
        **partition,
    )


def run_hours(first: str, last: str) -> dg.ExecuteInProcessResult:
    return run(events.key, tags={PARTITION_RANGE_START_TAG: first, PARTITION_RANGE_END_TAG: last})


def daily_rows(env) -> list[tuple]:
    with engine_from(env).connect() as connection:
        return [tuple(row) for row in connection.execute(sa.select(daily_table))]


def test_a_day_with_a_poison_hour_is_blocked_then_relaunched_by_the_hours_requeue(
    pg_platform_env,
):
    engine = engine_from(pg_platform_env)
    create_user_tables(engine, events_table, daily_table)
    poison_hours.add(POISON_HOUR)
    try:
        assert not run_hours(f"{DAY}-00:00", f"{DAY}-23:00").success
    finally:
        poison_hours.clear()
    assert [e.asset for e in list_entries(engine.connect())] == ["mapped/events"]

    blocked = run(events_daily.key, partition_key=DAY)
    assert not blocked.success
    assert daily_rows(pg_platform_env) == []  # never computed from 23 of 24 hours
    assert attempts_of(engine, "mapped/events_daily", DAY) == []  # not attempted

    # The hour is fixed and requeued; its requeue run succeeds.
    with engine.begin() as connection:
        entry = DeadLetter(DATABASE_CLOCK).requeue_partition(
            connection, "mapped/events", POISON_HOUR
        )
    assert run(events.key, partition_key=POISON_HOUR).success

    # The requeue sensor launches the day that reads the fixed hour, once.
    defs = location()
    with dg.build_sensor_context(
        instance=dg.DagsterInstance.get(), definitions=defs, resources=dict(defs.resources)
    ) as context:
        result = requeue_sensor(context)
    requests = [r for r in result.run_requests if r.partition_key == DAY]
    assert [r.run_key for r in requests] == [
        downstream_run_key(entry.id, "mapped/events_daily", DAY)
    ]
    assert requests[0].asset_selection == [events_daily.key]

    assert run(events_daily.key, partition_key=DAY).success
    assert daily_rows(pg_platform_env) == day_reference(DAY)


def test_a_day_whose_hours_never_ran_is_blocked_not_computed_from_nothing(pg_platform_env):
    engine = engine_from(pg_platform_env)
    create_user_tables(engine, events_table, daily_table)
    assert not run(events_daily.key, partition_key="2024-03-03").success
    assert daily_rows(pg_platform_env) == []
    assert attempts_of(engine, "mapped/events_daily", "2024-03-03") == []


def test_a_day_runs_once_all_its_hours_are_done(pg_platform_env):
    engine = engine_from(pg_platform_env)
    create_user_tables(engine, events_table, daily_table)
    assert run_hours(f"{DAY}-00:00", f"{DAY}-23:00").success
    assert run(events_daily.key, partition_key=DAY).success
    assert daily_rows(pg_platform_env) == day_reference(DAY)


tenants = dg.StaticPartitionsDefinition(["north", "south"])
tenants_table = sa.Table(
    "mapped_tenants",
    mapped,
    sa.Column("tenant", sa.String(16), primary_key=True),
    sa.Column("rate", sa.BigInteger, nullable=False),
)
tenant_days_table = sa.Table(
    "mapped_tenant_days",
    mapped,
    sa.Column("day", sa.String(10), primary_key=True),
    sa.Column("tenant", sa.String(16), primary_key=True),
    sa.Column("charge", sa.BigInteger, nullable=False),
)
poison_tenants: set[str] = set()


@backfill_asset(
    table=tenants_table,
    partitions_def=tenants,
    partition_scope=lambda table, tenant: table.c.tenant == tenant,
)
def mapped_tenants(source: PartitionInput):
    """A tenant's rate (test-only); a poison tenant fails terminally."""
    if source.partition_key in poison_tenants:
        raise TerminalError(f"bad tenant file {source.partition_key}")
    yield pd.DataFrame([{"tenant": source.partition_key, "rate": len(source.partition_key)}])


@backfill_asset(
    table=tenant_days_table,
    partitions_def=dg.MultiPartitionsDefinition({"day": daily, "tenant": tenants}),
    partition_scope=lambda table, key: sa.and_(
        table.c.day == key.split("|")[0], table.c.tenant == key.split("|")[1]
    ),
    deps=[
        dg.AssetDep(
            mapped_tenants,
            partition_mapping=dg.MultiToSingleDimensionPartitionMapping(
                partition_dimension_name="tenant"
            ),
        )
    ],
)
def mapped_tenant_days(source: PartitionInput):
    """A tenant's charge for a day, from its rate (test-only)."""
    day, tenant = source.partition_key.split("|")
    with source.warehouse.connect() as connection:
        rate = connection.execute(
            sa.select(tenants_table.c.rate).where(tenants_table.c.tenant == tenant)
        ).scalar_one()
    yield pd.DataFrame([{"day": day, "tenant": tenant, "charge": rate * 10}])


def test_a_multi_partition_reading_a_static_one_waits_for_its_own_tenant_only(pg_platform_env):
    engine = engine_from(pg_platform_env)
    create_user_tables(engine, tenants_table, tenant_days_table)
    from orders_example.definitions import defs

    location = dg.Definitions(
        assets=[mapped_tenants, mapped_tenant_days], resources=dict(defs.resources)
    )
    job = location.resolve_implicit_global_asset_job_def()

    def run_one(key: dg.AssetKey, partition: str) -> bool:
        return job.execute_in_process(
            instance=dg.DagsterInstance.get(),
            asset_selection=[key],
            partition_key=partition,
            raise_on_error=False,
        ).success

    poison_tenants.add("south")
    try:
        assert run_one(mapped_tenants.key, "north")
        assert not run_one(mapped_tenants.key, "south")
    finally:
        poison_tenants.clear()
    assert run_one(mapped_tenant_days.key, f"{DAY}|north")
    assert not run_one(mapped_tenant_days.key, f"{DAY}|south")  # blocked on its tenant
    assert attempts_of(engine, "mapped_tenant_days", f"{DAY}|south") == []
    with engine.connect() as connection:
        rows = [tuple(r) for r in connection.execute(sa.select(tenant_days_table))]
    assert rows == [(DAY, "north", 50)]
