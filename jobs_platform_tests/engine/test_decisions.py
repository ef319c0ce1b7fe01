"""Specifications of what follows a failed attempt: retry, snooze or quarantine, and when."""

from __future__ import annotations

import random

import pytest

from jobs_platform.engine.decisions import (
    MAX_BACKOFF_SECONDS,
    MIN_SNOOZE_SECONDS,
    Decision,
    NextStep,
    RetryBudget,
    full_jitter_delay,
)
from jobs_platform.engine.decisions import (
    decide as decide_next,
)
from jobs_platform.errors import Classification, Verdict

MAX_ATTEMPTS = 5
BASE = 2.0
LEASE = 60.0


def verdict(classification: Classification, retry_after: float | None = None) -> Verdict:
    return Verdict(classification, retry_after, "test")


def budget(max_attempts: int = MAX_ATTEMPTS) -> RetryBudget:
    return RetryBudget(max_attempts, BASE, lease_seconds=LEASE)


def decide(classification, failures: int, retry_after=None, seed: int = 7) -> Decision:
    return decide_next(
        verdict(classification, retry_after), failures, budget(), random.Random(seed)
    )


# Backoff


@pytest.mark.parametrize("attempt", [1, 2, 3, 4, 5, 8])
def test_backoff_stays_within_zero_and_the_doubling_ceiling(attempt):
    rng = random.Random(attempt)
    ceiling = BASE * 2 ** (attempt - 1)

    delays = [full_jitter_delay(attempt, BASE, rng) for _ in range(500)]

    assert all(0.0 <= delay <= ceiling for delay in delays)


@pytest.mark.parametrize("attempt", [1, 3, 6])
def test_backoff_is_full_jitter_spread_over_the_whole_range(attempt):
    rng = random.Random(1234)
    ceiling = BASE * 2 ** (attempt - 1)

    delays = [full_jitter_delay(attempt, BASE, rng) for _ in range(500)]

    assert min(delays) < 0.1 * ceiling
    assert max(delays) > 0.9 * ceiling


def test_backoff_never_exceeds_the_cap():
    rng = random.Random(3)

    delays = [full_jitter_delay(40, BASE, rng) for _ in range(500)]

    assert max(delays) <= MAX_BACKOFF_SECONDS
    assert max(delays) > 0.9 * MAX_BACKOFF_SECONDS


def test_backoff_honours_an_explicit_cap():
    rng = random.Random(3)

    assert all(full_jitter_delay(10, BASE, rng, cap=1.5) <= 1.5 for _ in range(200))


def test_backoff_with_the_same_seed_gives_the_same_delays():
    first = [full_jitter_delay(n, BASE, random.Random(42)) for n in range(1, 8)]
    second = [full_jitter_delay(n, BASE, random.Random(42)) for n in range(1, 8)]

    assert first == second


@pytest.mark.parametrize("attempt", [0, -3])
def test_backoff_before_the_first_attempt_uses_the_base_ceiling(attempt):
    rng = random.Random(5)

    assert all(full_jitter_delay(attempt, BASE, rng) <= BASE for _ in range(200))


def test_backoff_with_a_zero_base_is_immediate():
    assert full_jitter_delay(4, 0.0, random.Random(1)) == 0.0


# Terminal


@pytest.mark.parametrize("failures", [1, 2, MAX_ATTEMPTS])
def test_terminal_failure_is_quarantined_at_once(failures):
    decision = decide(Classification.TERMINAL, failures)

    assert decision == Decision(NextStep.QUARANTINE)


# Retryable and its kin


@pytest.mark.parametrize(
    "classification",
    [Classification.RETRYABLE, Classification.UNKNOWN, Classification.CRASH],
)
@pytest.mark.parametrize("failures", range(1, MAX_ATTEMPTS))
def test_retryable_failure_below_the_ceiling_is_retried_after_a_bounded_delay(
    classification, failures
):
    decision = decide(classification, failures)

    assert decision.next_step is NextStep.RETRY
    assert 0.0 <= decision.delay_seconds <= BASE * 2 ** (failures - 1)


@pytest.mark.parametrize(
    "classification",
    [Classification.RETRYABLE, Classification.UNKNOWN, Classification.CRASH],
)
@pytest.mark.parametrize("failures", [MAX_ATTEMPTS, MAX_ATTEMPTS + 1])
def test_retryable_failure_at_the_ceiling_is_quarantined(classification, failures):
    decision = decide(classification, failures)

    assert decision == Decision(NextStep.QUARANTINE)


def test_ceiling_of_one_attempt_quarantines_the_first_retryable_failure():
    decision = decide_next(verdict(Classification.RETRYABLE), 1, budget(max_attempts=1))

    assert decision.next_step is NextStep.QUARANTINE


def test_retry_delay_uses_the_given_random_source():
    first = decide(Classification.RETRYABLE, 3, seed=99)
    second = decide(Classification.RETRYABLE, 3, seed=99)

    assert first == second


# Retry-After


@pytest.mark.parametrize("retry_after", [0.0, 0.5, 3.0, 60.0, 1000.0])
def test_retry_after_is_honoured_as_the_least_delay(retry_after):
    decision = decide(Classification.RETRYABLE, 2, retry_after=retry_after)

    assert decision.next_step is NextStep.RETRY
    assert decision.delay_seconds >= retry_after


def test_retry_after_longer_than_the_backoff_is_the_delay():
    decision = decide(Classification.RETRYABLE, 1, retry_after=45.0)

    assert decision.delay_seconds == 45.0


def test_retry_after_does_not_extend_the_attempt_budget():
    decision = decide(Classification.RETRYABLE, MAX_ATTEMPTS, retry_after=5.0)

    assert decision == Decision(NextStep.QUARANTINE)


# Not the input's fault


@pytest.mark.parametrize("classification", [Classification.LEASE_LOST, Classification.INTERRUPTED])
@pytest.mark.parametrize("failures", [0, 1, MAX_ATTEMPTS, MAX_ATTEMPTS + 3])
def test_lost_lease_or_interruption_snoozes_whatever_the_count(classification, failures):
    decision = decide(classification, failures)

    assert decision == Decision(NextStep.SNOOZE, BASE)


# Busy, and failures before any attempt began


@pytest.mark.parametrize("seconds_left", [0.0, 3.0, 45.0])
def test_busy_partition_snoozes_until_the_lease_could_expire_at_most_a_third_ttl(seconds_left):
    rng = random.Random(5)

    delays = [decide_next(None, 0, budget(), rng, busy_for=seconds_left) for _ in range(200)]

    wait = max(MIN_SNOOZE_SECONDS, min(seconds_left, LEASE / 3))
    assert {d.next_step for d in delays} == {NextStep.SNOOZE}
    assert all(wait <= d.delay_seconds <= 1.5 * wait for d in delays)


def test_busy_partition_snoozes_whatever_the_count():
    decision = decide_next(None, MAX_ATTEMPTS + 3, budget(), busy_for=1.0)

    assert decision.next_step is NextStep.SNOOZE


def test_failure_before_the_attempt_began_is_retried_below_the_ceiling():
    decision = decide_next(
        verdict(Classification.RETRYABLE), 1, budget(), random.Random(1), attempt_started=False
    )

    assert decision.next_step is NextStep.RETRY
    assert 0 <= decision.delay_seconds <= BASE


@pytest.mark.parametrize(
    ("classification", "failures"),
    [(Classification.RETRYABLE, MAX_ATTEMPTS), (Classification.TERMINAL, 1)],
)
def test_failure_before_the_attempt_began_gives_up_instead_of_quarantining(
    classification, failures
):
    decision = decide_next(verdict(classification), failures, budget(), attempt_started=False)

    assert decision.next_step is NextStep.GIVE_UP
