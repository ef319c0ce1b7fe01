"""Requeue's launcher: the one place released entries become runs, and are found again.

Whoever released the entries (a person with `jobs-platform dead-letter requeue`, in any
of its forms, or with the `requeue_dead_letter` job from the UI; the redrive), their runs
are launched and deduplicated here, by one set of rules:

- **The runs**: one per contiguous range of an asset's partitions, with the backfills it
  feeds (`dead_letter.requeue_plan`, the plan only).
- **Launch** (`requeue_sensor`): released entries no one launched become run requests,
  each under its run key. The daemon evaluates the sensor inside the code location, so its
  runs are created in that location whatever name the workspace gives it. Where no daemon
  runs, `dead-letter requeue --wait` runs them itself (`dead_letter.requeue_execution`)
  under the same keys.
- **Dedupe** (`requeue_runs_found`): an entry's run is found by its key (`requeue-<id>`,
  `requeue-<id>#<release>` for a later release) or, for a ranged run, by the entries and
  releases its tags name. A run still `NOT_STARTED` was never submitted and does not
  count; a repeated request is harmless, the daemon skips a run key the sensor has used.
- **Lost launches** (`entries_awaiting_run`): an entry is awaiting its run while it is
  requeued and its partition has recorded no attempt in the episode the requeue opened.
  The sensor launches each awaiting entry of which Dagster has no run, and marks those it
  finds a run of, leaving them alone for `REQUEUE_LAUNCH_GRACE_SECONDS`. It never launches
  again an entry whose run ended: a run that failed before its step would fail again.
- **A person's requeue** (`persons_requeue`, `release_persons_requeue`): the open entries
  selected are released; a requeued entry whose run ended without an attempt (it failed
  before its step, or was canceled) is released again, and its next run has a key of its
  own; one whose run was never launched is left to the sensor, at its next tick.
- **Downstream** (`downstream_requests`): once a requeued partition succeeded, the
  partitions of backfills reading it through a different partitioning (the day of a fixed
  hour) are launched too, each under its own run key (`downstream_run_key`).

Both the sensor and the UI job act on the code location's own backfills only: another
location sharing the warehouse releases and relaunches its own. One module for the rules
above, so each has one home, at the cost of its length.
"""

import datetime as dt
import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import dagster as dg
import sqlalchemy as sa

from jobs_platform.dead_letter.entries import entries_by_id
from jobs_platform.dead_letter.releases import RequeuedBy, release_numbers, resolved_since
from jobs_platform.dead_letter.requeue_plan import requeue_runs
from jobs_platform.dead_letter.selection import Selection
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.orchestration._compat import RUN_QUEUE_DAEMON, SENSOR_DAEMON, daemon_heartbeats
from jobs_platform.orchestration.launch_sensors import backfill_launching_sensor
from jobs_platform.orchestration.naming import BARE, FrameworkNames
from jobs_platform.orchestration.rejects_replay import replay_requests
from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform.orchestration.run_keys import launched_runs
from jobs_platform.orchestration.selections import served_backfills, with_downstream_backfills
from jobs_platform.orchestration.tags import (
    PARTITION_TAG,
    REQUEUE_ASSET_TAG,
    REQUEUE_ENTRIES_TAG,
    downstream_run_key,
    requeue_run_key,
    tagged_releases,
)
from jobs_platform.orchestration.upstream import downstream_partitions
from jobs_platform.store.rows import TableRow

REQUEUE_TICK_SECONDS = 15
REQUEUES_PER_TICK = 100
# A sensor with no cursor yet (new, or reset) relaunches what reads partitions resolved
# this recently, not every resolution in the warehouse's history.
FIRST_TICK_LOOKBACK = dt.timedelta(days=1)
# A requeue whose run the sensor found is looked at again only this long after: its run
# gets to a first attempt meanwhile. The mark and the check both read the database's clock.
REQUEUE_LAUNCH_GRACE_SECONDS = 300
# The Dagster instance and the warehouse may keep different clocks: a run is looked for
# among those created from this long before its entries were released.
CLOCK_MARGIN = dt.timedelta(hours=1)
# A daemon beats every 30 s; one silent for four beats is taken for stopped.
DAEMON_SILENCE_SECONDS = 120


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
        releases = release_numbers(connection, [entry.id for entry in entries])
    found = list(requeue_runs_found(context.instance, entries, releases))
    if found:
        with store.begin() as connection:
            # The next ticks leave these alone while their runs get to a first attempt. A
            # run that ended without one stays found: it is a person's to requeue again.
            store.dead_letter.mark_requeue_launched(connection, found)
    unlaunched = [entry for entry in entries if entry.id not in found]
    for entry in unlaunched:
        if entry.requeue_launched_at is not None:
            context.log.warning(
                f"requeued {entry.asset}/{entry.partition} (entry {entry.id}): its run, "
                f"found {entry.requeue_launched_at}, is gone from Dagster; launching it again"
            )
    requests = []
    for run in requeue_runs(graph, unlaunched, context.instance, releases):
        context.log.info(f"launching {run.describe()}")
        requests.append(run.run_request())
    requests += downstream_requests(graph, context.instance, resolved)
    # Done partitions whose rejects an earlier code_version set aside (`rejects_replayed`).
    requests += replay_requests(repository, context.instance, store)
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
    instance: dg.DagsterInstance,
    entries: Sequence[TableRow],
    releases: Mapping[int, int] | None = None,
) -> dict[int, dg.DagsterRun]:
    """The launched run relaunching each of `entries` that has one, by entry id.

    `releases` gives each entry's latest release, by id (`release_numbers`; 1 when left
    out): only a run of that release counts. A run of one entry is found by its key
    (`requeue-<id>`, `requeue-<id>#<release>`, with the entry's partition); a ranged run by
    the entries and releases it names, among the requeue runs of their assets created
    since they were released. A run still `NOT_STARTED` does not count (`launched_runs`).
    """
    if not entries:
        return {}
    releases = releases or {}

    def key_of(entry: TableRow) -> str:
        return requeue_run_key(entry.id, releases.get(entry.id, 1))

    single = launched_runs(instance, [key_of(entry) for entry in entries], {})
    found: dict[int, dg.DagsterRun] = {}
    for entry in entries:
        run = single.get(key_of(entry))
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
    wanted = {entry.id: releases.get(entry.id, 1) for entry in rest}
    for run in runs:
        if run.status == dg.DagsterRunStatus.NOT_STARTED:
            continue
        for entry_id, release in tagged_releases(run.tags.get(REQUEUE_ENTRIES_TAG, "")).items():
            if wanted.get(entry_id) == release:
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


def silent_daemons(instance: dg.DagsterInstance, now: float | None = None) -> list[str]:
    """The daemons a sensor's runs need that have not beaten on the instance within
    `DAEMON_SILENCE_SECONDS`: the sensor daemon, and the run queue's when the instance
    queues its runs. Empty when a daemon launches the requeue sensor's runs."""
    needed = [SENSOR_DAEMON]
    if isinstance(instance.run_coordinator, dg.QueuedRunCoordinator):
        needed.append(RUN_QUEUE_DAEMON)
    beats = daemon_heartbeats(instance)
    moment = time.time() if now is None else now
    return [name for name in needed if moment - beats.get(name, 0.0) > DAEMON_SILENCE_SECONDS]


@dataclass
class PersonsRequeue:
    """What a person's requeue does to each entry it selects, before it does it."""

    # Quarantined: released, their attempt count starting over.
    open: list[TableRow] = field(default_factory=list)
    # Requeued, whose run ended before the partition recorded an attempt: released again.
    ended: list[tuple[TableRow, dg.DagsterRun]] = field(default_factory=list)
    # Requeued, no run launched yet: the requeue sensor launches it at its next tick.
    unlaunched: list[TableRow] = field(default_factory=list)
    # Requeued, their run not ended: left to it.
    running: list[tuple[TableRow, dg.DagsterRun]] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not (self.open or self.ended or self.unlaunched or self.running)


def persons_requeue(
    instance: dg.DagsterInstance, store: Warehouse, selection: Selection, served: Sequence[str]
) -> PersonsRequeue:
    """What a person's requeue of `selection` among the `served` backfills does."""
    with store.connect() as connection:
        opened = selection.open_entries(connection, served)
        awaiting = selection.awaiting_entries(connection, served)
        releases = release_numbers(connection, [entry.id for entry in awaiting])
    found = requeue_runs_found(instance, awaiting, releases)
    chosen = PersonsRequeue(open=opened)
    for entry in awaiting:
        run = found.get(entry.id)
        if run is None:
            chosen.unlaunched.append(entry)
        elif run.is_finished:
            chosen.ended.append((entry, run))
        else:
            chosen.running.append((entry, run))
    return chosen


def release_persons_requeue(
    store: Warehouse, chosen: PersonsRequeue, by: RequeuedBy
) -> tuple[list[TableRow], dict[int, int]]:
    """Release what `chosen` says, in one transaction: the open entries, and again those
    whose run ended; and let the sensor look at once for the runs of those awaiting one.
    Returns the entries whose runs come next (as they are now, released ones included)
    with each one's release, by id. An entry released meanwhile by someone else is left
    out."""
    causes = {entry.id: _ended(run) for entry, run in chosen.ended}
    with store.begin() as connection:
        released = store.dead_letter.release_entries(
            connection, chosen.open, by=by, reason="requested"
        )
        again = store.dead_letter.release_again(connection, causes, by=by)
        waiting = [entry.id for entry in chosen.unlaunched]
        store.dead_letter.forget_requeue_launched(connection, waiting)
        entries = entries_by_id(connection, [e.id for e in released] + again + waiting)
        releases = release_numbers(connection, [entry.id for entry in entries])
    return entries, releases


def already_requeued(entry: TableRow, run: dg.DagsterRun) -> str:
    """Why a person's requeue of an entry whose run has not ended does nothing."""
    return (
        f"{entry.asset}/{entry.partition} is already requeued: its run {run.run_id} is "
        f"{run.status.value.lower()}; follow it in the Dagster UI"
    )


def _ended(run: dg.DagsterRun) -> str:
    """`run 1a2b3c4d failed`: a run and its status, short enough for the requeue log."""
    words = {dg.DagsterRunStatus.FAILURE: "failed", dg.DagsterRunStatus.CANCELED: "canceled"}
    return f"run {run.run_id[:8]} {words.get(run.status, run.status.value.lower())}"


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
        chosen = persons_requeue(context.instance, store, selection, sorted(served))
        if selection.is_single and chosen.running:
            [(entry, run)] = chosen.running
            raise refuse(already_requeued(entry, run))
        released, _releases = release_persons_requeue(store, chosen, RequeuedBy.UI)
        if not released:
            missing = (
                f"{selection.describe()} is not quarantined"
                if selection.is_single
                else f"no quarantined entry of this code location matches {selection.describe()}"
            )
            raise refuse(f"{missing}; `jobs-platform dead-letter list` shows what is quarantined")
        again = {entry.id: run for entry, run in chosen.ended}
        waiting = {entry.id for entry in chosen.unlaunched}
        for entry in released:
            named = f"{entry.asset}/{entry.partition} (entry {entry.id})"
            if entry.id in again:
                said = f"released {named} again: {_ended(again[entry.id])} before any attempt"
            elif entry.id in waiting:
                said = f"{named} was requeued before; no run of it was launched yet"
            else:
                said = f"released {named}, {entry.attempts} attempt(s); its count starts over"
            context.log.info(said)
        for entry, run in chosen.running:
            context.log.info(f"left {entry.asset}/{entry.partition} to its {_ended(run)}")
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
