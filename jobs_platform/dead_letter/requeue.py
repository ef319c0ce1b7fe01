"""Requeue's launcher: the one place released entries become runs, and are found again.

Whoever released the entries (a person with `jobs-platform dead-letter requeue`, in any
of its forms, or with the `requeue_dead_letter` job from the UI; the redrive), their runs
are launched and deduplicated here, by one set of rules:

- **The runs**: one per contiguous range of an asset's partitions, with the backfills it
  feeds (`dead_letter.requeue_plan`, the plan only).
- **Launch, from the CLI** (`submit_requeue`): the runs are created `NOT_STARTED` from a
  workspace of the code location, then the entries are released and marked launched in
  one transaction, then the runs are submitted to the instance's run coordinator (queued
  for its daemon, as the UI's launches are). Anything failing before the release deletes
  the runs and releases nothing.
- **Launch, from the sensor** (`requeue_sensor`): released entries no one launched (the UI
  job's, the redrive's, `--no-launch`'s) become run requests.
- **Dedupe** (`requeue_runs_found`): an entry's run is found by its key (`requeue-<id>`)
  or, for a ranged run, by the entries its tags name. A run still `NOT_STARTED` was never
  submitted and does not count; a repeated request is harmless, the daemon skips a run
  key the sensor has used.
- **Lost launches** (`entries_awaiting_run`, `lost_launch`): an entry is awaiting its
  run while it is requeued and its partition has recorded no attempt in the episode the
  requeue opened. A launch marked less than `REQUEUE_LAUNCH_GRACE_SECONDS` ago may still
  be creating its run: the sensor leaves it alone until then, and afterwards launches
  again each awaiting entry of which Dagster has no run. A person's requeue of a single
  entry awaiting its run relaunches it at once, and is refused, naming the run, while
  that run exists.
- **Downstream** (`downstream_requests`): once a requeued partition succeeded, the
  partitions of backfills reading it through a different partitioning (the day of a fixed
  hour) are launched too, each under its own run key (`downstream_run_key`).

Both the sensor and the UI job act on the code location's own backfills only: another
location sharing the warehouse releases and relaunches its own. One module for the rules
above, so each has one home, at the cost of its length.
"""

import contextlib
import datetime as dt
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dagster as dg
import sqlalchemy as sa

from jobs_platform.dead_letter.entries import UnknownEntry
from jobs_platform.dead_letter.releases import RequeuedBy, requeue_awaiting_run, resolved_since
from jobs_platform.dead_letter.requeue_plan import RequeueRun, requeue_runs
from jobs_platform.dead_letter.selection import Selection
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.orchestration.launch_sensors import backfill_launching_sensor
from jobs_platform.orchestration.naming import BARE, FrameworkNames
from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform.orchestration.run_keys import launched_runs
from jobs_platform.orchestration.selections import served_backfills, with_downstream_backfills
from jobs_platform.orchestration.tags import (
    PARTITION_TAG,
    REQUEUE_ASSET_TAG,
    REQUEUE_ENTRIES_TAG,
    RUN_KEY_TAG,
    downstream_run_key,
    entry_ids_of,
    requeue_run_key,
)
from jobs_platform.orchestration.upstream import downstream_partitions
from jobs_platform.store.rows import TableRow

REQUEUE_TICK_SECONDS = 15
REQUEUES_PER_TICK = 100
# A sensor with no cursor yet (new, or reset) relaunches what reads partitions resolved
# this recently, not every resolution in the warehouse's history.
FIRST_TICK_LOOKBACK = dt.timedelta(days=1)
# A launch the CLI marked this recently may still be creating its run (it does within
# seconds): the sensor leaves it alone until then. The CLI and the sensor may run on
# different hosts, so the mark and the check both read the database's clock.
REQUEUE_LAUNCH_GRACE_SECONDS = 300
# The Dagster instance and the warehouse may keep different clocks: a run is looked for
# among those created from this long before its entries were released.
CLOCK_MARGIN = dt.timedelta(hours=1)


@functools.cache
def requeue_sensor_named(names: FrameworkNames = BARE) -> dg.SensorDefinition:
    """The requeue sensor under one code location's names."""
    return backfill_launching_sensor(
        names.definition("requeue_sensor"),
        REQUEUE_TICK_SECONDS,
        "Launches a run for each requeued partition of this code location's backfills that "
        "no one has launched yet.",
        _requeue_tick,
    )


def _requeue_tick(
    context: dg.SensorEvaluationContext, jobs_platform: JobsPlatformResource
) -> dg.SensorResult:
    repository = context.repository_def
    names = served_backfills(repository)
    if repository is None or not names:
        return dg.SensorResult(skip_reason="this code location serves no backfill")
    graph = repository.asset_graph
    store = jobs_platform.ready_store()
    since = (
        dt.datetime.fromisoformat(context.cursor)
        if context.cursor
        else dt.datetime.now(dt.UTC) - FIRST_TICK_LOOKBACK
    )
    with store.connect() as connection:
        entries = entries_awaiting_run(store, connection, names, REQUEUES_PER_TICK)
        resolved = resolved_since(connection, names, since, REQUEUES_PER_TICK)
    found = list(requeue_runs_found(context.instance, entries))
    if found:
        with store.begin() as connection:
            # The next ticks leave these alone while their runs get to a first attempt.
            store.dead_letter.mark_requeue_launched(connection, found)
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
    partitioning, leaving out those already launched."""
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


def requeue_runs_found(
    instance: dg.DagsterInstance, entries: Sequence[TableRow]
) -> dict[int, dg.DagsterRun]:
    """The launched run relaunching each of `entries` that has one, by entry id.

    A run of one entry is found by its key (`requeue-<id>`, with the entry's partition);
    a ranged run by the entries it names, among the requeue runs of their assets created
    since they were released. A run still `NOT_STARTED` does not count (`launched_runs`).
    """
    if not entries:
        return {}
    single = launched_runs(instance, [requeue_run_key(entry.id) for entry in entries], {})
    found: dict[int, dg.DagsterRun] = {}
    for entry in entries:
        run = single.get(requeue_run_key(entry.id))
        if run is not None and run.tags.get(PARTITION_TAG) == entry.partition:
            found[entry.id] = run
    rest = [entry for entry in entries if entry.id not in found]
    if not rest:
        return found
    released = [_utc(entry.requeued_at) for entry in rest if entry.requeued_at is not None]
    runs = instance.get_runs(
        dg.RunsFilter(
            tags={REQUEUE_ASSET_TAG: sorted({entry.asset for entry in rest})},
            created_after=min(released) - CLOCK_MARGIN if released else None,
        )
    )
    wanted = {entry.id for entry in rest}
    for run in runs:
        if run.status == dg.DagsterRunStatus.NOT_STARTED:
            continue
        for entry_id in entry_ids_of(run.tags.get(REQUEUE_ENTRIES_TAG, "")):
            if entry_id in wanted:
                found.setdefault(entry_id, run)
    return found


def _utc(moment: dt.datetime) -> dt.datetime:
    # SQLite hands the warehouse's times back naive; they are UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def entries_awaiting_run(
    store: Warehouse, connection: sa.Connection, assets: Sequence[str], limit: int
) -> list[TableRow]:
    """Requeued entries of `assets` whose run may never have been launched: no attempt in
    the episode their requeue opened, and no launch marked within the grace; never
    launched ones first. Whether a run exists is Dagster's to say (`requeue_runs_found`)."""
    return store.dead_letter.requeues_awaiting_run(
        connection, assets, limit, grace=dt.timedelta(seconds=REQUEUE_LAUNCH_GRACE_SECONDS)
    )


def lost_launch(
    instance: dg.DagsterInstance, connection: sa.Connection, asset: str, partition: str
) -> sa.Row | None:
    """The partition's requeued entry whose run was never launched, to launch again now
    (a person asked; no grace), or None when its latest entry awaits no run.

    Raises `UnknownEntry`, naming the run, when that entry's run exists.
    """
    entry = requeue_awaiting_run(connection, asset, partition)
    if entry is None:
        return None
    run = requeue_runs_found(instance, [entry]).get(entry.id)
    if run is not None:
        raise UnknownEntry(
            f"{asset}/{partition} is already requeued: its run {run.run_id} is "
            f"{run.status.value.lower()}; follow it in the Dagster UI"
        )
    return entry


class RequeueNotQueued(Exception):
    """The entries were released (and marked launched) but their runs could not be
    submitted: the requeue sensor launches them once the grace has passed."""

    def __init__(self, released: Sequence[TableRow], cause: BaseException):
        super().__init__(str(cause))
        self.released = list(released)
        self.cause = cause


def submit_requeue(
    instance: dg.DagsterInstance,
    module: str,
    runs: Sequence[RequeueRun],
    store: Warehouse,
    release: Callable[[sa.Connection], list[TableRow]],
) -> tuple[list[TableRow], list[dg.DagsterRun]]:
    """Launch `runs` through the instance, as the UI does: create them from a workspace of
    the code location `module`, then `release` the entries and mark them launched in one
    transaction, then submit the runs to the instance's run coordinator. Returns the
    entries released and the runs submitted (none when every entry was released
    meanwhile by someone else).

    Whatever fails before the release leaves nothing released and no run behind (the runs
    created are deleted) and is raised as it is; a failed submission after the release
    raises `RequeueNotQueued`.
    """
    released: list[TableRow] = []
    try:
        with _created_runs(instance, module, runs) as (workspace, created):
            with store.begin() as connection:
                released = release(connection)
                # Tells the requeue sensor these runs are on their way: it leaves them
                # alone while they wait in the queue, and relaunches any that vanish.
                store.dead_letter.mark_requeue_launched(connection, [e.id for e in released])
            if not released:
                return [], []
            submitted = []
            for run in list(created):
                submitted.append(instance.submit_run(run.run_id, workspace))
                created.remove(run)
            return released, submitted
    except Exception as error:
        if released:
            raise RequeueNotQueued(released, error) from error
        raise


@contextlib.contextmanager
def _created_runs(
    instance: dg.DagsterInstance, module: str, runs: Sequence[RequeueRun]
) -> Iterator[tuple[Any, list[dg.DagsterRun]]]:
    """The runs, created `NOT_STARTED` in the instance from a workspace of the code
    location `module` (on its own code server, as `dagster job launch` loads it): proof
    the launch can go ahead before anything is released. Those still in the list on the
    way out (not submitted) are deleted, so no run waits `NOT_STARTED`."""
    from jobs_platform.orchestration._compat import create_asset_run, module_workspace

    # A misconfigured run coordinator is found now, not after the release.
    _ = instance.run_coordinator
    with module_workspace(instance, module) as workspace:
        created: list[dg.DagsterRun] = []
        try:
            for run in runs:
                request = run.run_request()
                created.append(
                    create_asset_run(
                        instance,
                        workspace,
                        dg.RunRequest(
                            run_key=run.run_key,
                            asset_selection=request.asset_selection,
                            tags={**run.tags, RUN_KEY_TAG: run.run_key},
                        ),
                    )
                )
            yield workspace, created
        finally:
            for unsubmitted in created:
                instance.delete_run(unsubmitted.run_id)


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
        """Release the selected dead-letter entries; the requeue sensor then launches their
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
        store = jobs_platform.ready_store()
        with store.begin() as connection:
            entries = selection.open_entries(connection, sorted(served))
            released = store.dead_letter.release_entries(
                connection, entries, by=RequeuedBy.UI, reason="requested"
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
