"""Specifications of the stuck-attempt rescuer: which attempts are abandoned, which runs died.

Time is a `ManualClock` that the test moves by hand, so a lease expires without sleeping.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from jobs_platform.store.recovery import (
    Recovery,
)
from jobs_platform.store.schema import attempts
from jobs_platform_tests.clocks import ManualClock
from jobs_platform_tests.store.factories import (
    AT,
    PARTITION,
    SECOND,
    a_dead_holder,
    a_lease,
    an_attempt,
)

TTL = 30  # seconds: how long the factories' leases live
GRACE = 60.0


@pytest.fixture
def clock() -> ManualClock:
    """The lease clock, at the moment the factories' leases were acquired."""
    return ManualClock(AT)


def in_flight(
    connection: sa.Connection,
    *,
    partition: str = PARTITION,
    run_id: str = "run-1",
    holder: str = "worker-a",
    token: int = 1,
) -> int:
    """A running attempt under its own lease, live for TTL seconds from AT."""
    attempt_id = an_attempt(
        connection,
        partition=partition,
        outcome="running",
        token=token,
        holder=holder,
        run_id=run_id,
        started_at=AT,
    )
    a_lease(
        connection,
        partition=partition,
        token=token,
        holder=holder,
        run_id=run_id,
        attempt_id=attempt_id,
        acquired_at=AT,
        expires_at=AT + TTL * SECOND,
    )
    return attempt_id


def attempt_row(connection: sa.Connection, attempt_id: int) -> sa.Row:
    return connection.execute(sa.select(attempts).where(attempts.c.id == attempt_id)).one()


def recorded_crashes(connection: sa.Connection, clock: ManualClock) -> list[int]:
    return [row.id for row in Recovery(clock).record_abandoned_attempts_everywhere(connection)]


# Abandoned attempts


def test_an_attempt_under_a_live_lease_is_left_running(connection, clock):
    attempt_id = in_flight(connection)
    clock.advance(TTL - 1)

    assert recorded_crashes(connection, clock) == []
    assert attempt_row(connection, attempt_id).outcome == "running"


def test_an_expired_leases_running_attempt_is_recorded_as_a_crash_at_the_clocks_time(
    connection, clock
):
    attempt_id = in_flight(connection)
    clock.advance(TTL)

    crashed = recorded_crashes(connection, clock)

    row = attempt_row(connection, attempt_id)
    assert crashed == [attempt_id]
    assert (row.outcome, row.error_class, row.error_type, row.ended_at) == (
        "failed",
        "crash",
        "WorkerLost",
        AT + TTL * SECOND,
    )


def test_an_attempt_whose_lease_moved_to_a_newer_token_is_a_crash(connection, clock):
    old = an_attempt(connection, outcome="running", token=1, holder="worker-a")
    newer = in_flight(connection, token=2, holder="worker-b")

    crashed = recorded_crashes(connection, clock)

    assert crashed == [old]
    assert attempt_row(connection, newer).outcome == "running"


def test_the_attempt_of_a_dead_holder_is_a_crash_before_its_lease_expires(connection, clock):
    attempt_id = in_flight(connection, holder=a_dead_holder())

    assert recorded_crashes(connection, clock) == [attempt_id]


def test_an_attempt_under_a_live_lease_in_another_pid_namespace_is_not_abandoned(connection, clock):
    # The same pid, exited, is dead here; in its own PID namespace it may be a live process.
    in_flight(connection, holder=a_dead_holder(pid_namespace="4026539999"))

    assert recorded_crashes(connection, clock) == []


def test_a_holder_of_another_pid_namespace_is_abandoned_once_its_lease_expires(connection, clock):
    attempt_id = in_flight(connection, holder=a_dead_holder(pid_namespace="4026539999"))
    clock.advance(TTL)

    assert recorded_crashes(connection, clock) == [attempt_id]


def test_finished_attempts_under_an_expired_lease_keep_their_outcome(connection, clock):
    failed = an_attempt(connection, error_class="terminal", token=1)
    a_lease(connection, token=1, expires_at=AT)
    clock.advance(TTL)

    crashed = recorded_crashes(connection, clock)

    assert crashed == []
    assert attempt_row(connection, failed).error_class == "terminal"


def test_an_attempt_is_recorded_as_a_crash_only_once(connection, clock):
    attempt_id = in_flight(connection)
    clock.advance(TTL)
    first = recorded_crashes(connection, clock)
    clock.advance(TTL)

    again = recorded_crashes(connection, clock)

    assert (first, again) == ([attempt_id], [])
    assert attempt_row(connection, attempt_id).ended_at == AT + TTL * SECOND


# Runs whose worker died


def test_only_runs_with_an_attempt_under_a_live_lease_are_live(connection, clock):
    in_flight(connection, partition="2024-01-01", run_id="working")
    an_attempt(connection, partition="2024-01-02", outcome="running", run_id="overtaken")
    a_lease(connection, partition="2024-01-02", token=2, holder="worker-b", run_id="another")
    an_attempt(connection, partition="2024-01-03", run_id="finished", outcome="succeeded")
    runs = ["working", "overtaken", "finished", "unknown"]

    assert Recovery(clock).runs_with_live_attempts(connection, runs) == {"working"}
    clock.advance(TTL)
    assert Recovery(clock).runs_with_live_attempts(connection, runs) == set()


def test_a_run_whose_crash_is_older_than_the_grace_died(connection, clock):
    in_flight(connection, run_id="run-1")
    clock.advance(TTL)
    recorded_crashes(connection, clock)
    clock.advance(GRACE + 1)

    assert Recovery(clock).runs_whose_worker_died(connection, ["run-1"], GRACE) == {"run-1"}


def test_a_run_whose_crash_is_younger_than_the_grace_is_not_failed(connection, clock):
    in_flight(connection, run_id="run-1")
    clock.advance(TTL)
    recorded_crashes(connection, clock)
    clock.advance(GRACE - 1)

    assert Recovery(clock).runs_whose_worker_died(connection, ["run-1"], GRACE) == set()


def test_a_run_still_working_on_another_partition_is_not_failed(connection, clock):
    in_flight(connection, partition="2024-01-01", run_id="run-1")
    an_attempt(connection, partition="2024-01-02", error_class="crash", run_id="run-1", ended_at=AT)
    clock.advance(TTL - 1)

    assert Recovery(clock).runs_whose_worker_died(connection, ["run-1"], grace_seconds=0) == set()


def test_a_run_whose_latest_attempt_is_not_a_crash_is_not_failed(connection, clock):
    # Its run worker survived the crash: it retried the step, which then failed and reported.
    an_attempt(connection, error_class="crash", run_id="run-1", token=1, ended_at=AT)
    an_attempt(connection, error_class="retryable", run_id="run-1", token=2)
    clock.advance(10 * GRACE)

    assert Recovery(clock).runs_whose_worker_died(connection, ["run-1"], GRACE) == set()
