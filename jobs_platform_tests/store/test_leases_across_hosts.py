"""Specifications of leases between workers that do not share a clock or a PID namespace.

Real processes: `faketime` gives a worker a clock ten minutes off, `unshare --pid` puts a
worker in its own PID namespace on the same host name (as host-network containers are).
"""

from __future__ import annotations

import datetime as dt
import os
import queue
import shutil
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.leases import LeaseBusy, Leases, this_holder
from jobs_platform.store.recovery import Recovery
from jobs_platform.store.schema import attempts
from jobs_platform_tests.clocks import database_now, lease_has_expired
from jobs_platform_tests.waiting import wait_for

ASSET, PARTITION = "items", "2024-01-03"
TEN_MINUTES = dt.timedelta(minutes=10)

# Acquires the lease in a process of its own. Prints first where it runs (its clock, its
# PID namespace), so that a test can check the skew or the isolation it set up is in effect,
# then what happened, then holds until stdin closes (the test decides how long it lives).
_WORKER = textwrap.dedent(
    """
    import os, sys, time
    from jobs_platform.store.clock import DATABASE_CLOCK
    from jobs_platform.store.db import warehouse_engine
    from jobs_platform.engine.warehouse import Warehouse
    from jobs_platform.store.leases import LeaseBusy, this_holder

    print(time.time(), os.readlink("/proc/self/ns/pid"), flush=True)
    store = Warehouse(warehouse_engine(sys.argv[1]), DATABASE_CLOCK)  # as a worker builds it
    try:
        grant = store.leases.acquire(
            "items", "2024-01-03", holder=this_holder(), run_id=None,
            ttl_seconds=float(sys.argv[2]),
        )
    except LeaseBusy:
        print("busy", flush=True)
        sys.exit(0)
    with store.begin() as connection:
        store.attempts.start(
            connection, asset="items", partition="2024-01-03", episode=1, run_id="r",
            step_retry=0, token=grant.lease.token, holder=grant.lease.holder,
            correlation_id=None,
        )
    print("acquired", flush=True)
    sys.stdin.read()
    """
)


@pytest.fixture
def warehouse(upgraded_pg_url) -> sa.Engine:
    return warehouse_engine(upgraded_pg_url)


def _require(command: str) -> str:
    path = shutil.which(command)
    if path is None:
        pytest.fail(f"{command} is required for this test (.ci/run installs it)", pytrace=False)
    return path


def start_worker(url: str, prefix: list[str], ttl: float = 60) -> subprocess.Popen:
    worker = subprocess.Popen(
        [*prefix, sys.executable, "-c", _WORKER, url, str(ttl)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return worker


@dataclass(frozen=True)
class WorkerReport:
    clock: dt.datetime  # the worker's `time.time()` as it started
    pid_namespace: str
    outcome: str  # "acquired" or "busy"


def report_of(worker: subprocess.Popen) -> WorkerReport:
    clock, pid_namespace = next_line(worker).split()
    return WorkerReport(
        dt.datetime.fromtimestamp(float(clock), dt.UTC), pid_namespace, next_line(worker)
    )


def next_line(worker: subprocess.Popen, timeout: float = 60) -> str:
    """The worker's next line of output, read by a thread so that the wait has a deadline."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(worker.stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout).strip()
    except queue.Empty:
        pytest.fail(f"the worker printed nothing for {timeout}s", pytrace=False)


def assert_clock_skewed(
    report: WorkerReport, by: dt.timedelta, started: dt.datetime, reported: dt.datetime
) -> None:
    """The worker's clock read `by` off the database's, which read `started`, then `reported`.

    The worker read its clock between the two, so a skew in effect puts it in that window
    shifted by `by` (a second of slack for the clocks' resolutions); no skew puts it ten
    minutes away.
    """
    slack = dt.timedelta(seconds=1)
    assert started + by - slack <= report.clock <= reported + by + slack, (
        f"the worker's clock read {report.clock}, the database's {started}..{reported}: "
        f"faketime did not shift it by {by}"
    )


def assert_in_own_pid_namespace(report: WorkerReport) -> None:
    assert report.pid_namespace != os.readlink("/proc/self/ns/pid"), "unshare --pid had no effect"


def stop(worker: subprocess.Popen) -> None:
    worker.stdin.close()
    worker.wait(timeout=30)


def acquire_here(engine: sa.Engine, ttl: float = 60):
    return Leases(engine, DATABASE_CLOCK).acquire(
        ASSET, PARTITION, holder=this_holder(), run_id=None, ttl_seconds=ttl
    )


# Clocks


def test_worker_whose_clock_runs_ten_minutes_fast_cannot_take_over_a_live_lease(
    warehouse, upgraded_pg_url
):
    faketime = _require("faketime")
    acquire_here(warehouse, ttl=60)

    started = database_now(warehouse)
    fast = start_worker(upgraded_pg_url, [faketime, "-f", "+10m"])
    try:
        report = report_of(fast)
        assert_clock_skewed(report, TEN_MINUTES, started, database_now(warehouse))
        assert report.outcome == "busy"
    finally:
        stop(fast)


def test_lease_of_a_worker_whose_clock_runs_ten_minutes_slow_is_live_for_the_others(
    warehouse, upgraded_pg_url
):
    faketime = _require("faketime")
    started = database_now(warehouse)
    slow = start_worker(upgraded_pg_url, [faketime, "-f", "-10m"])
    try:
        report = report_of(slow)
        assert_clock_skewed(report, -TEN_MINUTES, started, database_now(warehouse))
        assert report.outcome == "acquired"

        with pytest.raises(LeaseBusy):
            acquire_here(warehouse)
    finally:
        stop(slow)


# PID namespaces


UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc"]


def test_live_holder_in_another_pid_namespace_is_not_judged_dead(warehouse, upgraded_pg_url):
    _require("unshare")
    contained = start_worker(upgraded_pg_url, UNSHARE)
    try:
        report = report_of(contained)
        assert_in_own_pid_namespace(report)
        assert report.outcome == "acquired"

        with pytest.raises(LeaseBusy):
            acquire_here(warehouse)
    finally:
        stop(contained)


def test_worker_in_another_pid_namespace_does_not_judge_a_live_holder_here_dead(
    warehouse, upgraded_pg_url
):
    _require("unshare")
    acquire_here(warehouse)

    contained = start_worker(upgraded_pg_url, UNSHARE)
    try:
        report = report_of(contained)
        assert_in_own_pid_namespace(report)
        assert report.outcome == "busy"
    finally:
        stop(contained)


def test_recovery_does_not_record_a_live_attempt_in_another_pid_namespace_as_a_crash(
    warehouse, upgraded_pg_url
):
    _require("unshare")
    contained = start_worker(upgraded_pg_url, UNSHARE)
    try:
        report = report_of(contained)
        assert_in_own_pid_namespace(report)
        assert report.outcome == "acquired"

        with warehouse.begin() as connection:
            crashed = Recovery(DATABASE_CLOCK).record_abandoned_attempts_everywhere(connection)
        with warehouse.connect() as connection:
            outcomes = connection.execute(sa.select(attempts.c.outcome)).scalars().all()
    finally:
        stop(contained)
    assert crashed == []
    assert outcomes == ["running"]


def test_holder_in_another_pid_namespace_is_taken_over_once_its_lease_expires(
    warehouse, upgraded_pg_url
):
    _require("unshare")
    contained = start_worker(upgraded_pg_url, UNSHARE, ttl=0.5)
    try:
        report = report_of(contained)
        assert_in_own_pid_namespace(report)
        assert report.outcome == "acquired"

        wait_for(
            lambda: lease_has_expired(warehouse, ASSET, PARTITION),
            timeout=30,
            what="the lease to expire on the database's clock",
        )
        grant = acquire_here(warehouse)
    finally:
        stop(contained)
    assert grant.lease.token == 2
