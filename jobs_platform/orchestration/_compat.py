"""Shims over Dagster's private API (`dagster._…`, dagster-celery's internals): the
framework's code imports them here and nowhere else.

Dagster may change these names in any release. Each shim says which Dagster version it was
written for, and `jobs_platform_tests/orchestration/test_compat.py` has a test per shim
that fails, naming the installed version, when a name or a shape it relies on is missing
or has changed. Keep each one small and named for what it gives.

dagster-celery is the `celery` extra's: its shims import it when called (or, for the names
a subclass needs, on first use through `__getattr__`), so this module loads without it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster._core.execution.backfill import BulkActionStatus
from dagster._core.execution.retries import RetryMode

if TYPE_CHECKING:
    from dagster._core.execution.backfill import PartitionBackfill
    from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor

__all__ = [
    "CELERY_CONFIG",
    "DAGSTER_VERSION_READ",
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

# The Dagster release the shims below were written for (dagster-celery 0.29.27 alike).
DAGSTER_VERSION_READ = "1.13.27"

# What a step process imports to build its instance from the run's `InstanceRef`, and
# neither `dagster` nor a code location does: the storages' base, with their SQLAlchemy
# schemas and Alembic (~0.35 CPU s a step; docs/BENCHMARKS.md, "Scratch in memory").
# A forkserver that preloads it pays that once for every step it forks. Python's
# forkserver ignores a preload module it cannot import: test_compat checks it exists.
INSTANCE_STORAGE_MODULES = ("dagster._core.storage.base_storage",)


def job_module_name(job: object) -> str | None:
    """The module a run's job was loaded from, or None for a job not loaded from one.

    Written for Dagster 1.13.27: an executor's `InitExecutorContext.job` is a
    `ReconstructableJob` (whose `get_module()` names the code location's module, None for
    a file) when the run was launched from a code location, and an in-memory job without
    `get_module` under `execute_in_process`.
    """
    get_module = getattr(job, "get_module", None)
    return get_module() if get_module is not None else None


def run_location_module(run: dg.DagsterRun) -> str | None:
    """The module of the code location a run was launched from, as `-m` names it; None
    for a run that names none (`dg.materialize`, `execute_in_process`).

    Written for Dagster 1.13.27: a run launched from a code location (the CLI, the UI, a
    sensor, a backfill) carries `job_code_origin`, a `JobPythonOrigin` whose
    `repository_origin.code_pointer` is a `ModuleCodePointer` or `PackageCodePointer`
    (`.module`) or, for `-f FILE`, a `FileCodePointer` (`.python_file`), which Dagster
    imports as the module named by the file's stem. A run the framework executes itself
    (`FRAMEWORK_JOB_RECONSTRUCTOR`) carries the `CustomPointer` of `build_reconstructable_job`:
    its `reconstructor_pointer` names the function (`module`, `fn_name`), and its
    `reconstructable_kwargs` (`[name, value]` pairs) the location's module as `module`.
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

    Written for Dagster 1.13.27: the daemon evaluates a tick with the location's
    `code_location_origin`; one Dagster starts itself (`dagster dev -m`, a workspace's
    `python_module`, `python_package` or `python_file`) is a
    `ManagedGrpcPythonEnvCodeLocationOrigin` whose `loadable_target_origin` names
    `module_name`, `package_name` or `python_file`; a `GrpcServerCodeLocationOrigin` (a
    `dagster code-server` of its own) knows only its host and port, and its
    `loadable_target_origin` raises `DagsterInvariantViolationError`.
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

    Written for Dagster 1.13.27: `HookContext.op_exception` is the very exception the
    step's code raised (a `dg.Failure` as raised, a user error unwrapped from Dagster's
    `DagsterExecutionStepExecutionError`), in the process that ran the step, so its
    `__cause__` is the exception the framework chained with `raise … from`.
    """
    return getattr(context.op_exception, "__cause__", None)


def backfill_is_busy(backfill: PartitionBackfill) -> bool:
    """The backfill's daemon still launches, cancels or fails its runs.

    Written for Dagster 1.13.27: `BulkActionStatus` (`dagster._core.execution.backfill`)
    marks those as REQUESTED, CANCELING and FAILING; every other status is an end.
    """
    busy = (BulkActionStatus.REQUESTED, BulkActionStatus.CANCELING, BulkActionStatus.FAILING)
    return backfill.status in busy


def backfill_succeeded(backfill: PartitionBackfill) -> bool:
    """The backfill ended with every run it launched successful.

    Written for Dagster 1.13.27: `BulkActionStatus.COMPLETED_SUCCESS` (COMPLETED is a
    deprecated status no daemon of this version sets).
    """
    return backfill.status == BulkActionStatus.COMPLETED_SUCCESS


def retry_mode_from_config(retries: Mapping[str, Any]) -> RetryMode:
    """The `RetryMode` an executor's `retries` config (`{"enabled": {}}`, …) asks for.

    Written for Dagster 1.13.27, as dagster-celery 0.29.27's own `celery_executor` reads
    it: `RetryMode.from_config` of `get_retries_config()`'s value (never None there, the
    field has a default).
    """
    mode = RetryMode.from_config(retries)
    if mode is None:
        raise ValueError(f"no retry mode in executor config {dict(retries)!r}")
    return mode


def celery_execution_loop(plan_context, execution_plan, step_execution_fn: Callable):
    """dagster-celery's run loop, submitting each step with `step_execution_fn`.

    Written for dagster-celery 0.29.27 (Dagster 1.13.27): `core_celery_execution_loop`
    calls `step_execution_fn(app, plan_context, step, queue, priority, known_state)` and
    polls what it returns with `ready()`, `get()` and, on termination, `revoke()`.
    """
    from dagster_celery.core_execution_loop import core_celery_execution_loop

    return core_celery_execution_loop(
        plan_context, execution_plan, step_execution_fn=step_execution_fn
    )


def submit_celery_task(app, plan_context, step, queue, priority, known_state):
    """Send one step to the Celery workers; its Celery `AsyncResult`.

    Written for dagster-celery 0.29.27 (Dagster 1.13.27): the module-private
    `dagster_celery.executor._submit_task`, the step submission of its own executor.
    """
    from dagster_celery.executor import _submit_task

    return _submit_task(app, plan_context, step, queue, priority, known_state)


# Names a subclass or a config schema needs as they are: loaded on first use.
_CELERY_NAMES = {
    # dagster-celery 0.29.27: the executor's config fields (broker, backend, include,
    # config_source, retries), which the bounded executor extends.
    "CELERY_CONFIG": "dagster_celery.executor",
    # dagster-celery 0.29.27: the executor class, built with (retries, broker, backend,
    # include, config_source); the bounded executor overrides only `execute`.
    "CeleryExecutor": "dagster_celery.executor",
}


def __getattr__(name: str) -> Any:
    if name in _CELERY_NAMES:
        import importlib

        return getattr(importlib.import_module(_CELERY_NAMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def without_current_defs_state_storage():
    """A context in which no instance's definitions-state storage is current.

    Dagster 1.13 makes an instance's storage current (a ContextVar) in
    `DagsterInstance.__enter__` and resets it in `__exit__` only after `dispose()`: an
    exception or signal between the two leaves a disposed instance's storage current, and
    every later load of a `Definitions` in that process fails with "Attempted to resolve
    undefined DagsterInstance weakref". The suite starts each test without one.
    """
    from dagster._core.storage.defs_state.base import set_defs_state_storage

    return set_defs_state_storage(None)


# The daemons that turn a sensor's run requests into running runs, as they name themselves
# in their heartbeats. Written for Dagster 1.13.27: `SensorDaemon.daemon_type()` and
# `QueuedRunCoordinatorDaemon.daemon_type()` (`dagster/_daemon/`); the second dequeues the
# runs of an instance whose run coordinator is a `QueuedRunCoordinator`.
SENSOR_DAEMON = "SENSOR"
RUN_QUEUE_DAEMON = "QUEUED_RUN_COORDINATOR"


def daemon_heartbeats(instance: dg.DagsterInstance) -> dict[str, float]:
    """When each daemon of the instance last beat, as a POSIX timestamp, by daemon type.

    Written for Dagster 1.13.27: `DagsterInstance.get_daemon_heartbeats()` gives the latest
    `DaemonHeartbeat` (with `timestamp`) of each daemon type that ever beat on the instance's
    run storage; a `dagster-daemon` beats every 30 s (`DEFAULT_HEARTBEAT_INTERVAL_SECONDS`
    in `dagster/_daemon/controller.py`). An ephemeral instance has none.
    """
    return {name: beat.timestamp for name, beat in instance.get_daemon_heartbeats().items()}
