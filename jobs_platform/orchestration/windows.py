"""A window of time for `jobs-platform status --from KEY --to KEY`: which partitions count.

A window runs from the start of FROM's time window to the end of TO's, both partition
keys of a time-partitioned backfill of the code location (inclusive, either may be left
out). Each time-partitioned backfill counts its partitions that start within it, as
Dagster's own `get_partition_keys_in_time_window` reads a window: `--from 2024-01-01 --to
2024-01-31` is every hour of January for an hourly backfill, January for a monthly one,
and every region of those days for a date x region one. A key valid for several
backfills (a day that also starts a week) reads as the shortest of their windows. A
backfill without a time dimension (static, dynamic) is left out of a windowed status.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import dagster as dg

from jobs_platform.orchestration.tags import BACKFILL_TAG


@dataclass(frozen=True)
class StatusWindow:
    """The partitions that start from `start` until before `end` (None: no bound)."""

    first: str | None  # --from KEY
    last: str | None  # --to KEY
    start: dt.datetime | None
    end: dt.datetime | None

    def as_dict(self) -> dict[str, str | None]:
        return {
            "from": self.first,
            "to": self.last,
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
        }


def time_partitions(spec: dg.AssetSpec) -> dg.TimeWindowPartitionsDefinition | None:
    """The backfill's time partitions: its own, or the time dimension of its multi ones."""
    partitions = spec.partitions_def
    if isinstance(partitions, dg.TimeWindowPartitionsDefinition):
        return partitions
    if (
        isinstance(partitions, dg.MultiPartitionsDefinition)
        and partitions.has_time_window_dimension
    ):
        return partitions.time_window_partitions_def
    return None


def status_window(
    specs: Iterable[dg.AssetSpec], first: str | None, last: str | None
) -> StatusWindow:
    """The window from FROM to TO; a `ValueError` naming what keys look like for a bad one."""
    timed = {
        spec.key.to_user_string(): partitions
        for spec in specs
        if spec.tags.get(BACKFILL_TAG) == "true" and (partitions := time_partitions(spec))
    }
    if not timed:
        raise ValueError(
            "--from/--to take partition keys of time-partitioned backfills, and this code "
            "location has none"
        )
    start = _bound("--from", first, timed, lambda window: window.start)
    end = _bound("--to", last, timed, lambda window: window.end)
    if start is not None and end is not None and start >= end:
        raise ValueError(f"--from {first} is after --to {last}")
    return StatusWindow(first, last, start, end)


def _bound(
    option: str,
    key: str | None,
    timed: Mapping[str, dg.TimeWindowPartitionsDefinition],
    edge: Callable[[dg.TimeWindow], dt.datetime],
) -> dt.datetime | None:
    if key is None:
        return None
    edges = [
        edge(partitions.time_window_for_partition_key(key))
        for partitions in timed.values()
        if partitions.has_partition_key(key)
    ]
    if not edges:
        examples: dict[str, list[str]] = {}
        for asset, partitions in timed.items():
            example = partitions.get_first_partition_key()
            if example is not None:
                examples.setdefault(example, []).append(asset)
        like = "; ".join(
            f"{example} ({', '.join(sorted(assets))})"
            for example, assets in sorted(examples.items())
        )
        raise ValueError(
            f"{option} {key!r} is not a partition key (or not one yet) of a time-partitioned "
            f"backfill of this code location; their first keys: {like or 'none yet'}"
        )
    return min(edges)


def keys_in_window(
    specs: Iterable[dg.AssetSpec], keys: Mapping[str, Sequence[str]], window: StatusWindow
) -> dict[str, list[str]]:
    """Of each time-partitioned backfill's `keys` (all it has now), those in the window."""
    inside: dict[str, list[str]] = {}
    for spec in specs:
        asset = spec.key.to_user_string()
        partitions = time_partitions(spec)
        if asset not in keys or partitions is None:
            continue
        start = max(window.start or partitions.start, partitions.start)
        last = partitions.get_last_partition_window()
        end = window.end or (last.end if last is not None else start)
        starting = (
            set(partitions.get_partition_keys_in_time_window(dg.TimeWindow(start, end)))
            if start < end
            else set()
        )
        if isinstance(spec.partitions_def, dg.MultiPartitionsDefinition):
            dimension = spec.partitions_def.time_window_dimension.name
            inside[asset] = [
                str(key)
                for key in keys[asset]
                if isinstance(key, dg.MultiPartitionKey)
                and key.keys_by_dimension[dimension] in starting
            ]
        else:
            inside[asset] = [key for key in keys[asset] if key in starting]
    return inside
