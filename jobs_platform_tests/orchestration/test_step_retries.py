"""A retried step sleeps what is left of its retry time before it attempts anything
(`orchestration.step_retries.StepTry.sleep_until_due`)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from jobs_platform.engine.retry_schedule import Waiting, schedule_retry
from jobs_platform.orchestration.step_retries import SLEEP_SLICE_SECONDS, StepTry


def a_try(previous=None, *, to_sleep: float = 0.0) -> StepTry:
    logged: list[str] = []
    log = SimpleNamespace(info=logged.append)
    context = SimpleNamespace(retry_number=1, log=log, logged=logged)
    return StepTry(
        context,  # type: ignore[arg-type]  # what a try reads of its context
        ["orders"],
        ["2024-01-02"],
        previous=previous,
        to_sleep=to_sleep,
        clock="another-host:boot",
    )


def test_a_try_sleeps_its_wait_in_slices_a_termination_can_interrupt():
    slices: list[float] = []

    def sleep(seconds: float) -> None:
        slices.append(seconds)
        time.sleep(seconds)

    step = a_try(to_sleep=0.6)
    began = time.monotonic()
    step.sleep_until_due(sleep)

    assert time.monotonic() - began >= 0.6
    assert slices and max(slices) <= SLEEP_SLICE_SECONDS
    assert step.context.logged == [  # type: ignore[attr-defined]  # the test's context
        "waiting 0.6s for the retry time of its first partition due"
    ]
    # Once slept, the try begins anew and sleeps no more.
    assert step.began >= began + 0.6 and step.to_sleep == 0.0


def test_a_try_that_slept_its_wait_on_another_host_counts_it_as_waited():
    # The step asked on "host:boot" to be tried again in 2 s, leaving the wait to the try.
    waiting = Waiting("orders", "2024-01-02", 2.0, decided_at=10.0, tries=1)
    schedule = schedule_retry([waiting], clock="host:boot", now=10.0, waits_in_next_try=True)
    step = a_try(schedule, to_sleep=schedule.left_to_sleep("another-host:boot", 0.0))
    assert step.to_sleep == 2.0

    step.slept = step.to_sleep  # as `sleep_until_due` leaves it, without the sleep

    assert step.waited == pytest.approx(2.0)
    assert step.due("orders", "2024-01-02").attempt


def test_a_try_with_nothing_left_to_sleep_does_not_sleep():
    def sleep(seconds: float) -> None:
        raise AssertionError(f"slept {seconds}s")

    a_try().sleep_until_due(sleep)
