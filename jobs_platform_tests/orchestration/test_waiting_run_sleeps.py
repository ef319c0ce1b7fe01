"""A run whose step waits for its retry time sleeps, retries on time, and still stops.

Real `dagster job execute` processes on the framework's default executor, against
PostgreSQL. The step waits because another live process (this test) holds its partition's
lease: a snooze of a third of a lease TTL, up to half as long again (`engine.decisions`),
so with a 30 s TTL the wait is 10-15 s. Dagster is asked for no delay: the step is
restarted at once and its new process sleeps until the partition is due
(`step_retries`), so the run's executor loop blocks on a running step all along. What is
measured is every process of the run (the run process, the forkserver, the sleeping
step), over a 6 s window of the sleep.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
import sqlalchemy as sa

from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.leases import Grant, Leases, release_lease, this_holder
from jobs_platform.store.schema import attempts
from jobs_platform_tests.commands import start_run
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.waiting import wait_for
from orders_example.orders.seed import seed_orders

# The deployed warehouse has the tables of the backfills the suite's modules hold
# (`databases.loaded_backfills`): the run's own, even when this file runs alone.
from orders_example.orders.assets import daily_revenue, orders  # noqa: F401  # isort: skip

DAY = "2024-01-02"
ASSET = "orders"
# A snooze lasts a third of the TTL (times 1 to 1.5): 10-15 s.
LEASE_SECONDS = 30
# A loop that spins uses most of a core (8.8 CPU-s in 10 s measured), one that sleeps
# none (0.00 CPU-s): 6 s of the wait tell them apart as surely as 10 did, and leave
# time for the retried step to start before its window opens.
SHORTEST_WINDOW_SECONDS = 6.0
MOST_OF_ONE_CORE = 0.10
# How late after its due time the second attempt may start.
ALLOWED_LATENESS_SECONDS = 5.0
# The observation is stamped a few ms after the step asked to retry, and the attempt with
# its transaction's start: one host's wall clock, read moments apart.
SAME_MOMENT_SECONDS = 0.05
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# What the retried step logs when it begins to sleep (`StepTry.sleep_until_due`).
SLEEPING = "for the retry time of its first partition due"

Events = dg.DagsterEventType


@dataclass(frozen=True)
class CpuSample:
    at: float  # wall clock, comparable with Dagster's event timestamps
    seconds: dict[int, float]  # user + system CPU of each process of the group so far


def cpu_sample(group: int) -> CpuSample:
    """The CPU each process of a process group has used, from /proc/PID/stat."""
    seconds = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_file.read_text()
        except OSError:
            continue  # ended meanwhile
        fields = stat.rsplit(")", 1)[1].split()
        # Fields 5 (the group), 14 and 15 (user and system time) of proc(5).
        if int(fields[2]) == group:
            utime, stime = int(fields[11]), int(fields[12])
            seconds[int(stat_file.parent.name)] = (utime + stime) / CLOCK_TICKS
    return CpuSample(time.time(), seconds)


def cpu_between(first: CpuSample, last: CpuSample) -> float:
    """What the group used between two samples (a process started between them counts
    whole; none may end between them, or its share would be missed)."""
    assert set(first.seconds) <= set(last.seconds), "a process of the run ended in the window"
    return sum(used - first.seconds.get(pid, 0.0) for pid, used in last.seconds.items())


def events_of(instance: dg.DagsterInstance, event_type: dg.DagsterEventType | None) -> list:
    """The event log entries of the one run in the instance, oldest first (all: None)."""
    runs = instance.get_runs(limit=1)
    if not runs:
        return []
    return list(instance.all_logs(runs[0].run_id, of_type=event_type))


def first_snooze(instance: dg.DagsterInstance):
    """The run's first step-up-for-retry event: its step snoozing on the busy partition."""
    return wait_for(
        lambda: events_of(instance, Events.STEP_UP_FOR_RETRY),
        timeout=120,
        what="the step to snooze on the busy partition",
    )[0]


def snooze_due(instance: dg.DagsterInstance) -> float:
    """When the snoozed partition is due: its observation's time plus its delay."""
    for entry in events_of(instance, Events.ASSET_OBSERVATION):
        observation = entry.dagster_event.event_specific_data.asset_observation
        if observation.asset_key == dg.AssetKey(ASSET):
            return entry.timestamp + observation.metadata["retry_due_in_seconds"].value
    raise AssertionError("the snooze logged no observation of the partition")


def retried_step_sleeps(instance: dg.DagsterInstance):
    """The retried step's message that it sleeps until the partition is due."""
    return wait_for(
        lambda: [e for e in events_of(instance, None) if SLEEPING in (e.user_message or "")],
        timeout=60,
        what="the retried step to sleep until its partition is due",
    )[0]


def executor_loop_pid(instance: dg.DagsterInstance) -> int | None:
    """The pid the multiprocess executor reports as its parent process (its loop's)."""
    for entry in events_of(instance, Events.ENGINE_EVENT):
        if "using multiprocess executor: parent process" in entry.message:
            return entry.dagster_event.pid
    return None


def attempt_starts(env: dict[str, str]) -> list[float]:
    """When each recorded attempt of the partition started (wall clock seconds)."""
    query = sa.select(attempts.c.started_at).where(
        attempts.c.asset == ASSET, attempts.c.partition == DAY
    )
    with engine_from(env).connect() as connection:
        return [started.timestamp() for started in connection.scalars(query)]


@pytest.fixture
def busy_partition(pg_platform_env):
    """The environment of a run whose partition another live process holds, and that hold.

    The holder is this test process, so it is alive and the run's step snoozes.
    """
    env = {**pg_platform_env, "JOBS_PLATFORM_LEASE_SECONDS": str(LEASE_SECONDS)}
    day = dt.date.fromisoformat(DAY)
    seed_orders(env["JOBS_PLATFORM_LANDING"], day, day, orders_per_day=20)
    engine = engine_from(env)
    grant = Leases(engine, DATABASE_CLOCK).acquire(
        ASSET, DAY, holder=this_holder(), run_id=None, ttl_seconds=10 * LEASE_SECONDS
    )
    return env, grant


def give_back(env: dict[str, str], grant: Grant) -> None:
    with engine_from(env).begin() as connection:
        release_lease(connection, grant.lease)


def stop_group(run) -> None:
    if run.poll() is None:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()


@pytest.mark.slow
def test_a_run_whose_step_waits_for_its_retry_sleeps_then_retries_on_time(busy_partition, tmp_path):
    env, grant = busy_partition
    run = start_run(env, DAY, log_path=tmp_path / "run.log")
    try:
        with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            retry = first_snooze(instance)
            due = snooze_due(instance)
            retried_step_sleeps(instance)
            first = cpu_sample(run.pid)
            # The partition is free again: the second attempt, when it comes, will finish.
            give_back(env, grant)
            samples = [first]

            def partition_attempted():
                samples.append(cpu_sample(run.pid))
                return attempt_starts(env)

            [started] = wait_for(
                partition_attempted,
                timeout=due - time.time() + 60,
                interval=0.2,
                what="the attempt after the snooze",
            )
            loop_pid = executor_loop_pid(instance)
        assert run.wait(timeout=120) == 0, (tmp_path / "run.log").read_text()[-3000:]
    finally:
        stop_group(run)

    assert loop_pid == run.pid, "the measured group must be the one running the executor loop"
    # Dagster restarted the step at once: the wait is the step's own sleep.
    assert not retry.dagster_event.step_retry_data.seconds_to_wait
    # Only what the run's processes did while nothing but the wait was left.
    last = [sample for sample in samples if sample.at < due][-1]
    window = last.at - first.at
    used = cpu_between(first, last)
    # Shown with `pytest -rP`: the figure docs/operating.md quotes.
    print(f"the run's processes used {used:.2f} CPU-s over {window:.1f}s of waiting")
    assert window >= SHORTEST_WINDOW_SECONDS, f"measured only {window:.1f}s of the wait"
    assert used / window < MOST_OF_ONE_CORE, (
        f"the run's processes used {used:.2f} CPU-s in {window:.1f}s while its step waited "
        f"for its retry ({used / window:.0%} of a core)"
    )
    assert due - SAME_MOMENT_SECONDS <= started <= due + ALLOWED_LATENESS_SECONDS, (
        f"the attempt after the snooze started {started - due:+.2f}s from its due time"
    )


def test_a_run_whose_step_waits_for_its_retry_stops_promptly_when_terminated(
    busy_partition, tmp_path
):
    env, _grant = busy_partition
    run = start_run(env, DAY, log_path=tmp_path / "run.log")
    try:
        with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            first_snooze(instance)
            due = snooze_due(instance)
            retried_step_sleeps(instance)
            # Only the run process: it must stop its sleeping step on its own.
            os.kill(run.pid, signal.SIGTERM)
            # Promptly: before the retry it waits for is due (10-15 s after the snooze), when
            # a step that slept through its wait would first look at the signal.
            wait_for(
                lambda: run.poll() is not None,
                timeout=due - time.time(),
                what="the run process to stop before its retry was due",
            )
            status = instance.get_runs(limit=1)[0].status
    finally:
        stop_group(run)

    assert run.returncode != 0
    assert status in (dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.FAILURE), status
    assert attempt_starts(env) == [], "a stopped run must not attempt the partition again"
