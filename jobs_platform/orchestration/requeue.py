"""Requeue from the UI: `requeue_dead_letter` releases an entry, `requeue_sensor` relaunches it.

The sensor launches what `jobs-platform dead-letter requeue` launches: the partition of
the asset and of the backfills it feeds, under the run key `requeue-<entry id>`.
Launches are at-least-once: until the requeued partition records an attempt, each tick
asks Dagster for a run with that key and requests one when there is none, so a tick whose
run request never reached Dagster, or a CLI launch that died before creating its run, is
redone. A repeat is harmless: the daemon skips a run key the sensor has used.

Once a requeued partition succeeded, the partitions of backfills reading it through a
different partitioning (the day of a fixed hour, the month of a fixed day) are launched
too, each under its own run key (`downstream_run_key`), so a fix brings them up to date.

Both act on the code location's own backfills only: another location sharing the
warehouse releases and relaunches its own.
"""

import datetime as dt
import functools
from collections.abc import Sequence

import dagster as dg

from jobs_platform.orchestration.naming import BARE, FrameworkNames
from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform.orchestration.run_keys import launched_runs
from jobs_platform.orchestration.selections import (
    BACKFILL_ASSETS,
    served_backfills,
    with_downstream_backfills,
)
from jobs_platform.orchestration.tags import PARTITION_TAG, downstream_run_key, requeue_run_key
from jobs_platform.orchestration.upstream import downstream_partitions
from jobs_platform.store import quarantine as quarantine_store

REQUEUE_TICK_SECONDS = 15
REQUEUES_PER_TICK = 100
# A sensor with no cursor yet (new, or reset) relaunches what reads partitions resolved
# this recently, not every resolution in the warehouse's history.
FIRST_TICK_LOOKBACK = dt.timedelta(days=1)


@functools.cache
def requeue_sensor_named(names: FrameworkNames = BARE) -> dg.SensorDefinition:
    """The requeue sensor under one code location's names."""

    @dg.sensor(
        name=names.definition("requeue_sensor"),
        asset_selection=BACKFILL_ASSETS,
        minimum_interval_seconds=REQUEUE_TICK_SECONDS,
        # On by default: a requeue from the UI must relaunch the partition under `dagster
        # dev` without anyone first finding and starting a sensor.
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Launches a run for each requeued partition of this code location's "
        "backfills that no one has launched yet.",
    )
    def requeue_sensor(
        context: dg.SensorEvaluationContext, jobs_platform: JobsPlatformResource
    ) -> dg.SensorResult:
        return _requeue_tick(context, jobs_platform)

    return requeue_sensor


def _requeue_tick(
    context: dg.SensorEvaluationContext, jobs_platform: JobsPlatformResource
) -> dg.SensorResult:
    repository = context.repository_def
    names = served_backfills(repository)
    if repository is None or not names:
        return dg.SensorResult(skip_reason="this code location serves no backfill")
    graph = repository.asset_graph
    engine = jobs_platform.ready_warehouse()
    since = (
        dt.datetime.fromisoformat(context.cursor)
        if context.cursor
        else dt.datetime.now(dt.UTC) - FIRST_TICK_LOOKBACK
    )
    with engine.connect() as connection:
        entries = quarantine_store.requeues_awaiting_run(connection, names, REQUEUES_PER_TICK)
        resolved = quarantine_store.resolved_since(connection, names, since, REQUEUES_PER_TICK)
    found = [entry.id for entry in entries if requeue_run(context.instance, entry) is not None]
    if found:
        with engine.begin() as connection:
            # The next ticks leave these alone while their runs get to a first attempt.
            quarantine_store.mark_requeue_launched(connection, found)
    requests = []
    for entry in entries:
        if entry.id in found:
            continue
        where = f"requeued {entry.asset}/{entry.partition} (entry {entry.id})"
        if entry.requeue_launched_at is None:
            context.log.info(f"{where}: launching")
        else:
            context.log.warning(
                f"{where}: the launch started {entry.requeue_launched_at} never "
                "created its run; launching it again"
            )
        requests.append(
            dg.RunRequest(
                run_key=requeue_run_key(entry.id),
                partition_key=entry.partition,
                asset_selection=with_downstream_backfills(
                    graph, dg.AssetKey.from_user_string(entry.asset)
                ),
            )
        )
    requests += downstream_requests(graph, context.instance, resolved)
    cursor = resolved[-1].resolved_at.isoformat() if resolved else context.cursor
    return dg.SensorResult(
        run_requests=requests,
        cursor=cursor,
        skip_reason=None if requests else "no requeued partitions to launch",
    )


def downstream_requests(graph, instance: dg.DagsterInstance, entries) -> list[dg.RunRequest]:
    """Runs of the partitions that read resolved entries' partitions through a different
    partitioning, leaving out those already launched (by this sensor or the CLI)."""
    wanted: dict[str, dg.RunRequest] = {}
    for entry in entries:
        key = dg.AssetKey.from_user_string(entry.asset)
        if not graph.has(key):
            continue
        for child, partitions in downstream_partitions(
            graph, key, [entry.partition], instance
        ).items():
            for partition in partitions:
                run_key = downstream_run_key(entry.id, child.to_user_string(), partition)
                wanted[run_key] = dg.RunRequest(
                    run_key=run_key,
                    partition_key=partition,
                    asset_selection=with_downstream_backfills(graph, child),
                )
    launched = launched_runs(instance, list(wanted), {})
    return [request for run_key, request in wanted.items() if run_key not in launched]


def requeue_run(instance: dg.DagsterInstance, entry) -> dg.DagsterRun | None:
    """The launched run of a requeued entry (key `requeue-<entry id>`), if there is one."""
    run_key = requeue_run_key(entry.id)
    return launched_runs(instance, [run_key], {PARTITION_TAG: entry.partition}).get(run_key)


class RequeueConfig(dg.Config):
    """Which quarantined partition to release."""

    asset: str
    partition: str


def requeue_job(backfills: Sequence[dg.AssetKey], names: FrameworkNames = BARE) -> dg.JobDefinition:
    """`requeue_dead_letter`, which releases the quarantined partitions of `backfills` (a
    code location's) and refuses any other: that is another location's to release."""
    served = frozenset(backfill.to_user_string() for backfill in backfills)
    sensor_name = names.definition("requeue_sensor")

    @dg.op(name="requeue_partition")
    def requeue_partition_op(
        context: dg.OpExecutionContext, config: RequeueConfig, jobs_platform: JobsPlatformResource
    ) -> None:
        """Release the partition's quarantine entry; the requeue sensor then launches its run."""
        if config.asset not in served:
            raise dg.Failure(
                f"{config.asset!r} is no backfill of this code location (it serves "
                f"{', '.join(sorted(served)) or 'none'}): requeue it in the location that "
                "serves it; nothing was released",
                allow_retries=False,
            )
        engine = jobs_platform.ready_warehouse()
        try:
            with engine.begin() as connection:
                entry = quarantine_store.requeue_partition(
                    connection, config.asset, config.partition, by=quarantine_store.RequeuedBy.UI
                )
        except quarantine_store.UnknownEntry as error:
            raise dg.Failure(
                f"{error}; `jobs-platform dead-letter list` shows what is quarantined",
                allow_retries=False,
            ) from None
        context.log.info(
            f"released {config.asset}/{config.partition} (entry {entry.id}, {entry.attempts} "
            f"attempt(s)); its attempt count starts over and {sensor_name} launches its run"
        )

    @dg.job(
        name=names.definition("requeue_dead_letter"),
        description="Release a quarantined partition of this code location's backfills "
        f"(config: asset, partition); {sensor_name} then launches a run for it.",
    )
    def requeue_dead_letter() -> None:
        requeue_partition_op()

    return requeue_dead_letter


requeue_sensor = requeue_sensor_named(BARE)
