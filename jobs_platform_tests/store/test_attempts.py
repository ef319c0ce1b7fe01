"""Specifications of the attempt history: every attempt kept, and which ones spend the budget."""

from __future__ import annotations

import sqlalchemy as sa

from jobs_platform.errors import Classification
from jobs_platform.store.attempts import (
    AttemptFailure,
    Attempts,
    BudgetState,
    attempt_history,
    budget_state,
    failing_streak,
)
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.schema import attempts
from jobs_platform_tests.clocks import ManualClock
from jobs_platform_tests.store.factories import ASSET, AT, PARTITION, SECOND, an_attempt


def start(connection: sa.Connection, *, episode: int = 1, token: int = 1) -> tuple[int, int]:
    return Attempts(DATABASE_CLOCK).start(
        connection,
        asset=ASSET,
        partition=PARTITION,
        episode=episode,
        run_id="run-1",
        step_retry=0,
        token=token,
        holder="worker-a",
        correlation_id="request-7",
    )


def attempt_row(connection: sa.Connection, attempt_id: int) -> sa.Row:
    return connection.execute(sa.select(attempts).where(attempts.c.id == attempt_id)).one()


def counted(connection: sa.Connection, episode: int = 1) -> int:
    return budget_state(connection, ASSET, PARTITION, episode).counted_failures


# Starting and finishing


def test_attempts_are_numbered_within_their_episode(connection):
    numbers = [start(connection, episode=1)[1], start(connection, episode=1)[1]]

    numbers.append(start(connection, episode=2)[1])

    assert numbers == [1, 2, 1]


def test_finishing_without_a_failure_records_a_success(connection):
    attempt_id, _ = start(connection)

    Attempts(DATABASE_CLOCK).finish(connection, attempt_id)

    row = attempt_row(connection, attempt_id)
    assert (row.outcome, row.error_class) == ("succeeded", None)
    assert row.ended_at is not None


def test_finishing_with_a_failure_keeps_its_class_type_message_and_traceback(connection):
    attempt_id, _ = start(connection)
    trace = "Traceback (most recent call last): ..."
    failure = AttemptFailure(Classification.TERMINAL, "InputValidationError", "line 3", trace)

    Attempts(DATABASE_CLOCK).finish(connection, attempt_id, failure)

    row = attempt_row(connection, attempt_id)
    assert (row.outcome, row.error_class, row.error_type, row.message, row.traceback) == (
        "failed",
        "terminal",
        "InputValidationError",
        "line 3",
        trace,
    )


def test_a_success_reported_by_its_own_worker_clears_a_recorded_crash(connection):
    attempt_id = an_attempt(connection, outcome="running", token=1)
    Attempts(ManualClock(AT)).record_abandoned(connection, ASSET, PARTITION, before_token=2)

    Attempts(DATABASE_CLOCK).finish(connection, attempt_id)

    row = attempt_row(connection, attempt_id)
    assert (row.outcome, row.error_class, row.error_type, row.message) == (
        "succeeded",
        None,
        None,
        None,
    )


# What spends the budget


def test_retryable_terminal_crash_and_unknown_failures_each_count(connection):
    for error_class in ("retryable", "terminal", "crash", "unknown"):
        an_attempt(connection, error_class=error_class)

    assert counted(connection) == 4


def test_lease_lost_and_interrupted_attempts_do_not_count_toward_the_ceiling(connection):
    # Losing the lease or being shut down says nothing about the input.
    an_attempt(connection, error_class="retryable")
    an_attempt(connection, error_class="lease_lost")
    an_attempt(connection, error_class="interrupted")

    assert counted(connection) == 1


def test_the_budget_state_names_the_class_of_the_last_failure_counted_or_not(connection):
    assert budget_state(connection, ASSET, PARTITION, 1) == BudgetState(0, None)
    an_attempt(connection, error_class="retryable")
    an_attempt(connection, error_class="lease_lost")

    state = budget_state(connection, ASSET, PARTITION, 1)

    assert (state.counted_failures, state.last_class) == (1, Classification.LEASE_LOST)


def test_the_streak_restarts_after_a_success(connection):
    an_attempt(connection, error_class="retryable")
    an_attempt(connection, error_class="crash")
    an_attempt(connection, outcome="succeeded")
    after_success = an_attempt(connection, error_class="unknown")

    assert counted(connection) == 1
    assert [row.id for row in failing_streak(connection, ASSET, PARTITION, 1)] == [after_success]


def test_failures_of_an_earlier_episode_do_not_count_in_a_new_one(connection):
    for _ in range(3):
        an_attempt(connection, episode=1)
    an_attempt(connection, episode=2)

    assert (counted(connection, episode=1), counted(connection, episode=2)) == (3, 1)


def test_the_streak_lists_uncounted_failures_too_oldest_first(connection):
    ids = [
        an_attempt(connection, error_class="retryable"),
        an_attempt(connection, error_class="lease_lost"),
        an_attempt(connection, error_class="interrupted"),
    ]

    streak = failing_streak(connection, ASSET, PARTITION, 1)

    assert [(row.id, row.error_class) for row in streak] == [
        (ids[0], "retryable"),
        (ids[1], "lease_lost"),
        (ids[2], "interrupted"),
    ]


# Abandoned attempts, found by the next lease holder


def test_running_attempts_of_older_tokens_are_recorded_as_crashes_at_the_given_time(connection):
    older = [an_attempt(connection, outcome="running", token=t) for t in (1, 2)]
    now = AT + 90 * SECOND

    marked = Attempts(ManualClock(now)).record_abandoned(
        connection, ASSET, PARTITION, before_token=3
    )

    rows = [attempt_row(connection, attempt_id) for attempt_id in older]
    assert marked == 2
    assert [(r.outcome, r.error_class, r.error_type, r.ended_at) for r in rows] == [
        ("failed", "crash", "WorkerLost", now),
        ("failed", "crash", "WorkerLost", now),
    ]


def test_the_current_tokens_attempt_and_finished_attempts_are_not_crashes(connection):
    failed = an_attempt(connection, error_class="terminal", token=1)
    succeeded = an_attempt(connection, outcome="succeeded", token=2)
    current = an_attempt(connection, outcome="running", token=3)

    marked = Attempts(ManualClock(AT)).record_abandoned(
        connection, ASSET, PARTITION, before_token=3
    )

    outcomes = [attempt_row(connection, i).outcome for i in (failed, succeeded, current)]
    assert (marked, outcomes) == (0, ["failed", "succeeded", "running"])
    assert attempt_row(connection, failed).error_class == "terminal"


# The history


def test_history_keeps_every_attempt_of_every_episode_oldest_first(connection):
    ids = [
        an_attempt(connection, episode=1, error_class="terminal"),
        an_attempt(connection, episode=2, outcome="succeeded"),
        an_attempt(connection, episode=2, outcome="running"),
    ]
    an_attempt(connection, partition="2024-01-02")

    history = attempt_history(connection, ASSET, PARTITION)

    assert [(row.id, row.episode, row.attempt) for row in history] == [
        (ids[0], 1, 1),
        (ids[1], 2, 1),
        (ids[2], 2, 2),
    ]
