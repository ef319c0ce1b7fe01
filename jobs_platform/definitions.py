"""The bundled code location: the examples' backfills, jobs and schedule, and the framework."""

from __future__ import annotations

import dagster as dg

from jobs_platform.examples.customers.assets import customer_order_history
from jobs_platform.examples.orders.assets import (
    daily_revenue,
    orders,
    orders_backfill,
    orders_daily_schedule,
)
from jobs_platform.examples.orders.resources import LANDING_RESOURCE_KEY, LandingZone
from jobs_platform.orchestration.platform import platform_definitions

defs = dg.Definitions.merge(
    platform_definitions([orders, daily_revenue, customer_order_history]),
    dg.Definitions(
        jobs=[orders_backfill],
        schedules=[orders_daily_schedule],
        # The examples' input: JOBS_PLATFORM_LANDING (or .jobs_platform/landing) unless set.
        resources={LANDING_RESOURCE_KEY: LandingZone()},
    ),
)
