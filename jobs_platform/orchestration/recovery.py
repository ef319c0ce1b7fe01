"""`abandoned_run_sensor`: fail runs whose worker died, so retries and backfills carry on.

When the run worker process itself dies, Dagster leaves the run STARTED (the default run
launcher cannot health-check workers). The warehouse knows better: the run's attempt
stopped renewing its lease. This sensor records such attempts as crashes and reports
their runs failed through the instance, within about lease TTL + grace + tick interval.
"""

from __future__ import annotations

import dagster as dg

from jobs_platform.orchestration.tags import PARTITION_RANGE_START_TAG, PARTITION_TAG
from jobs_platform.store import recovery
from jobs_platform.store.migrate import ready_warehouse

TICK_SECONDS = 30
# How long a crashed step's run worker gets to retry the step itself, in lease TTLs.
GRACE_LEASES = 1.0


def fail_abandoned_runs(instance: dg.DagsterInstance, settings) -> list[str]:
    """Record abandoned attempts as crashes and fail their dead runs; returns run ids failed."""
    engine = ready_warehouse(settings.database_url)
    with engine.begin() as connection:
        recovery.record_abandoned_attempts_everywhere(connection)
    started = instance.get_runs(
        filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]), limit=500
    )
    candidates = [
        run.run_id
        for run in started
        if PARTITION_TAG in run.tags or PARTITION_RANGE_START_TAG in run.tags
    ]
    with engine.connect() as connection:
        dead = recovery.runs_whose_worker_died(
            connection, candidates, grace_seconds=settings.lease_seconds * GRACE_LEASES
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


@dg.sensor(
    name="abandoned_run_sensor",
    minimum_interval_seconds=TICK_SECONDS,
    required_resource_keys={"jobs_platform"},
    # On by default: a dead run worker must never leave a backfill hanging.
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Fails runs whose worker died mid-partition (lease expired, no heartbeat).",
)
def abandoned_run_sensor(context: dg.SensorEvaluationContext):
    settings = context.resources.jobs_platform.settings()
    failed = fail_abandoned_runs(context.instance, settings)
    if failed:
        context.log.warning("failed %d abandoned run(s): %s", len(failed), ", ".join(failed))
        return dg.SkipReason(f"failed abandoned runs: {', '.join(failed)}")
    return dg.SkipReason("no abandoned runs")
