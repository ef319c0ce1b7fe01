"""The code location: assembles what the example and the framework define."""

from __future__ import annotations

import dagster as dg

from jobs_platform.examples.customers.assets import customer_order_history
from jobs_platform.examples.orders.assets import (
    daily_revenue,
    orders,
    orders_backfill,
    orders_daily_schedule,
)
from jobs_platform.orchestration.alerting import AlertsResource
from jobs_platform.orchestration.dead_letter import dead_letter, dead_letter_sensor
from jobs_platform.orchestration.health import platform_health_asset, platform_health_schedule
from jobs_platform.orchestration.outbox import backfill_request_sensor, outbox_health
from jobs_platform.orchestration.quarantine_checks import no_quarantined_partitions_checks
from jobs_platform.orchestration.recovery import abandoned_run_sensor
from jobs_platform.orchestration.requeue import requeue_dead_letter, requeue_sensor
from jobs_platform.orchestration.resources import JobsPlatformResource

backfills = [orders, daily_revenue, customer_order_history]
quarantine_checks = no_quarantined_partitions_checks(backfills)
platform_health = platform_health_asset(backfills)

defs = dg.Definitions(
    assets=[*backfills, dead_letter, outbox_health, platform_health],
    asset_checks=quarantine_checks,
    jobs=[orders_backfill, requeue_dead_letter],
    schedules=[orders_daily_schedule, platform_health_schedule(quarantine_checks)],
    sensors=[abandoned_run_sensor, dead_letter_sensor, requeue_sensor, backfill_request_sensor],
    resources={"jobs_platform": JobsPlatformResource(), "alerts": AlertsResource()},
)
