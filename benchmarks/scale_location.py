"""The code location `bin/bench scale` works on: one hourly backfill, `events`.

Its partitions run hourly from `$JOBS_PLATFORM_BENCH_SCALE_START` (an ISO hour; the
bench sets it so that the backfill has exactly `--partitions` keys now), with a
`code_version` and a `fingerprint=` hashing each partition's landing file under
`$JOBS_PLATFORM_BENCH_LANDING`, as `bench.redrive`'s location does. The bench loads it in
its own process (the redrive sensor's tick) and names it with `-m` to the commands it
times (`status` reads its catalog; `metrics serve` loads it).
"""

from __future__ import annotations

import datetime as dt
import os

import dagster as dg

from benchmarks.redrive import bench_location

ASSET = "events"
START_VARIABLE = "JOBS_PLATFORM_BENCH_SCALE_START"
LANDING_VARIABLE = "JOBS_PLATFORM_BENCH_LANDING"
DEFAULT_START = dt.datetime(2015, 7, 1, tzinfo=dt.UTC)  # ~100,000 hours before 2026-11
KEY_FORMAT = "%Y-%m-%d-%H:%M"  # Dagster's hourly partition keys


def scale_definitions(
    start: dt.datetime, landing: str, database_url: str | None = None
) -> dg.Definitions:
    """The location: `events` hourly from `start`; its warehouse `database_url`, else the
    environment's."""
    hourly = dg.HourlyPartitionsDefinition(start_date=start.strftime(KEY_FORMAT))
    return bench_location(1, landing, database_url, partitions_def=hourly, names=[ASSET])


def _start_from_environment() -> dt.datetime:
    given = os.environ.get(START_VARIABLE)
    return dt.datetime.fromisoformat(given) if given else DEFAULT_START


defs = scale_definitions(_start_from_environment(), os.environ.get(LANDING_VARIABLE, "landing"))
