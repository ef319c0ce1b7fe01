"""Requeue from the UI: `requeue_dead_letter` releases entries, `requeue_sensor` relaunches them.

The sensor launches what `jobs-platform dead-letter requeue` launches: the partitions of
the asset and of the backfills it feeds, many entries of one asset as one run per
contiguous range of its partitions (`requeue_runs`, the rule both follow), so the
hundreds of entries a redrive releases become a handful of runs; a run of one entry has
the run key `requeue-<entry id>`. Launches are at-least-once: until a requeued partition
records an attempt, each tick asks Dagster for the run that names its entry and requests
one when there is none, so a tick whose run request never reached Dagster, or a CLI
launch that died before creating its run, is redone. A repeat is harmless: the daemon
skips a run key the sensor has used.

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

from jobs_platform.dead_letter_selection import Selection
from jobs_platform.orchestration.naming import BARE, FrameworkNames
from jobs_platform.orchestration.requeue_runs import requeue_runs, requeue_runs_found
from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform.orchestration.run_keys import launched_runs
from jobs_platform.orchestration.selections import (
    BACKFILL_ASSETS,
    served_backfills,
    with_downstream_backfills,
)
from jobs_platform.orchestration.tags import downstream_run_key
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
    found = list(requeue_runs_found(context.instance, entries))
    if found:
        with engine.begin() as connection:
            # The next ticks leave these alone while their runs get to a first attempt.
            quarantine_store.mark_requeue_launched(connection, found)
    unlaunched = [entry for entry in entries if entry.id not in found]
    for entry in unlaunched:
        if entry.requeue_launched_at is not None:
            context.log.warning(
                f"requeued {entry.asset}/{entry.partition} (entry {entry.id}): the launch "
                f"started {entry.requeue_launched_at} never created its run; launching it again"
            )
    requests = []
    for run in requeue_runs(graph, unlaunched, context.instance):
        context.log.info(f"launching {run.describe()}")
        requests.append(run.run_request())
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
    """The launched run relaunching a requeued entry (its own or a ranged one), if any."""
    return requeue_runs_found(instance, [entry]).get(entry.id)


class RequeueConfig(dg.Config):
    """Which quarantined partitions to release: `asset` and `partition` (one entry),
    `group` (a signature: every open entry of one cause), or `asset` with an optional
    `error_class` (every open entry of the asset, of that class)."""

    asset: str | None = None
    partition: str | None = None
    group: str | None = None
    error_class: str | None = None

    def selection(self) -> Selection:
        return Selection(self.asset, self.partition, self.group, self.error_class)


def requeue_job(backfills: Sequence[dg.AssetKey], names: FrameworkNames = BARE) -> dg.JobDefinition:
    """`requeue_dead_letter`, which releases the quarantined partitions of `backfills` (a
    code location's) and refuses any other: that is another location's to release."""
    served = frozenset(backfill.to_user_string() for backfill in backfills)
    sensor_name = names.definition("requeue_sensor")

    def refuse(message: str) -> dg.Failure:
        return dg.Failure(f"{message}; nothing was released", allow_retries=False)

    @dg.op(name="requeue_partition")
    def requeue_partition_op(
        context: dg.OpExecutionContext, config: RequeueConfig, jobs_platform: JobsPlatformResource
    ) -> None:
        """Release the selected quarantine entries; the requeue sensor then launches their
        runs, one per contiguous range of each asset's partitions."""
        selection = config.selection()
        problem = selection.problem()
        if problem is not None:
            raise refuse(f"config: {problem}")
        if selection.asset is not None and selection.asset not in served:
            raise refuse(
                f"{selection.asset!r} is no backfill of this code location (it serves "
                f"{', '.join(sorted(served)) or 'none'}): requeue it in the location that "
                "serves it"
            )
        engine = jobs_platform.ready_warehouse()
        with engine.begin() as connection:
            entries = selection.open_entries(connection, sorted(served))
            released = quarantine_store.release_entries(
                connection, entries, by=quarantine_store.RequeuedBy.UI, reason="requested"
            )
        if not released:
            missing = (
                f"{selection.describe()} is not quarantined"
                if selection.is_single
                else f"no quarantined entry of this code location matches {selection.describe()}"
            )
            raise refuse(f"{missing}; `jobs-platform dead-letter list` shows what is quarantined")
        for entry in released:
            context.log.info(
                f"released {entry.asset}/{entry.partition} (entry {entry.id}, "
                f"{entry.attempts} attempt(s)); its attempt count starts over"
            )
        context.log.info(
            f"released {len(released)} entr{'y' if len(released) == 1 else 'ies'} "
            f"({selection.describe()}); {sensor_name} launches their runs"
        )

    @dg.job(
        name=names.definition("requeue_dead_letter"),
        description="Release quarantined partitions of this code location's backfills "
        "(config: `asset` and `partition`, or `group` (a signature), or `asset` with an "
        f"optional `error_class`); {sensor_name} then launches their runs.",
    )
    def requeue_dead_letter() -> None:
        requeue_partition_op()

    return requeue_dead_letter


requeue_sensor = requeue_sensor_named(BARE)
