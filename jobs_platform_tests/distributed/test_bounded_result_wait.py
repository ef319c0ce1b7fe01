"""The run's wait for a step's Celery result ends: at the step's deadline, or a grace
period after the run was terminated. Real Celery results on Redis; the clock is injected,
so nothing here sleeps."""

from __future__ import annotations

import uuid

import pytest
from celery import Celery
from celery.exceptions import TaskRevokedError

from jobs_platform.orchestration.celery_executor import BoundedResult, StepResultTimeout


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def pending_result(redis_url):
    """The result of a task no worker will ever run: Celery reports it PENDING for ever."""
    app = Celery("jp_test", broker=redis_url, backend=redis_url)
    try:
        yield app.AsyncResult(str(uuid.uuid4()))
    finally:
        app.close()


def test_a_result_no_worker_reports_turns_failed_at_the_step_deadline(pending_result):
    clock = Clock()
    bounded = BoundedResult(
        pending_result, step_key="orders", timeout_seconds=600, stop_grace_seconds=30, clock=clock
    )

    clock.now += 599
    assert not bounded.ready()
    clock.now += 1
    assert bounded.ready()
    with pytest.raises(StepResultTimeout, match="step orders within 600s"):
        bounded.get()


def test_a_revoked_result_no_worker_reports_ends_after_the_grace_period(pending_result):
    clock = Clock()
    bounded = BoundedResult(
        pending_result, step_key="orders", timeout_seconds=600, stop_grace_seconds=30, clock=clock
    )

    bounded.revoke()
    clock.now += 29
    assert not bounded.ready()
    clock.now += 1
    assert bounded.ready()
    with pytest.raises(TaskRevokedError, match="orders was revoked"):
        bounded.get()
