"""The example's code location: its backfills, jobs and schedule, and the framework's."""

from __future__ import annotations

import dagster as dg

from jobs_platform import platform_definitions
from orders_example.customers.assets import customer_order_history
from orders_example.orders.assets import (
    daily_revenue,
    orders,
    orders_backfill,
    orders_daily_schedule,
)
from orders_example.orders.resources import LANDING_RESOURCE_KEY, LandingZone

defs = dg.Definitions.merge(
    platform_definitions([orders, daily_revenue, customer_order_history]),
    dg.Definitions(
        jobs=[orders_backfill],
        schedules=[orders_daily_schedule],
        # The examples' input: JOBS_PLATFORM_LANDING (or .jobs_platform/landing) unless set.
        resources={LANDING_RESOURCE_KEY: LandingZone()},
    ),
)
