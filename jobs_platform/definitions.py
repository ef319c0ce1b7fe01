"""The code location: assembles what the example and the framework define."""

from __future__ import annotations

import dagster as dg

from jobs_platform.examples.orders.assets import daily_revenue, orders, orders_backfill
from jobs_platform.orchestration.resources import JobsPlatformResource

defs = dg.Definitions(
    assets=[orders, daily_revenue],
    jobs=[orders_backfill],
    resources={"jobs_platform": JobsPlatformResource()},
)
