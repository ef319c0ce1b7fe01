"""`abandoned_run_sensor`: fail runs whose worker died, so retries and backfills carry on.

When the run worker process itself dies, Dagster leaves the run STARTED (the default run
launcher cannot health-check workers). The warehouse knows better: the run's attempt
stopped renewing its lease. This sensor records such attempts as crashes and reports
their runs failed through the instance, within about lease TTL + grace + tick interval.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import dagster as dg

from jobs_platform.engine.warehouse import ready_store
from jobs_platform.orchestration.naming import BARE, FrameworkNames
from jobs_platform.orchestration.selections import served_backfills
from jobs_platform.orchestration.tags import PARTITION_RANGE_START_TAG, PARTITION_TAG

TICK_SECONDS = 30
# How long a crashed step's run worker gets to retry the step itself, in lease TTLs.
GRACE_LEASES = 1.0


def fail_abandoned_runs(
    instance: dg.DagsterInstance, settings, assets: Sequence[str] | None = None
) -> list[str]:
    """Record abandoned attempts (at `assets` if given: a code location's backfills) as
    crashes and fail their dead runs; returns the run ids failed."""
    store = ready_store(settings.database_url)
    with store.begin() as connection:
        store.recovery.record_abandoned_attempts_everywhere(connection, assets=assets)
    started = instance.get_runs(
        filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]), limit=500
    )
    candidates = [
        run.run_id
        for run in started
        if PARTITION_TAG in run.tags or PARTITION_RANGE_START_TAG in run.tags
    ]
    with store.connect() as connection:
        dead = store.recovery.runs_whose_worker_died(
            connection,
            candidates,
            grace_seconds=settings.lease_seconds * GRACE_LEASES,
            assets=assets,
        )
    failed = []
    for run in started:
        if run.run_id in dead:
            instance.report_run_failed(
                run,
                message="jobs_platform: the run's worker died mid-partition (its lease expired "
                "without a heartbeat); the attempt is recorded as a crash",
            )
            failed.append(run.run_id)
    return failed


@functools.cache
def abandoned_run_sensor_named(names: FrameworkNames = BARE) -> dg.SensorDefinition:
    """The abandoned-run sensor under one code location's names; it rescues the attempts
    and runs of the location's own backfills."""

    @dg.sensor(
        name=names.definition("abandoned_run_sensor"),
        minimum_interval_seconds=TICK_SECONDS,
        required_resource_keys={"jobs_platform"},
        # On by default: a dead run worker must never leave a backfill hanging.
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Fails runs of this code location's backfills whose worker died "
        "mid-partition (lease expired, no heartbeat).",
    )
    def abandoned_run_sensor(context: dg.SensorEvaluationContext):
        backfills = served_backfills(context.repository_def)
        if not backfills:
            return dg.SkipReason("this code location serves no backfill")
        settings = context.resources.jobs_platform.settings()
        failed = fail_abandoned_runs(context.instance, settings, backfills)
        if failed:
            context.log.warning("failed %d abandoned run(s): %s", len(failed), ", ".join(failed))
            return dg.SkipReason(f"failed abandoned runs: {', '.join(failed)}")
        return dg.SkipReason("no abandoned runs")

    return abandoned_run_sensor


abandoned_run_sensor = abandoned_run_sensor_named(BARE)
