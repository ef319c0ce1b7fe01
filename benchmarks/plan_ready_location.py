"""`bench plan`'s location with readiness: `hourly_location`'s backfill, declared `ready=`.

The same hourly backfill of the same landing files, ready once its hour's file has landed
(a cheap `ready`: one `stat` per hour), so `bench plan` can time the plan asking `ready`
about every hour it would run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pandas as pd

from benchmarks.hourly_events import (
    events_of_hour,
    events_table,
    file_fingerprint,
    hour_file,
    read_hour,
)
from benchmarks.hourly_partitions import hourly_partitions, policy_of_this_location
from jobs_platform import PartitionInput, backfill_asset
from jobs_platform.orchestration.platform import platform_definitions
from orders_example.orders.resources import LANDING_RESOURCE_KEY, LandingZone


def _fingerprint(source: PartitionInput, landing: LandingZone) -> str:
    return file_fingerprint(hour_file(landing.resolved_root(), source.partition_key))


def _landed(source: PartitionInput, landing: LandingZone) -> bool:
    return Path(hour_file(landing.resolved_root(), source.partition_key)).exists()


@backfill_asset(
    table=events_table,
    partitions_def=hourly_partitions,
    partition_scope=events_of_hour,
    fingerprint=_fingerprint,
    ready=_landed,
    max_wait=dt.timedelta(hours=6),
    backfill_policy=policy_of_this_location(),
)
def hourly_events(source: PartitionInput, landing: LandingZone) -> Iterator[pd.DataFrame]:
    """One hour of events from the landing zone, validated line by line."""
    path = hour_file(landing.resolved_root(), source.partition_key)
    yield from read_hour(path, source.chunk_rows)


defs = dg.Definitions.merge(
    platform_definitions([hourly_events]),
    dg.Definitions(resources={LANDING_RESOURCE_KEY: LandingZone()}),
)
