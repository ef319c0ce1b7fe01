"""The shape of a sensor that launches runs of the code location's backfills."""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform.orchestration.selections import BACKFILL_ASSETS

Tick = Callable[[dg.SensorEvaluationContext, JobsPlatformResource], dg.SensorResult]


def backfill_launching_sensor(
    name: str, minimum_interval_seconds: int, description: str, tick: Tick
) -> dg.SensorDefinition:
    """A sensor over every backfill asset of the code location whose evaluation is
    `tick(context, jobs_platform)`.

    On by default: a backfill requested by application code (the outbox) or a partition
    requeued from the UI must launch, under `dagster dev` too, without anyone first finding
    and starting a sensor.
    """

    @dg.sensor(
        name=name,
        asset_selection=BACKFILL_ASSETS,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=description,
    )
    def launching_sensor(
        context: dg.SensorEvaluationContext, jobs_platform: JobsPlatformResource
    ) -> dg.SensorResult:
        return tick(context, jobs_platform)

    return launching_sensor
