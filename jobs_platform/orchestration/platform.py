"""`platform_definitions`: everything the framework needs around a code location's backfills."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from jobs_platform.orchestration.alerting import AlertsResource
from jobs_platform.orchestration.backfill_asset import RESOURCE_KEY
from jobs_platform.orchestration.chains import chain_backfills
from jobs_platform.orchestration.dead_letter import dead_letter, dead_letter_sensor
from jobs_platform.orchestration.executors import platform_executor
from jobs_platform.orchestration.health import platform_health_asset, platform_health_schedule
from jobs_platform.orchestration.outbox import backfill_request_sensor, outbox_health
from jobs_platform.orchestration.quarantine_checks import no_quarantined_partitions_checks
from jobs_platform.orchestration.recovery import abandoned_run_sensor
from jobs_platform.orchestration.requeue import requeue_dead_letter, requeue_sensor
from jobs_platform.orchestration.resources import JobsPlatformResource


def platform_definitions(backfills: Sequence[dg.AssetsDefinition]) -> dg.Definitions:
    """The framework around `backfills`, to merge with the code location's own definitions.

    The backfills themselves (those that read one another partition for partition run as
    one step: `chain_backfills`); the dead-letter asset and its sensor (alerts); the
    requeue job and sensor; the outbox sensor and its health asset; the abandoned-run
    sensor; `platform_health`, its schedule and a no-quarantined-partitions check per
    backfill; the framework's resources and the executor `JOBS_PLATFORM_EXECUTOR` names.

        defs = dg.Definitions.merge(
            platform_definitions([acme_events]),
            dg.Definitions(jobs=[...], schedules=[...], resources={...}),
        )
    """
    backfills = list(backfills)
    quarantine_checks = no_quarantined_partitions_checks(backfills)
    return dg.Definitions(
        assets=[
            *chain_backfills(backfills),
            dead_letter,
            outbox_health,
            platform_health_asset(backfills),
        ],
        asset_checks=quarantine_checks,
        jobs=[requeue_dead_letter],
        schedules=[platform_health_schedule(quarantine_checks)],
        sensors=[abandoned_run_sensor, dead_letter_sensor, requeue_sensor, backfill_request_sensor],
        resources={RESOURCE_KEY: JobsPlatformResource(), "alerts": AlertsResource()},
        # JOBS_PLATFORM_EXECUTOR, read as the code location loads: every job and asset run
        # of the location then runs on it (multiprocess, in_process or Celery workers).
        executor=platform_executor(),
    )
