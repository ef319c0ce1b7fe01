"""The hourly partitions and the backfill policy both hourly code locations serve.

`hourly_location` (the framework's `hourly_events`) and `hourly_floor_location` (the
same asset in plain Dagster) take them from here, so the two are compared over the same
partitions with the same policy. Dagster only: nothing of the framework.

The policy is the one a user sets on the asset; the bench names it in
`JOBS_PLATFORM_BENCH_HOURLY_POLICY` (read when a location loads: Dagster binds a
backfill policy then): `single_run` (one run over the whole range, one step process) or
`multi_run:N` (runs of at most N hours).
"""

from __future__ import annotations

import os

import dagster as dg

from benchmarks.hourly_events import HOUR_KEY_FORMAT, HOURLY_START

POLICY_VARIABLE = "JOBS_PLATFORM_BENCH_HOURLY_POLICY"
DEFAULT_POLICY = "single_run"

hourly_partitions = dg.HourlyPartitionsDefinition(start_date=HOURLY_START.strftime(HOUR_KEY_FORMAT))


def backfill_policy(spelled: str) -> dg.BackfillPolicy:
    """`single_run` or `multi_run:N` as Dagster's policy."""
    if spelled == "single_run":
        return dg.BackfillPolicy.single_run()
    kind, _, size = spelled.partition(":")
    if kind == "multi_run" and size.isdigit() and int(size) >= 1:
        return dg.BackfillPolicy.multi_run(max_partitions_per_run=int(size))
    raise ValueError(f"a backfill policy is single_run or multi_run:N (N >= 1), got {spelled!r}")


def policy_of_this_location() -> dg.BackfillPolicy:
    """The policy the bench named for the location being loaded (single_run if none)."""
    return backfill_policy(os.environ.get(POLICY_VARIABLE, DEFAULT_POLICY))
