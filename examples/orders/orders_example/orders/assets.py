"""The orders backfill: landing JSONL → `orders` → `daily_revenue`, one day per partition.

Why a re-run is safe: both assets only upsert by natural key (`order_id`; `day` and
`currency`), `daily_revenue` is recomputed from `orders` rather than incremented, and rows
of a day that left the input are swept when the day finalizes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import dagster as dg
import pandas as pd
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset
from orders_example.orders.landing import input_fingerprint, landing_file, read_order_chunks
from orders_example.orders.resources import LandingZone
from orders_example.orders.tables import daily_revenue_table, orders_table

daily_partitions = dg.DailyPartitionsDefinition(start_date="2024-01-01")


def _day_bounds(partition: str) -> tuple[dt.datetime, dt.datetime]:
    start = dt.datetime.fromisoformat(partition).replace(tzinfo=dt.UTC)
    return start, start + dt.timedelta(days=1)


def orders_of_day(table: sa.Table, partition: str) -> sa.ColumnElement[bool]:
    start, end = _day_bounds(partition)
    return sa.and_(table.c.ordered_at >= start, table.c.ordered_at < end)


def revenue_of_day(table: sa.Table, partition: str) -> sa.ColumnElement[bool]:
    return table.c.day == dt.date.fromisoformat(partition)


def _orders_file_fingerprint(source: PartitionInput, landing: LandingZone) -> str:
    return input_fingerprint(landing_file(landing.resolved_root(), source.partition_key))


@backfill_asset(
    table=orders_table,
    partitions_def=daily_partitions,
    partition_scope=orders_of_day,
    fingerprint=_orders_file_fingerprint,
)
def orders(source: PartitionInput, landing: LandingZone) -> Iterator[pd.DataFrame]:
    """Orders of one day from the landing zone, validated line by line."""
    yield from orders_of_landing_day(source, landing)


def orders_of_landing_day(source: PartitionInput, landing: LandingZone) -> Iterator[pd.DataFrame]:
    path = landing_file(landing.resolved_root(), source.partition_key)
    # Under `bad_rows=RejectRows(...)` (a user's backfill of these files, docs/bad-rows.md)
    # an invalid line is rejected; here it stops the day.
    reject = source.reject if source.rejects_rows else None
    yield from read_order_chunks(path, source.partition_key, source.chunk_rows, reject=reject)


@backfill_asset(
    table=daily_revenue_table,
    partitions_def=daily_partitions,
    partition_scope=revenue_of_day,
    # Reads orders of the same day: in the code location both run as one step (a chain,
    # `platform_definitions`), each day's revenue after its orders, and a poison day of
    # orders withholds only its own revenue, however the run was launched.
    deps=["orders"],
)
def daily_revenue(source: PartitionInput) -> Iterator[pd.DataFrame]:
    """Paid revenue and order count per currency for one day, recomputed from `orders`."""
    yield from revenue_of_orders_day(source)


def revenue_of_orders_day(source: PartitionInput) -> Iterator[pd.DataFrame]:
    start, end = _day_bounds(source.partition_key)
    query = (
        sa.select(
            orders_table.c.currency,
            sa.func.sum(orders_table.c.amount_cents).label("revenue_cents"),
            sa.func.count().label("order_count"),
        )
        .where(
            orders_table.c.status == "paid",
            orders_table.c.ordered_at >= start,
            orders_table.c.ordered_at < end,
        )
        .group_by(orders_table.c.currency)
        .order_by(orders_table.c.currency)
    )
    with source.warehouse.connect() as connection:
        rows = connection.execute(query).all()
    frame = pd.DataFrame(
        {
            "day": [start.date()] * len(rows),
            "currency": [row.currency for row in rows],
            "revenue_cents": [int(row.revenue_cents) for row in rows],
            "order_count": [int(row.order_count) for row in rows],
        }
    )
    if not frame.empty:
        yield frame


orders_backfill = dg.define_asset_job(
    "orders_backfill",
    # Without the asset checks: each would add a step (a process) to every partition's
    # run. The no_quarantined_partitions checks run with platform_health instead.
    selection=dg.AssetSelection.assets(orders, daily_revenue).without_checks(),
    description="Backfill orders and their daily revenue; each day is its own partition "
    "(a poison day withholds only its own revenue), up to 30 days per run.",
)

# The same asset serves scheduled runs and historical backfills: each day, shortly after
# midnight UTC, run yesterday's partition (Dagster targets the last complete day).
orders_daily_schedule = dg.build_schedule_from_partitioned_job(
    orders_backfill,
    name="orders_daily_schedule",
    hour_of_day=0,
    minute_of_hour=30,
    description="Runs yesterday's partition of orders_backfill every day at 00:30 UTC.",
)
