"""dagster-celery's executor with a result wait that ends.

dagster-celery's loop polls each step's Celery result until it is ready. When no worker
will ever report (the worker died with the task acknowledged, or the run was terminated
and its revoked task's worker is gone) it polls for ever, and a terminated run process
keeps waiting for its revoked tasks. `BoundedResult` wraps each result so that the same
loop sees it ready, failed, once its deadline passes, and revoked once a termination's
grace period passes. The loop itself is dagster-celery's, unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg
from celery.exceptions import TaskRevokedError

from jobs_platform.errors import JobsPlatformError

# dagster-celery's task submission and polling loop, reused as they are (private: shims).
from jobs_platform.orchestration._compat import (
    CELERY_CONFIG,
    CeleryExecutor,
    celery_execution_loop,
    retry_mode_from_config,
    submit_celery_task,
)
from jobs_platform.orchestration.step_bounds import STEP_OVERHEAD_SECONDS, STOP_GRACE_SECONDS
from jobs_platform.settings import DEFAULT_ATTEMPT_TIMEOUT_SECONDS, DEFAULT_LEASE_SECONDS

DEFAULT_RESULT_TIMEOUT_SECONDS = (
    DEFAULT_ATTEMPT_TIMEOUT_SECONDS + DEFAULT_LEASE_SECONDS + STEP_OVERHEAD_SECONDS
)
BOUNDED_CELERY_CONFIG = {
    **CELERY_CONFIG,
    "result_timeout_seconds": dg.Field(
        float,
        is_required=False,
        default_value=DEFAULT_RESULT_TIMEOUT_SECONDS,
        description="A step whose result has not arrived this long after it was submitted "
        "fails the run; the deadline of one attempt plus a lease TTL plus start-up.",
    ),
    "stop_grace_seconds": dg.Field(
        float,
        is_required=False,
        default_value=STOP_GRACE_SECONDS,
        description="After the run is terminated, how long to wait for revoked steps to "
        "report before the run stops waiting for them.",
    ),
}


class StepResultTimeout(JobsPlatformError):
    """No Celery worker reported a step's result before its deadline."""


class BoundedResult:
    """A Celery `AsyncResult` that turns ready, failed, when it has waited long enough."""

    def __init__(
        self,
        result,
        *,
        step_key: str,
        timeout_seconds: float,
        stop_grace_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._result = result
        self._step_key = step_key
        self._timeout_seconds = timeout_seconds
        self._stop_grace_seconds = stop_grace_seconds
        self._clock = clock
        self._deadline = clock() + timeout_seconds
        self._revoked_at: float | None = None

    def ready(self) -> bool:
        if self._result.ready():
            return True
        now = self._clock()
        if self._revoked_at is not None:
            return now >= self._revoked_at + self._stop_grace_seconds
        return now >= self._deadline

    def get(self):
        if self._result.ready():
            return self._result.get()
        if self._revoked_at is not None:
            raise TaskRevokedError(
                f"step {self._step_key} was revoked and no worker reported it within "
                f"{self._stop_grace_seconds:g}s"
            )
        # Revoked so that a copy still queued does not run for a run that has failed.
        self._result.revoke()
        raise StepResultTimeout(
            f"no Celery worker reported step {self._step_key} within "
            f"{self._timeout_seconds:g}s of its submission (task {self._result.id}); "
            "are workers running and listening to this broker?"
        )

    def revoke(self) -> None:
        if self._revoked_at is None:
            self._revoked_at = self._clock()
        self._result.revoke()


class BoundedCeleryExecutor(CeleryExecutor):
    """dagster-celery's executor whose wait for each step's result is bounded."""

    def __init__(self, *, result_timeout_seconds: float, stop_grace_seconds: float, **kwargs):
        super().__init__(**kwargs)
        self.result_timeout_seconds = result_timeout_seconds
        self.stop_grace_seconds = stop_grace_seconds

    def execute(self, plan_context, execution_plan):
        return celery_execution_loop(plan_context, execution_plan, self._submit_bounded)

    def _submit_bounded(self, app, plan_context, step, queue, priority, known_state):
        return BoundedResult(
            submit_celery_task(app, plan_context, step, queue, priority, known_state),
            step_key=step.key,
            timeout_seconds=self.result_timeout_seconds,
            stop_grace_seconds=self.stop_grace_seconds,
        )


@dg.executor(
    name="celery",
    config_schema=BOUNDED_CELERY_CONFIG,
    requirements=dg.multiple_process_executor_requirements(),
)
def bounded_celery_executor(init_context: dg.InitExecutorContext) -> BoundedCeleryExecutor:
    """Steps run on Celery workers; a step's result is awaited for a bounded time."""
    config: Mapping[str, Any] = init_context.executor_config
    return BoundedCeleryExecutor(
        broker=config.get("broker"),
        backend=config.get("backend"),
        config_source=config.get("config_source"),
        include=config.get("include"),
        retries=retry_mode_from_config(config["retries"]),
        result_timeout_seconds=config["result_timeout_seconds"],
        stop_grace_seconds=config["stop_grace_seconds"],
    )
