"""The code location of `bench backfill --shape hourly`: one hourly backfill of small events.

What a team would write for an hourly feed: `hourly_events` from 2025-01-01-00:00, each
hour's landing file read and validated (`hourly_events.read_hour`), with the framework's
guarantees per hour. The webserver and daemon of the bench load it with
`-m benchmarks.hourly_location`.

The partitions and the backfill policy (the one a user sets on the asset, named by the
bench in `JOBS_PLATFORM_BENCH_HOURLY_POLICY`) are `hourly_partitions`'s, which the Dagster
floor (`hourly_floor_location`) serves too.
"""

from __future__ import annotations

from collections.abc import Iterator

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


@backfill_asset(
    table=events_table,
    partitions_def=hourly_partitions,
    partition_scope=events_of_hour,
    fingerprint=_fingerprint,
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
