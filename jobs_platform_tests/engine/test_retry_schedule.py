"""When each partition of a retrying step is due again (`engine.retry_schedule`, pure)."""

from __future__ import annotations

import pytest

from jobs_platform.engine.retry_schedule import (
    MIN_WAIT_SECONDS,
    Pending,
    RetrySchedule,
    Waiting,
    due_now,
    schedule_retry,
)

CLOCK = "host:boot"


def waiting(partition: str, delay: float, *, decided_at: float = 100.0, tries: int = 1, **kw):
    return Waiting("orders", partition, delay, decided_at, tries, **kw)


def test_the_step_waits_for_the_first_partition_due_and_each_keeps_its_own_delay():
    # The outage of the issue: one partition told 0.361 s, two told 6.9 s and 8.0 s.
    schedule = schedule_retry(
        [waiting("a", 0.361), waiting("b", 6.9), waiting("c", 8.0)], clock=CLOCK, now=100.0
    )

    assert schedule.wait_seconds == 0.361
    waited = schedule.waited(CLOCK, 100.0 + 0.361)
    assert due_now(schedule, "orders", "a", waited=waited, step_retry=1).attempt
    for partition, remaining in (("b", 6.9 - 0.361), ("c", 8.0 - 0.361)):
        due = due_now(schedule, "orders", partition, waited=waited, step_retry=1)
        assert not due.attempt
        assert due.remaining_seconds == pytest.approx(remaining)
        assert due.tries_before == 1  # skipped: no try spent


def test_time_spent_after_a_partition_failed_counts_toward_its_delay():
    # "b" failed 3 s before the step ended: 2 s of its 5 s are left when the step asks.
    schedule = schedule_retry(
        [waiting("a", 1.0, decided_at=103.0), waiting("b", 5.0, decided_at=100.0)],
        clock=CLOCK,
        now=103.0,
    )

    assert [p.due_in for p in schedule.pending] == [1.0, 2.0]
    assert schedule.wait_seconds == 1.0


def test_a_delay_that_passed_during_the_step_makes_the_partition_due_at_once():
    schedule = schedule_retry([waiting("a", 0.5, decided_at=90.0)], clock=CLOCK, now=100.0)

    assert schedule.pending[0].due_in == 0.0
    assert schedule.wait_seconds == MIN_WAIT_SECONDS


def test_the_wait_is_measured_on_the_same_clock_and_never_counted_shorter_than_asked():
    schedule = schedule_retry([waiting("a", 2.0)], clock=CLOCK, now=100.0)

    assert schedule.waited(CLOCK, 105.5) == pytest.approx(5.5)  # a slow restart counts
    assert schedule.waited(CLOCK, 100.5) == 2.0  # Dagster waited at least what was asked
    assert schedule.waited("other-host:boot", 999.0) == 2.0  # another clock: what was asked
    assert schedule.waited("", 999.0) == 2.0


def test_a_wait_left_to_the_next_try_asks_dagster_for_none_and_is_slept_by_the_try():
    schedule = schedule_retry([waiting("a", 9.0)], clock=CLOCK, now=100.0, waits_in_next_try=True)

    assert schedule.wait_seconds == 9.0
    assert schedule.dagster_wait_seconds == 0.0
    # The next try began 0.8 s after the step asked, on the same host: 8.2 s are left.
    assert schedule.left_to_sleep(CLOCK, 100.8) == pytest.approx(8.2)
    assert schedule.left_to_sleep(CLOCK, 112.0) == 0.0  # a slow restart waited enough
    # On another clock nothing was measured: the whole wait is slept.
    assert schedule.left_to_sleep("other-host:boot", 5.0) == 9.0


def test_a_try_that_slept_its_wait_has_waited_it_on_any_clock():
    schedule = schedule_retry([waiting("a", 9.0)], clock=CLOCK, now=100.0, waits_in_next_try=True)

    assert schedule.waited(CLOCK, 109.0) == pytest.approx(9.0)  # measured, sleep included
    assert schedule.waited("other-host:boot", 5.0, slept=9.0) == 9.0
    assert due_now(schedule, "orders", "a", waited=9.0, step_retry=1).attempt


def test_a_wait_dagster_waited_leaves_nothing_to_sleep():
    schedule = schedule_retry([waiting("a", 9.0)], clock=CLOCK, now=100.0)

    assert schedule.dagster_wait_seconds == 9.0
    assert schedule.left_to_sleep(CLOCK, 100.8) == 0.0
    assert schedule.left_to_sleep("other-host:boot", 5.0) == 0.0


def test_a_partition_is_never_attempted_before_its_delay():
    schedule = schedule_retry([waiting("a", 1.0), waiting("b", 3.0)], clock=CLOCK, now=100.0)

    # A step try that began 2.999 s after asking: "b" is due in 1 ms, not now.
    due = due_now(schedule, "orders", "b", waited=2.999, step_retry=1)
    assert not due.attempt
    assert due.remaining_seconds == pytest.approx(0.001)
    assert due_now(schedule, "orders", "b", waited=3.0, step_retry=1).attempt


def test_tries_count_the_partitions_own_attempts_not_the_steps():
    schedule = RetrySchedule(
        (Pending("orders", "a", 0.0, tries=1), Pending("orders", "b", 9.0, tries=3)),
        clock=CLOCK,
        asked_at=0.0,
    )

    assert due_now(schedule, "orders", "a", waited=1.0, step_retry=7).tries_before == 1
    assert due_now(schedule, "orders", "b", waited=1.0, step_retry=7).tries_before == 3
    # Not in the schedule (it finished, or is quarantined or blocked): due, no tries yet.
    assert due_now(schedule, "orders", "z", waited=1.0, step_retry=7).tries_before == 0


def test_without_a_schedule_every_partition_is_due_with_the_steps_tries():
    # The first try, or a try after one that died before it could say anything.
    due = due_now(None, "orders", "a", waited=0.0, step_retry=4)

    assert due.attempt and due.tries_before == 4


def test_a_partition_that_gave_up_is_due_at_once_and_does_not_set_the_wait():
    schedule = schedule_retry(
        [waiting("a", 0.0, tries=5, next_step="give_up"), waiting("b", 4.0, next_step="snooze")],
        clock=CLOCK,
        now=100.0,
    )

    assert schedule.wait_seconds == 4.0
    gave_up = due_now(schedule, "orders", "a", waited=4.0, step_retry=5)
    assert gave_up.attempt and gave_up.tries_before == 5
    snoozing = due_now(schedule, "orders", "b", waited=1.0, step_retry=5)
    assert (snoozing.attempt, snoozing.next_step) == (False, "snooze")


def test_a_step_retries_only_when_some_partition_waits():
    with pytest.raises(ValueError, match="some partition waits"):
        schedule_retry([waiting("a", 0.0, next_step="give_up")], clock=CLOCK, now=100.0)


def test_the_schedule_travels_as_plain_values_per_partition():
    schedule = schedule_retry(
        [waiting("a", 1.25, tries=2), waiting("b", 3.0, next_step="snooze")], clock=CLOCK, now=7.0
    )
    records = {(p.asset, p.partition): schedule.to_record(p) for p in schedule.pending}

    assert all(
        isinstance(value, str | int | float)
        for entry in records.values()
        for value in entry.values()
    )
    assert RetrySchedule.from_records(records) == schedule
    assert RetrySchedule.from_records({}) is None
    slept = schedule_retry([waiting("a", 1.0)], clock=CLOCK, now=7.0, waits_in_next_try=True)
    records = {(p.asset, p.partition): slept.to_record(p) for p in slept.pending}
    assert RetrySchedule.from_records(records) == slept


def test_a_schedule_logged_before_tries_could_sleep_reads_as_waited_by_dagster():
    record = {"due_in": 2.0, "tries": 1, "next_step": "retry", "clock": CLOCK, "asked_at": 5.0}
    schedule = RetrySchedule.from_records({("orders", "a"): record})

    assert schedule is not None and not schedule.waits_in_next_try
