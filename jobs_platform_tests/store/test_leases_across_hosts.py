"""Specifications of leases between workers that do not share a clock or a PID namespace.

Real processes: `faketime` gives a worker a clock ten minutes off, `unshare --pid` puts a
worker in its own PID namespace on the same host name (as host-network containers are).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time

import pytest
import sqlalchemy as sa

from jobs_platform.store.leases import LeaseBusy, acquire_lease, this_holder
from jobs_platform.store.recovery import record_abandoned_attempts_everywhere
from jobs_platform.store.schema import attempts, leases
from jobs_platform_tests.support import upgraded_warehouse

ASSET, PARTITION = "items", "2024-01-03"

# Acquires the lease in a process of its own; prints what happened, then holds until stdin
# closes (so the test decides how long the holder lives).
_WORKER = textwrap.dedent(
    """
    import sys
    from jobs_platform.store.attempts import start_attempt
    from jobs_platform.store.db import warehouse_engine
    from jobs_platform.store.leases import LeaseBusy, acquire_lease, this_holder

    engine = warehouse_engine(sys.argv[1])
    try:
        grant = acquire_lease(
            engine, "items", "2024-01-03", holder=this_holder(), run_id=None,
            ttl_seconds=float(sys.argv[2]),
        )
    except LeaseBusy:
        print("busy", flush=True)
        sys.exit(0)
    with engine.begin() as connection:
        start_attempt(
            connection, asset="items", partition="2024-01-03", episode=1, run_id="r",
            step_retry=0, token=grant.lease.token, holder=grant.lease.holder,
            correlation_id=None,
        )
    print("acquired", flush=True)
    sys.stdin.read()
    """
)


@pytest.fixture
def warehouse(pg_url) -> sa.Engine:
    return upgraded_warehouse(pg_url)


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


def first_line(worker: subprocess.Popen) -> str:
    return worker.stdout.readline().strip()


def stop(worker: subprocess.Popen) -> None:
    worker.stdin.close()
    worker.wait(timeout=30)


def acquire_here(engine: sa.Engine, ttl: float = 60):
    return acquire_lease(
        engine, ASSET, PARTITION, holder=this_holder(), run_id=None, ttl_seconds=ttl
    )


def wait_until_the_lease_expires(engine: sa.Engine, timeout: float = 30) -> None:
    """Until the lease's expiry has passed on the database's clock (the one leases obey)."""
    deadline = time.monotonic() + timeout
    expired = sa.select(leases.c.expires_at <= sa.func.clock_timestamp()).where(
        leases.c.asset == ASSET, leases.c.partition == PARTITION
    )
    while time.monotonic() < deadline:
        with engine.connect() as connection:
            if connection.execute(expired).scalar_one():
                return
        time.sleep(0.05)
    pytest.fail(f"the lease did not expire within {timeout}s")


# Clocks


def test_worker_whose_clock_runs_ten_minutes_fast_cannot_take_over_a_live_lease(warehouse, pg_url):
    faketime = _require("faketime")
    acquire_here(warehouse, ttl=60)

    fast = start_worker(pg_url, [faketime, "-f", "+10m"])
    try:
        assert first_line(fast) == "busy"
    finally:
        stop(fast)


def test_lease_of_a_worker_whose_clock_runs_ten_minutes_slow_is_live_for_the_others(
    warehouse, pg_url
):
    faketime = _require("faketime")
    slow = start_worker(pg_url, [faketime, "-f", "-10m"])
    try:
        assert first_line(slow) == "acquired"

        with pytest.raises(LeaseBusy):
            acquire_here(warehouse)
    finally:
        stop(slow)


# PID namespaces


UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc"]


def test_live_holder_in_another_pid_namespace_is_not_judged_dead(warehouse, pg_url):
    _require("unshare")
    contained = start_worker(pg_url, UNSHARE)
    try:
        assert first_line(contained) == "acquired"

        with pytest.raises(LeaseBusy):
            acquire_here(warehouse)
    finally:
        stop(contained)


def test_worker_in_another_pid_namespace_does_not_judge_a_live_holder_here_dead(warehouse, pg_url):
    _require("unshare")
    acquire_here(warehouse)

    contained = start_worker(pg_url, UNSHARE)
    try:
        assert first_line(contained) == "busy"
    finally:
        stop(contained)


def test_recovery_does_not_record_a_live_attempt_in_another_pid_namespace_as_a_crash(
    warehouse, pg_url
):
    _require("unshare")
    contained = start_worker(pg_url, UNSHARE)
    try:
        assert first_line(contained) == "acquired"

        with warehouse.begin() as connection:
            crashed = record_abandoned_attempts_everywhere(connection)
        with warehouse.connect() as connection:
            outcomes = connection.execute(sa.select(attempts.c.outcome)).scalars().all()
    finally:
        stop(contained)
    assert crashed == []
    assert outcomes == ["running"]


def test_holder_in_another_pid_namespace_is_taken_over_once_its_lease_expires(warehouse, pg_url):
    _require("unshare")
    contained = start_worker(pg_url, UNSHARE, ttl=0.5)
    try:
        assert first_line(contained) == "acquired"

        wait_until_the_lease_expires(warehouse)
        grant = acquire_here(warehouse)
    finally:
        stop(contained)
    assert grant.lease.token == 2
