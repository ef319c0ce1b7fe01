"""Shims over Dagster's private API (`dagster._…`, dagster-celery's internals): the
framework imports them here and nowhere else.

Each was read on Dagster 1.12.22 and 1.13.27 (dagster-celery 0.28.22, 0.29.27), the ends
of the supported range. `jobs_platform_tests/orchestration/test_compat.py` has a test per shim;
it fails, naming the installed release, when a name or shape a shim relies on changes.
dagster-celery's shims import it when called, so this module loads without the extra.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster._core.execution.backfill import BulkActionStatus
from dagster._core.execution.retries import RetryMode

if TYPE_CHECKING:
    from dagster._core.execution.backfill import PartitionBackfill
    from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor

__all__ = [
    "CELERY_CONFIG",
    "FRAMEWORK_JOB_RECONSTRUCTOR",
    "INSTANCE_STORAGE_MODULES",
    "RUN_QUEUE_DAEMON",
    "SENSOR_DAEMON",
    "CeleryExecutor",
    "RetryMode",
    "backfill_is_busy",
    "backfill_succeeded",
    "celery_execution_loop",
    "daemon_heartbeats",
    "failed_step_cause",
    "job_module_name",
    "retry_mode_from_config",
    "run_location_module",
    "sensor_location_module",
    "submit_celery_task",
]

# What a step process imports to build its instance from the run's `InstanceRef`, and
# neither `dagster` nor a code location does: the storages' base, with their SQLAlchemy
# schemas and Alembic (~0.35 CPU s a step; docs/BENCHMARKS.md, "Scratch in memory").
# A forkserver that preloads it pays that once for every step it forks. Python's
# forkserver ignores a preload module it cannot import: test_compat checks it exists.
INSTANCE_STORAGE_MODULES = ("dagster._core.storage.base_storage",)


def job_module_name(job: object) -> str | None:
    """The module a run's job was loaded from; None for a file or an in-memory job.

    An executor's `InitExecutorContext.job` is a `ReconstructableJob` (`get_module()`) for
    a run launched from a code location; under `execute_in_process` it has no `get_module`.
    """
    get_module = getattr(job, "get_module", None)
    return get_module() if get_module is not None else None


def run_location_module(run: dg.DagsterRun) -> str | None:
    """The module of the code location a run was launched from, as `-m` names it; None
    for a run that names none (`dg.materialize`, `execute_in_process`).

    A run's `job_code_origin.repository_origin.code_pointer` has `.module` (a module or
    package) or `.python_file` (`-f FILE`, imported as the file's stem). A run the
    framework executes itself carries `build_reconstructable_job`'s `CustomPointer`: its
    `reconstructable_kwargs` name the location's module as `module`.
    """
    repository = getattr(run.job_code_origin, "repository_origin", None)
    pointer = getattr(repository, "code_pointer", None)
    module = getattr(pointer, "module", None) or _reconstructed_location(pointer)
    return _module_named_by(module, getattr(pointer, "python_file", None))


# The function that rebuilds, in each step process, the job of a run the framework executes
# itself (`jobs-platform dead-letter requeue --wait` where no daemon runs); its argument
# `module` is the code location's module.
FRAMEWORK_JOB_RECONSTRUCTOR = ("jobs_platform.dead_letter.requeue_execution", "requeue_run_job")


def _reconstructed_location(pointer: object) -> str | None:
    reconstructor = getattr(pointer, "reconstructor_pointer", None)
    named = (getattr(reconstructor, "module", None), getattr(reconstructor, "fn_name", None))
    if named != FRAMEWORK_JOB_RECONSTRUCTOR:
        return None
    kwargs = dict(getattr(pointer, "reconstructable_kwargs", None) or [])
    module = kwargs.get("module")
    return module if isinstance(module, str) else None


def sensor_location_module(context: dg.SensorEvaluationContext) -> str | None:
    """The module of the code location a sensor tick runs in, as `-m` names it; None when
    Dagster does not say (a tick built in a test, a location on its own code server).

    A location Dagster starts itself has a `loadable_target_origin` naming `module_name`,
    `package_name` or `python_file`; a `dagster code-server` of its own raises instead.
    """
    origin = context.code_location_origin
    try:
        target = origin.loadable_target_origin if origin is not None else None
    except dg.DagsterInvariantViolationError:  # a GrpcServerCodeLocationOrigin's answer
        target = None
    module = getattr(target, "module_name", None) or getattr(target, "package_name", None)
    return _module_named_by(module, getattr(target, "python_file", None))


def _module_named_by(module: object, python_file: object) -> str | None:
    if isinstance(module, str) and module:
        return module
    if isinstance(python_file, str) and python_file:
        return os.path.splitext(os.path.basename(python_file))[0]
    return None


def failed_step_cause(context: dg.HookContext) -> BaseException | None:
    """The `__cause__` of the exception a failed step raised, seen from a failure hook.

    `HookContext.op_exception` is the very exception the step raised (a user error
    unwrapped from Dagster's wrapper), so its `__cause__` is the framework's `raise … from`.
    """
    return getattr(context.op_exception, "__cause__", None)


def backfill_is_busy(backfill: PartitionBackfill) -> bool:
    """The backfill's daemon still launches, cancels or fails its runs (REQUESTED,
    CANCELING, FAILING); every other `BulkActionStatus` is an end."""
    busy = (BulkActionStatus.REQUESTED, BulkActionStatus.CANCELING, BulkActionStatus.FAILING)
    return backfill.status in busy


def backfill_succeeded(backfill: PartitionBackfill) -> bool:
    """The backfill ended with every run successful (COMPLETED is deprecated, unset)."""
    return backfill.status == BulkActionStatus.COMPLETED_SUCCESS


def retry_mode_from_config(retries: Mapping[str, Any]) -> RetryMode:
    """The `RetryMode` an executor's `retries` config (`{"enabled": {}}`, …) asks for, as
    dagster-celery's own `celery_executor` reads it."""
    mode = RetryMode.from_config(retries)
    if mode is None:
        raise ValueError(f"no retry mode in executor config {dict(retries)!r}")
    return mode


def celery_execution_loop(plan_context, execution_plan, step_execution_fn: Callable):
    """dagster-celery's run loop. It calls `step_execution_fn(app, plan_context, step,
    queue, priority, known_state)` and polls the result with `ready()`, `get()`, `revoke()`."""
    from dagster_celery.core_execution_loop import core_celery_execution_loop

    return core_celery_execution_loop(
        plan_context, execution_plan, step_execution_fn=step_execution_fn
    )


def submit_celery_task(app, plan_context, step, queue, priority, known_state):
    """Send one step to the Celery workers (dagster-celery's own `_submit_task`)."""
    from dagster_celery.executor import _submit_task

    return _submit_task(app, plan_context, step, queue, priority, known_state)


# Loaded on first use: the executor's config fields, which the bounded executor extends,
# and its class, built with (retries, broker, backend, include, config_source).
_CELERY_NAMES = {
    "CELERY_CONFIG": "dagster_celery.executor",
    "CeleryExecutor": "dagster_celery.executor",
}


def __getattr__(name: str) -> Any:
    if name in _CELERY_NAMES:
        import importlib

        return getattr(importlib.import_module(_CELERY_NAMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def without_current_defs_state_storage():
    """A context in which no instance's definitions-state storage (a ContextVar) is
    current. A disposed instance's storage left current fails every later `Definitions`
    load with "Attempted to resolve undefined DagsterInstance weakref"; the suite starts
    each test without one."""
    from dagster._core.storage.defs_state.base import set_defs_state_storage

    return set_defs_state_storage(None)


# The daemons that turn a sensor's run requests into running runs, as their heartbeats
# name them (`SensorDaemon`, `QueuedRunCoordinatorDaemon` in `dagster/_daemon/`).
SENSOR_DAEMON = "SENSOR"
RUN_QUEUE_DAEMON = "QUEUED_RUN_COORDINATOR"


def daemon_heartbeats(instance: dg.DagsterInstance) -> dict[str, float]:
    """When each daemon of the instance last beat (POSIX seconds), by daemon type; a
    `dagster-daemon` beats every 30 s, an ephemeral instance has none."""
    return {name: beat.timestamp for name, beat in instance.get_daemon_heartbeats().items()}
