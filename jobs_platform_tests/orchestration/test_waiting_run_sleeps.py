"""A run whose step waits for its retry time sleeps, retries on time, and still stops.

Real `dagster job execute` processes on the framework's default executor, against
PostgreSQL. The step waits because another live process (this test) holds its partition's
lease: a snooze of a third of a lease TTL, up to half as long again (`engine.decisions`),
so with a 24 s TTL the wait is 8-12 s, long enough to measure a 6 s window of it.
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

from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.leases import Grant, Leases, release_lease, this_holder
from jobs_platform_tests.commands import start_run
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.waiting import wait_for
from orders_example.orders.seed import seed_orders

DAY = "2024-01-02"
ASSET = "orders"
# A snooze lasts a third of the TTL (times 1 to 1.5): 8-12 s.
LEASE_SECONDS = 24
# A loop that spins uses most of a core (8.8 CPU-s in 10 s measured), one that sleeps
# none (0.00 CPU-s): 6 s of the wait tell them apart as surely as 10 did, and leave
# 2 s for the test to see the snooze before its window opens.
SHORTEST_WINDOW_SECONDS = 6.0
MOST_OF_ONE_CORE = 0.10
# How late after its due time the second attempt may start (process start included).
ALLOWED_LATENESS_SECONDS = 5.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

Events = dg.DagsterEventType


@dataclass(frozen=True)
class CpuSample:
    at: float  # wall clock, comparable with Dagster's event timestamps
    seconds: float  # user + system CPU of the process itself, children not included


def cpu_sample(pid: int) -> CpuSample:
    """The CPU a process has used so far, from /proc/PID/stat (fields 14 and 15)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return CpuSample(time.time(), (utime + stime) / CLOCK_TICKS)


def events_of(instance: dg.DagsterInstance, event_type: dg.DagsterEventType) -> list:
    """The event log entries of the one run in the instance, oldest first."""
    runs = instance.get_runs(limit=1)
    return list(instance.all_logs(runs[0].run_id, of_type=event_type)) if runs else []


def first_snooze(instance: dg.DagsterInstance):
    """The run's first step-up-for-retry event: its step snoozing on the busy partition."""
    return wait_for(
        lambda: events_of(instance, Events.STEP_UP_FOR_RETRY),
        timeout=120,
        what="the step to snooze on the busy partition",
    )[0]


def executor_loop_pid(instance: dg.DagsterInstance) -> int | None:
    """The pid the multiprocess executor reports as its parent process (its loop's)."""
    for entry in events_of(instance, Events.ENGINE_EVENT):
        if "using multiprocess executor: parent process" in entry.message:
            return entry.dagster_event.pid
    return None


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
            first = cpu_sample(run.pid)
            # The partition is free again: the second attempt, when it comes, will finish.
            give_back(env, grant)
            wait_seconds = retry.dagster_event.step_retry_data.seconds_to_wait
            due = retry.timestamp + wait_seconds
            samples = [first]

            def second_attempt_started():
                samples.append(cpu_sample(run.pid))
                return events_of(instance, Events.STEP_RESTARTED)

            restarted = wait_for(
                second_attempt_started,
                timeout=wait_seconds + 60,
                interval=0.2,
                what="the second attempt of the step",
            )[0]
            loop_pid = executor_loop_pid(instance)
        assert run.wait(timeout=120) == 0, (tmp_path / "run.log").read_text()[-3000:]
    finally:
        stop_group(run)

    assert loop_pid == run.pid, "the measured process must be the one running the executor loop"
    # Only what the run process did while nothing but the wait was left.
    last = [sample for sample in samples if sample.at < due][-1]
    window = last.at - first.at
    used = last.seconds - first.seconds
    assert window >= SHORTEST_WINDOW_SECONDS, f"measured only {window:.1f}s of the wait"
    assert used / window < MOST_OF_ONE_CORE, (
        f"the run process used {used:.2f} CPU-s in {window:.1f}s while its step waited "
        f"{wait_seconds:.1f}s for its retry ({used / window:.0%} of a core)"
    )
    started_after = restarted.timestamp - retry.timestamp
    assert wait_seconds <= started_after <= wait_seconds + ALLOWED_LATENESS_SECONDS, (
        f"the second attempt started {started_after:.1f}s after a {wait_seconds:.1f}s wait"
    )


def test_a_run_whose_step_waits_for_its_retry_stops_promptly_when_terminated(
    busy_partition, tmp_path
):
    env, _grant = busy_partition
    run = start_run(env, DAY, log_path=tmp_path / "run.log")
    try:
        with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            retry = first_snooze(instance)
            due = retry.timestamp + retry.dagster_event.step_retry_data.seconds_to_wait
            # Only the run process: it must notice the signal on its own while it waits.
            os.kill(run.pid, signal.SIGTERM)
            # Promptly: before the retry it waits for is due (8-12 s after the snooze), when
            # a run that slept through its wait would first look at the signal.
            wait_for(
                lambda: run.poll() is not None,
                timeout=due - time.time(),
                what="the run process to stop before its retry was due",
            )
            status = instance.get_runs(limit=1)[0].status
            retried = events_of(instance, Events.STEP_RESTARTED)
    finally:
        stop_group(run)

    assert run.returncode != 0
    assert status in (dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.FAILURE), status
    assert not retried, "a stopped run must not retry"
