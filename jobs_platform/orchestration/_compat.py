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

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster._core.execution.backfill import BulkActionStatus
from dagster._core.execution.retries import RetryMode

if TYPE_CHECKING:
    from dagster._core.execution.backfill import PartitionBackfill
    from dagster._core.workspace.context import WorkspaceRequestContext
    from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor

__all__ = [
    "CELERY_CONFIG",
    "DAGSTER_VERSION_READ",
    "INSTANCE_STORAGE_MODULES",
    "CeleryExecutor",
    "RetryMode",
    "backfill_is_busy",
    "backfill_succeeded",
    "celery_execution_loop",
    "create_asset_run",
    "failed_step_cause",
    "job_module_name",
    "module_workspace",
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
    imports as the module named by the file's stem.
    """
    repository = getattr(run.job_code_origin, "repository_origin", None)
    pointer = getattr(repository, "code_pointer", None)
    return _module_named_by(getattr(pointer, "module", None), getattr(pointer, "python_file", None))


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


class LocationLoadError(RuntimeError):
    """A code location's code server could not load it."""


@contextlib.contextmanager
def module_workspace(
    instance: dg.DagsterInstance, module: str
) -> Iterator[WorkspaceRequestContext]:
    """A workspace of one code location, the module `module` on a code server of its own,
    as `dagster job launch -m MODULE` loads it; the location is named after the module, as
    `dagster dev -m MODULE` and a workspace.yaml `python_module: MODULE` entry name it.

    Written for Dagster 1.13.27: `get_workspace_from_cli_opts` in
    `dagster/_cli/workspace/cli_target.py` builds a `WorkspaceProcessContext` over a
    `ModuleTarget` (`dagster/_core/workspace/`) and yields its request context; a location
    that failed to load is an error on that context (`has_code_location_error`), raised
    here as `LocationLoadError`.
    """
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import ModuleTarget

    target = ModuleTarget(
        module_name=module, attribute=None, working_directory=os.getcwd(), location_name=None
    )
    with WorkspaceProcessContext(
        instance, target, version=dg.__version__, read_only=False
    ) as process:
        workspace = process.create_request_context()
        for name in workspace.code_location_names:
            if workspace.has_code_location_error(name):
                error = workspace.get_code_location_error(name)
                message = error.message.strip() if error is not None else "unknown error"
                raise LocationLoadError(f"code location {name} failed to load: {message}")
        yield workspace


def create_asset_run(
    instance: dg.DagsterInstance, workspace: WorkspaceRequestContext, request: dg.RunRequest
) -> dg.DagsterRun:
    """The run of an asset run request (asset selection, tags, run config), created
    `NOT_STARTED` in the instance as the sensor daemon creates it; `instance.submit_run`
    then hands it to the run coordinator (queued for the daemon under a
    `QueuedRunCoordinator`).

    Written for Dagster 1.13.27: `_create_asset_run` in
    `dagster/_core/execution/submit_asset_runs.py` gets the selection's implicit asset job,
    remote job and execution plan from `get_job_execution_data_from_run_request` (a
    coroutine) and passes them to `instance.create_run` with the arguments below.
    """
    from dagster._core.execution.submit_asset_runs import (
        get_job_execution_data_from_run_request,
    )

    graph = workspace.asset_graph
    data = asyncio.run(
        get_job_execution_data_from_run_request(graph, request, instance, workspace, {})
    )
    job = data.remote_job
    return instance.create_run(
        job_snapshot=job.job_snapshot,
        execution_plan_snapshot=data.remote_execution_plan.execution_plan_snapshot,
        parent_job_snapshot=job.parent_job_snapshot,
        job_name=job.name,
        run_id=None,
        resolved_op_selection=None,
        op_selection=None,
        run_config=request.run_config or {},
        step_keys_to_execute=None,
        tags=request.tags,
        root_run_id=None,
        parent_run_id=None,
        status=dg.DagsterRunStatus.NOT_STARTED,
        remote_job_origin=job.get_remote_origin(),
        job_code_origin=job.get_python_origin(),
        asset_selection=frozenset(request.asset_selection or ()),
        asset_check_selection=None,
        asset_graph=graph,
    )
