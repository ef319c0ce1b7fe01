"""A code location whose backfills run a whole range in one run (`BackfillPolicy.single_run`).

`dagster asset materialize --partition-range` accepts only such assets. The same orders
and revenue as the bundled example, declared by a user's code location of its own.
"""

import dagster as dg

from jobs_platform import backfill_asset
from jobs_platform.examples.orders import assets as example
from jobs_platform.examples.orders.resources import LandingZone
from jobs_platform.examples.orders.tables import daily_revenue_table, orders_table
from jobs_platform.orchestration.platform import platform_definitions


@backfill_asset(
    table=orders_table,
    partitions_def=example.daily_partitions,
    partition_scope=example.orders_of_day,
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def orders(source, landing: LandingZone):
    """Orders of one day from the landing zone."""
    yield from example.orders_of_landing_day(source, landing)


@backfill_asset(
    table=daily_revenue_table,
    partitions_def=example.daily_partitions,
    partition_scope=example.revenue_of_day,
    deps=["orders"],
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def daily_revenue(source):
    """Paid revenue per currency and day, recomputed from `orders`."""
    yield from example.revenue_of_orders_day(source)


defs = dg.Definitions.merge(
    platform_definitions([orders, daily_revenue]),
    dg.Definitions(resources={"landing": LandingZone()}),
)
