"""Requeued entries as runs: one run per contiguous range of an asset's partitions.

The one rule by which released quarantine entries become runs, whoever launches them: the
requeue sensor (entries released from the UI job or by the redrive) and `jobs-platform
dead-letter requeue` with a selection (submitted to the Dagster instance's run queue).
Many entries of one asset become few runs, never a process per entry: each run covers a
contiguous range of the asset's partitions (a ranged run computes every key between its
ends, so a gap in the selection starts another run) of at most the backfill policy's
`max_partitions_per_run`, the smallest among the asset and the backfills it feeds (a run
over several assets takes the smallest, as Dagster's backfills do), and selects those
backfills too, so each partition's downstream comes with it.

Each run names its entries and their asset in its tags (`REQUEUE_ENTRIES_TAG`,
`REQUEUE_ASSET_TAG`): that is how anyone asking later whether an entry's run exists (the
sensor's lost-launch check) finds it. A run of one entry keeps the key `requeue-<id>`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import dagster as dg

from jobs_platform.orchestration.run_keys import launched_runs
from jobs_platform.orchestration.selections import with_downstream_backfills
from jobs_platform.orchestration.tags import (
    PARTITION_RANGE_END_TAG,
    PARTITION_RANGE_START_TAG,
    PARTITION_TAG,
    REQUEUE_ASSET_TAG,
    REQUEUE_ENTRIES_TAG,
    RUN_KEY_TAG,
    entry_ids_of,
    requeue_range_run_key,
    requeue_run_key,
    tagged_entry_ids,
)
from jobs_platform.store.rows import TableRow

# The Dagster instance and the warehouse may keep different clocks: a run is looked for
# among those created from this long before its entries were released.
CLOCK_MARGIN = dt.timedelta(hours=1)


@dataclass(frozen=True)
class RequeueRun:
    """One run relaunching requeued entries of one asset: their partitions, a contiguous
    range of its partitions definition, with the backfills it feeds."""

    asset: str
    selection: tuple[dg.AssetKey, ...]
    entries: tuple[TableRow, ...]  # in partition order

    @property
    def partitions(self) -> list[str]:
        return list(dict.fromkeys(entry.partition for entry in self.entries))

    @property
    def first(self) -> str:
        return self.partitions[0]

    @property
    def last(self) -> str:
        return self.partitions[-1]

    @property
    def entry_ids(self) -> list[int]:
        return sorted(entry.id for entry in self.entries)

    @property
    def run_key(self) -> str:
        ids = self.entry_ids
        return requeue_run_key(ids[0]) if len(ids) == 1 else requeue_range_run_key(ids)

    @property
    def tags(self) -> dict[str, str]:
        """The run's tags: its partition or range, its key, and whose entries it relaunches."""
        partitions = self.partitions
        where = (
            {PARTITION_TAG: partitions[0]}
            if len(partitions) == 1
            else {PARTITION_RANGE_START_TAG: self.first, PARTITION_RANGE_END_TAG: self.last}
        )
        return {
            **where,
            REQUEUE_ASSET_TAG: self.asset,
            REQUEUE_ENTRIES_TAG: tagged_entry_ids(self.entry_ids),
        }

    def run_request(self) -> dg.RunRequest:
        """The run as a sensor asks for it (the daemon turns the partition into its tag)."""
        tags = self.tags
        partition = tags.pop(PARTITION_TAG, None)
        return dg.RunRequest(
            run_key=self.run_key,
            partition_key=partition,
            asset_selection=list(self.selection),
            tags=tags,
        )

    def describe(self) -> str:
        span = self.first if self.first == self.last else f"{self.first}..{self.last}"
        count = len(self.partitions)
        with_downstream = [key.to_user_string() for key in self.selection[1:]]
        also = f" (with {', '.join(with_downstream)})" if with_downstream else ""
        return (
            f"{self.asset} {span}: {count} partition{'s' if count != 1 else ''}{also}, "
            f"run key {self.run_key}"
        )


def requeue_runs(
    graph, entries: Iterable[TableRow], instance: dg.DagsterInstance | None = None
) -> list[RequeueRun]:
    """The runs that relaunch `entries` (released, of backfills in `graph`): per asset, one
    per contiguous range of its partitions, each at most the policy's partitions per run.

    `instance` resolves dynamic partitions; without it, each of those is a run of its own.
    """
    by_asset: dict[str, list[TableRow]] = {}
    for entry in entries:
        by_asset.setdefault(entry.asset, []).append(entry)
    runs: list[RequeueRun] = []
    for asset, of_asset in sorted(by_asset.items()):
        key = dg.AssetKey.from_user_string(asset)
        selection = tuple(with_downstream_backfills(graph, key))
        limit = partitions_per_run(graph, selection)
        for entries_of_range in _contiguous_ranges(
            of_asset, _ordered_keys(graph.get(key).partitions_def, instance), limit
        ):
            runs.append(RequeueRun(asset, selection, tuple(entries_of_range)))
    return runs


def partitions_per_run(graph, selection: Sequence[dg.AssetKey]) -> int | None:
    """How many partitions a run of `selection` may take: the smallest backfill policy's
    `max_partitions_per_run` (None: no bound, `single_run()`); no policy is one per run."""
    limits = []
    for key in selection:
        policy = graph.get(key).backfill_policy
        if policy is None:
            return 1
        if policy.max_partitions_per_run is not None:
            limits.append(policy.max_partitions_per_run)
    return min(limits) if limits else None


def _ordered_keys(
    partitions_def: dg.PartitionsDefinition | None, instance: dg.DagsterInstance | None
) -> dict[str, int] | None:
    """Each partition key's position in the definition's order, where a range between two
    keys is every key between them in that order; None where it is not (a multi-partitioned
    range is a product of each dimension's ranges) or cannot be known."""
    if partitions_def is None or isinstance(partitions_def, dg.MultiPartitionsDefinition):
        return None
    if isinstance(partitions_def, dg.DynamicPartitionsDefinition) and instance is None:
        return None
    keys = partitions_def.get_partition_keys(dynamic_partitions_store=instance)
    return {key: position for position, key in enumerate(keys)}


def _contiguous_ranges(
    entries: Sequence[TableRow], positions: dict[str, int] | None, limit: int | None
) -> list[list[TableRow]]:
    unplaced = [entry for entry in entries if positions is None or entry.partition not in positions]
    ranges: list[list[TableRow]] = [[entry] for entry in unplaced]
    if positions is None:
        return ranges
    placed = sorted(
        (entry for entry in entries if entry.partition in positions),
        key=lambda entry: (positions[entry.partition], entry.id),
    )
    current: list[TableRow] = []
    for entry in placed:
        position = positions[entry.partition]
        if current:
            previous = positions[current[-1].partition]
            distinct = len({e.partition for e in current})
            same = position == previous
            if not same and (position != previous + 1 or (limit and distinct >= limit)):
                ranges.append(current)
                current = []
        current.append(entry)
    if current:
        ranges.append(current)
    return sorted(ranges, key=lambda run: min(entry.id for entry in run))


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


class PreparedRuns:
    """Requeue runs created in the instance, `NOT_STARTED`, not yet handed to its run
    coordinator: what `prepared_requeue_runs` yields."""

    def __init__(self, instance: dg.DagsterInstance, workspace, created: list[dg.DagsterRun]):
        self._instance = instance
        self._workspace = workspace
        self.created = created
        self.submitted: list[dg.DagsterRun] = []

    def submit(self) -> list[dg.DagsterRun]:
        """Hand each run to the instance's run coordinator (queued, for the daemon)."""
        for run in self.created:
            self.submitted.append(self._instance.submit_run(run.run_id, self._workspace))
        return self.submitted


@contextlib.contextmanager
def prepared_requeue_runs(
    instance: dg.DagsterInstance, module: str, runs: Sequence[RequeueRun]
) -> Iterator[PreparedRuns]:
    """The runs, created in the instance from a workspace of the code location `module`
    (loaded on its own code server, as `dagster job launch` loads it) and not yet
    submitted: proof the launch can go ahead before anything is released.

    The body releases the entries, then calls `submit()`. Whatever the body or a
    submission raises, the runs not submitted are deleted, so no run waits `NOT_STARTED`
    (the requeue sensor relaunches released entries whose runs are missing).
    """
    from jobs_platform.orchestration._compat import create_asset_run, module_workspace

    # A misconfigured run coordinator is found now, not after the release.
    _ = instance.run_coordinator
    with module_workspace(instance, module) as workspace:
        prepared = PreparedRuns(instance, workspace, [])
        try:
            for run in runs:
                request = run.run_request()
                tags = {**run.tags, RUN_KEY_TAG: run.run_key}
                prepared.created.append(
                    create_asset_run(
                        instance,
                        workspace,
                        dg.RunRequest(
                            run_key=run.run_key,
                            asset_selection=request.asset_selection,
                            tags=tags,
                        ),
                    )
                )
            yield prepared
        finally:
            submitted = {run.run_id for run in prepared.submitted}
            for created in prepared.created:
                if created.run_id not in submitted:
                    instance.delete_run(created.run_id)
