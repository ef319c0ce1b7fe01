"""`dead-letter requeue --wait`: following a requeue's runs until they end, or running them.

Where a daemon serves the Dagster instance, the requeue sensor launches the runs and the
command follows them, found by their run keys (`requeue_runs_found`), with a line each
time one changes status. Where none does, the command runs them itself, one after the
other (`dead_letter.requeue_execution`). Either way it ends by saying which runs failed and
where to read why.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence

import dagster as dg

from jobs_platform.dead_letter.requeue import REQUEUE_TICK_SECONDS, requeue_runs_found
from jobs_platform.dead_letter.requeue_execution import execute_requeue_run
from jobs_platform.dead_letter.requeue_plan import RequeueRun
from jobs_platform.orchestration.tags import (
    PARTITION_RANGE_END_TAG,
    PARTITION_RANGE_START_TAG,
    PARTITION_TAG,
    REQUEUE_ASSET_TAG,
    RUN_KEY_TAG,
)
from jobs_platform.store.rows import TableRow
from jobs_platform.suggested_commands import show_command

RUN_FAILED = 3
WAIT_TIMED_OUT = 4
POLL_SECONDS = 1.0
# No run after this long (four of the sensor's ticks): the sensor may be stopped; said once.
NO_RUN_HINT_SECONDS = 4 * REQUEUE_TICK_SECONDS


class WaitTimedOut(Exception):
    """`--wait-timeout` passed before every run ended; the runs seen so far."""

    def __init__(self, runs: Sequence[dg.DagsterRun]) -> None:
        super().__init__(f"{len(runs)} run(s) seen")
        self.runs = list(runs)


def follow_runs(
    instance: dg.DagsterInstance,
    entries: Sequence[TableRow],
    releases: Mapping[int, int],
    known: Sequence[dg.DagsterRun],
    timeout: float | None,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[dg.DagsterRun]:
    """Wait until every one of `entries` has a run that ended, and every run of `known`
    has ended; say each run's status as it changes. The runs, as they ended.

    Raises `WaitTimedOut` once `timeout` seconds have passed (None: no limit).
    """
    start = clock()
    said: dict[str, dg.DagsterRunStatus] = {}
    hinted = False
    while True:
        found = requeue_runs_found(instance, entries, releases)
        runs = {run.run_id: run for run in found.values()}
        for run in known:
            runs[run.run_id] = instance.get_run_by_id(run.run_id) or run
        for run in runs.values():
            if said.get(run.run_id) != run.status:
                said[run.run_id] = run.status
                print(f"  run {run.run_id}  {run.tags.get(RUN_KEY_TAG, '')}: {_status(run)}")
        if len(found) == len(entries) and all(run.is_finished for run in runs.values()):
            return list(runs.values())
        waited = clock() - start
        if not hinted and len(found) < len(entries) and waited >= NO_RUN_HINT_SECONDS:
            hinted = True
            print(
                f"  no run yet for {len(entries) - len(found)} entr"
                f"{'y' if len(entries) - len(found) == 1 else 'ies'} after {waited:.0f} s: is "
                "the code location's requeue sensor running? (Dagster UI: Automation)"
            )
        if timeout is not None and waited >= timeout:
            raise WaitTimedOut(list(runs.values()))
        sleep(POLL_SECONDS)


def run_here(
    instance: dg.DagsterInstance, module: str, runs: Sequence[RequeueRun]
) -> list[dg.DagsterRun]:
    """Run each of `runs` in this process, one after the other; the runs, as they ended."""
    ended = []
    for run in runs:
        print(f"  running {run.describe()}")
        recorded = execute_requeue_run(instance, module, run)
        print(f"  run {recorded.run_id}  {run.run_key}: {_status(recorded)}")
        ended.append(recorded)
    return ended


def report_ended(runs: Sequence[dg.DagsterRun], module: str) -> int:
    """Say how the runs ended: 0 when every one succeeded; else `RUN_FAILED`, naming each
    run that did not and where to read why."""
    failed = [run for run in runs if run.status != dg.DagsterRunStatus.SUCCESS]
    if not failed:
        print(f"{len(runs)} run{'s' if len(runs) != 1 else ''} succeeded")
        return 0
    for run in failed:
        print(
            f"error: run {run.run_id} ({run.tags.get(RUN_KEY_TAG, '')}) {_status(run)}: its "
            f"events are on the Dagster UI's page of the run (Runs, {run.run_id}); the "
            f"partition's attempts: {_show(run, module)}",
            file=sys.stderr,
        )
    return RUN_FAILED


def report_timed_out(timed_out: WaitTimedOut, timeout: float | None) -> int:
    going = [run for run in timed_out.runs if not run.is_finished]
    print(
        f"error: --wait-timeout {timeout:g} s passed before the runs ended "
        f"({len(going)} still going, {len(timed_out.runs)} seen); they go on: follow them on "
        "the Dagster UI's Runs page",
        file=sys.stderr,
    )
    return WAIT_TIMED_OUT


def _status(run: dg.DagsterRun) -> str:
    """`queued`, `started`, … as Dagster names a run's status; `failed`, `succeeded` at its end."""
    ended = {
        dg.DagsterRunStatus.SUCCESS: "succeeded",
        dg.DagsterRunStatus.FAILURE: "failed",
        dg.DagsterRunStatus.CANCELED: "canceled",
    }
    return ended.get(run.status, run.status.value.lower())


def _show(run: dg.DagsterRun, module: str) -> str:
    asset = run.tags.get(REQUEUE_ASSET_TAG, "ASSET")
    partition = run.tags.get(PARTITION_TAG) or run.tags.get(PARTITION_RANGE_START_TAG, "")
    command = show_command(asset, partition, module)
    end = run.tags.get(PARTITION_RANGE_END_TAG)
    return f"{command} (and each partition up to {end})" if end and end != partition else command
