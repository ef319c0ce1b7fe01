"""The code location of `bench backfill --shape hourly`: one hourly backfill of small events.

What a team would write for an hourly feed: `hourly_events` from 2025-01-01-00:00, each
hour's landing file read and validated (`hourly_events.read_hour`), with the framework's
guarantees per hour. The webserver and daemon of the bench load it with
`-m jobs_platform.bench.hourly_location`.

The backfill policy is the one a user sets on the asset; the bench names it in
`JOBS_PLATFORM_BENCH_HOURLY_POLICY` (read when the location loads): `single_run` (one run
over the whole range, one step process) or `multi_run:N` (runs of at most N hours).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import dagster as dg
import pandas as pd

from jobs_platform import PartitionInput, backfill_asset
from jobs_platform.bench.hourly_events import (
    HOURLY_START,
    events_of_hour,
    events_table,
    file_fingerprint,
    hour_file,
    read_hour,
)
from jobs_platform.examples.orders.resources import LANDING_RESOURCE_KEY, LandingZone
from jobs_platform.orchestration.platform import platform_definitions

POLICY_VARIABLE = "JOBS_PLATFORM_BENCH_HOURLY_POLICY"
DEFAULT_POLICY = "single_run"


def backfill_policy(spelled: str) -> dg.BackfillPolicy:
    """`single_run` or `multi_run:N` as Dagster's policy."""
    if spelled == "single_run":
        return dg.BackfillPolicy.single_run()
    kind, _, size = spelled.partition(":")
    if kind == "multi_run" and size.isdigit() and int(size) >= 1:
        return dg.BackfillPolicy.multi_run(max_partitions_per_run=int(size))
    raise ValueError(f"a backfill policy is single_run or multi_run:N (N >= 1), got {spelled!r}")


hourly_partitions = dg.HourlyPartitionsDefinition(
    start_date=HOURLY_START.strftime("%Y-%m-%d-%H:%M")
)


def _fingerprint(source: PartitionInput, landing: LandingZone) -> str:
    return file_fingerprint(hour_file(landing.resolved_root(), source.partition_key))


@backfill_asset(
    table=events_table,
    partitions_def=hourly_partitions,
    partition_scope=events_of_hour,
    fingerprint=_fingerprint,
    backfill_policy=backfill_policy(os.environ.get(POLICY_VARIABLE, DEFAULT_POLICY)),
)
def hourly_events(source: PartitionInput, landing: LandingZone) -> Iterator[pd.DataFrame]:
    """One hour of events from the landing zone, validated line by line."""
    path = hour_file(landing.resolved_root(), source.partition_key)
    yield from read_hour(path, source.chunk_rows)


defs = dg.Definitions.merge(
    platform_definitions([hourly_events]),
    dg.Definitions(resources={LANDING_RESOURCE_KEY: LandingZone()}),
)
