"""The bundled location's `orders_backfill`, on the framework's Celery executor with a short
stop grace: a location configures its own executor through `platform_definitions(executor=…)`.

The executor's config is the one `JOBS_PLATFORM_EXECUTOR=celery` gives every location
(`celery_executor_config`: broker and backend by variable, the framework's Celery settings,
the result deadline); only `stop_grace_seconds` differs, so that a test of a terminated run
waits that grace instead of `STOP_GRACE_SECONDS` (30 s). That test's run process loads
it with `-m`; the test imports it only to compare its executor with the bundled one's.
"""

from __future__ import annotations

import os

import dagster as dg

from jobs_platform import platform_definitions
from jobs_platform.orchestration.celery_executor import bounded_celery_executor
from jobs_platform.orchestration.executors import celery_executor_config
from jobs_platform.settings import Settings
from orders_example.orders.assets import daily_revenue, orders, orders_backfill
from orders_example.orders.resources import LANDING_RESOURCE_KEY, LandingZone

# Long enough to be told apart from stopping at once (a run that did not wait for the
# grace stops within about a second of the SIGTERM), short enough to cost little. Whole
# seconds: the test also reads the wait off the run's log, whose clock shows seconds.
SHORT_STOP_GRACE_SECONDS = 4.0


def short_grace_celery_executor() -> dg.ExecutorDefinition:
    """`platform_executor()` under `JOBS_PLATFORM_EXECUTOR=celery`, with the short grace."""
    config = celery_executor_config(Settings.from_env(), lambda name: bool(os.environ.get(name)))
    return bounded_celery_executor.configured(
        {**config, "stop_grace_seconds": SHORT_STOP_GRACE_SECONDS}, name="celery"
    )


defs = dg.Definitions.merge(
    platform_definitions([orders, daily_revenue], executor=short_grace_celery_executor()),
    dg.Definitions(jobs=[orders_backfill], resources={LANDING_RESOURCE_KEY: LandingZone()}),
)
