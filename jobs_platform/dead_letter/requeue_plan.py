"""Which runs relaunch requeued entries: one run per contiguous range of an asset's partitions.

The plan only: `dead_letter.requeue`, the launcher, creates, submits or requests these
runs and finds them again. Many entries of one asset become few runs, never a process per
entry: each run covers a contiguous range of the asset's partitions (a ranged run
computes every key between its ends, so a gap in the selection starts another run) of at
most the backfill policy's `max_partitions_per_run`, the smallest among the asset and the
backfills it feeds (a run over several assets takes the smallest, as Dagster's backfills
do), and selects those backfills too, so each partition's downstream comes with it.

Each run names its entries and their asset in its tags (`REQUEUE_ENTRIES_TAG`,
`REQUEUE_ASSET_TAG`): that is how the launcher, asked later whether an entry's run
exists, finds it. A run of one entry keeps the key `requeue-<id>`. An entry released again
(its first run ended without an attempt) is relaunched under its release's number
(`requeue-<id>#2`), so its new run is never taken for the one that ended.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import dagster as dg

from jobs_platform.orchestration.selections import with_downstream_backfills
from jobs_platform.orchestration.tags import (
    PARTITION_RANGE_END_TAG,
    PARTITION_RANGE_START_TAG,
    PARTITION_TAG,
    REQUEUE_ASSET_TAG,
    REQUEUE_ENTRIES_TAG,
    requeue_range_run_key,
    requeue_run_key,
    tagged_entry_ids,
)
from jobs_platform.store.rows import TableRow


@dataclass(frozen=True)
class RequeueRun:
    """One run relaunching requeued entries of one asset: their partitions, a contiguous
    range of its partitions definition, with the backfills it feeds."""

    asset: str
    selection: tuple[dg.AssetKey, ...]
    entries: tuple[TableRow, ...]  # in partition order
    # The release of each entry it relaunches, by id; 1 (a first release) when left out.
    releases: Mapping[int, int] = field(default_factory=dict, hash=False)

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
        if len(ids) == 1:
            return requeue_run_key(ids[0], self.releases.get(ids[0], 1))
        return requeue_range_run_key(ids, self.releases)

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
            REQUEUE_ENTRIES_TAG: tagged_entry_ids(self.entry_ids, self.releases),
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
    graph,
    entries: Iterable[TableRow],
    instance: dg.DagsterInstance | None = None,
    releases: Mapping[int, int] | None = None,
) -> list[RequeueRun]:
    """The runs that relaunch `entries` (released, of backfills in `graph`): per asset, one
    per contiguous range of its partitions, each at most the policy's partitions per run.

    `instance` resolves dynamic partitions; without it, each of those is a run of its own.
    `releases` gives each entry's release, by id (`release_numbers`; 1 when left out).
    """
    releases = releases or {}
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
            of_run = {e.id: releases[e.id] for e in entries_of_range if e.id in releases}
            runs.append(RequeueRun(asset, selection, tuple(entries_of_range), of_run))
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
