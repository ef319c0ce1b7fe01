"""`platform_definitions`: everything the framework needs around a code location's backfills."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import dagster as dg

from jobs_platform.alerts.resource import ALERTS_RESOURCE_KEY, AlertsResource
from jobs_platform.dead_letter.asset import dead_letter_definitions
from jobs_platform.dead_letter.checks import no_quarantined_partitions_checks
from jobs_platform.dead_letter.redrive_sensor import redrive_sensor_named
from jobs_platform.dead_letter.requeue import requeue_job, requeue_sensor_named
from jobs_platform.orchestration.backfill_asset import RESOURCE_KEY
from jobs_platform.orchestration.chains import chain_backfills
from jobs_platform.orchestration.executors import platform_executor
from jobs_platform.orchestration.health import platform_health_asset, platform_health_schedule
from jobs_platform.orchestration.naming import FrameworkNames
from jobs_platform.orchestration.recovery import abandoned_run_sensor_named
from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform.orchestration.tags import BACKFILL_TAG
from jobs_platform.outbox.sensor import backfill_request_sensor_named, outbox_health_asset
from jobs_platform.steering.holds_sensor import holds_sensor_named

_Resource = TypeVar("_Resource", JobsPlatformResource, AlertsResource)


def platform_definitions(
    backfills: Sequence[dg.AssetsDefinition],
    *,
    jobs_platform: JobsPlatformResource | None = None,
    alerts: AlertsResource | None = None,
    executor: dg.ExecutorDefinition | None = None,
    location: str | None = None,
) -> dg.Definitions:
    """The framework around `backfills`, to merge with the code location's own definitions.

    The backfills themselves. Those that read one another partition for partition run as
    one step, a chain (`chain_backfills`): its op is named for them
    (`chain__orders__daily_revenue`), each one's run config goes under its own name in that
    op's (`ops: {chain__orders__daily_revenue: {config: {daily_revenue: {...}}}}`), and
    `backfill_chains(backfills)` says which they are. Then the dead-letter asset and its
    sensor (alerts); the requeue job and sensor; the outbox sensor and its health asset;
    the abandoned-run sensor; the redrive sensor (the dead letter heals itself); the holds
    sensor (a resumed backfill's held partitions, and those whose input became ready);
    `platform_health`, its schedule and a no-quarantined-partitions check per backfill;
    the framework's resources and the executor.

    The resources and the executor are yours to configure: `jobs_platform` (a
    `JobsPlatformResource`), `alerts` (an `AlertsResource`) and `executor` are what every
    step, sensor and `jobs-platform … -m` command of the location uses; left out, they
    come from the environment (`JOBS_PLATFORM_*`, the executor `JOBS_PLATFORM_EXECUTOR`
    names). `location` names the framework's own definitions when several code locations
    share a workspace: its assets' keys are prefixed by it (`acme/dead_letter`) and its
    sensors', jobs' and schedule's names too (`acme_dead_letter_sensor`); left out, they
    are bare (`dead_letter`, `dead_letter_sensor`).

        defs = dg.Definitions.merge(
            platform_definitions(
                [acme_events], alerts=AlertsResource(webhook_url=dg.EnvVar("ACME_HOOK"))
            ),
            dg.Definitions(jobs=[...], schedules=[...], resources={...}),
        )
    """
    return dg.Definitions.merge(
        dg.Definitions(assets=chain_backfills(list(backfills))),
        framework_definitions(
            backfills,
            jobs_platform=jobs_platform,
            alerts=alerts,
            executor=executor,
            location=location,
        ),
    )


def framework_definitions(
    backfills: Sequence[dg.AssetsDefinition],
    *,
    jobs_platform: JobsPlatformResource | None = None,
    alerts: AlertsResource | None = None,
    executor: dg.ExecutorDefinition | None = None,
    location: str | None = None,
) -> dg.Definitions:
    """What `platform_definitions(backfills)` adds around the backfills, without them.

    For a code location whose backfills are defined elsewhere: each backfill declared in
    YAML is a component of its own (`jobs_platform.component`), and the framework is added
    once around all of them. A backfill of such a location runs as its own step: only
    `platform_definitions` makes backfills that read one another into a chain.
    """
    names = FrameworkNames(location)
    backfills = list(backfills)
    backfill_keys = [
        spec.key
        for assets_def in backfills
        for spec in assets_def.specs
        if spec.tags.get(BACKFILL_TAG) == "true"
    ]
    dead_letter_checks = no_quarantined_partitions_checks(backfills)
    dead_letter, dead_letter_sensor = dead_letter_definitions(names)
    return dg.Definitions(
        assets=[
            dead_letter,
            outbox_health_asset(backfill_keys, names),
            platform_health_asset(backfills, names),
        ],
        asset_checks=dead_letter_checks,
        jobs=[requeue_job(backfill_keys, names)],
        schedules=[platform_health_schedule(dead_letter_checks, names)],
        sensors=[
            abandoned_run_sensor_named(names),
            dead_letter_sensor,
            redrive_sensor_named(names),
            requeue_sensor_named(names),
            backfill_request_sensor_named(names),
            holds_sensor_named(names, backfills),
        ],
        resources={
            RESOURCE_KEY: _checked(jobs_platform, JobsPlatformResource, "jobs_platform"),
            ALERTS_RESOURCE_KEY: _checked(alerts, AlertsResource, "alerts"),
        },
        # JOBS_PLATFORM_EXECUTOR, read as the code location loads, unless the location
        # names its own: every job and asset run of the location then runs on it
        # (multiprocess, in_process or Celery workers).
        executor=executor if executor is not None else platform_executor(),
    )


def _checked(given: _Resource | None, kind: type[_Resource], argument: str) -> _Resource:
    # The framework's steps and sensors call the resource's own methods: a look-alike
    # would fail in the first step that runs, far from the mistake.
    if given is None:
        return kind()
    if not isinstance(given, kind):
        raise TypeError(
            f"platform_definitions({argument}=...) takes a {kind.__name__}, got "
            f"{type(given).__name__}"
        )
    return given
