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

import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, ClassVar, Self, overload

import dagster as dg
from dagster import _check as check
from dagster._core.definitions.backfill_policy import BackfillPolicyType
from dagster._core.definitions.metadata import MetadataValue
from dagster._core.errors import DagsterExecutionInterruptedError, DagsterSubprocessError
from dagster._core.events import DagsterEvent, EngineEventData
from dagster._core.execution.backfill import BulkActionStatus
from dagster._core.execution.context.system import PlanOrchestrationContext
from dagster._core.execution.plan.active import ActiveExecution
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._core.execution.retries import RetryMode
from dagster._core.execution.step_dependency_config import StepDependencyConfig
from dagster._core.executor.child_process_executor import ChildProcessCrashException
from dagster._core.executor.multiprocess import MultiprocessExecutor, execute_step_out_of_process
from dagster._utils import get_run_crash_explanation
from dagster._utils.error import SerializableErrorInfo, serializable_error_info_from_exc_info
from dagster._utils.timing import TimerResult, time_execution_scope
from dagster_shared.utils.timing import format_duration

if TYPE_CHECKING:
    from dagster._core.execution.backfill import PartitionBackfill
    from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor

__all__ = [
    "CELERY_CONFIG",
    "DAGSTER_MULTIPROCESS_EXECUTE_SHA256",
    "DAGSTER_VERSION_READ",
    "FRAMEWORK_JOB_RECONSTRUCTOR",
    "INSTANCE_STORAGE_MODULES",
    "RUN_QUEUE_DAEMON",
    "SENSOR_DAEMON",
    "ActiveExecution",
    "BackfillPolicyType",
    "CeleryExecutor",
    "MultiprocessExecutor",
    "PlanStateMultiprocessExecutor",
    "RetryMode",
    "admitting_cli_ranges",
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


class BackfillPolicy(dg.BackfillPolicy):
    """`multi_run(n)` for the backfill daemon; `single_run()` to the CLI's range check.

    Written for Dagster 1.13.27. `dagster asset materialize --partition-range`
    (`execute_materialize_command` in `dagster/_cli/asset.py`) refuses a range unless every
    selected asset's `backfill_policy.policy_type` is `SINGLE_RUN`, read on the definitions
    loaded in the CLI's own process; it then runs the range in one run, which a backfill
    step handles partition by partition. The backfill daemon and the
    webserver never see this class: they read the code location's snapshot, serialized by
    class name (`dagster_shared/serdes/serdes.py`, `val.__class__.__name__`), so this one,
    named as Dagster's, arrives as a plain `BackfillPolicy(max_partitions_per_run=n)` and a
    UI backfill is split into runs of at most n partitions (the asset backfill reads
    `policy_type`, the job backfill `max_partitions_per_run`, both on that snapshot).

    Equal to `BackfillPolicy.multi_run(n)` (a tuple of the same field). The one other
    reader of `policy_type` in the code location's process is an automation condition
    sensor built with `use_user_code_server=True`, which would request a range in one run.
    """

    __slots__ = ()

    @property
    def policy_type(self) -> BackfillPolicyType:
        return BackfillPolicyType.SINGLE_RUN

    def __str__(self) -> str:
        return f"BackfillPolicy.multi_run(max_partitions_per_run={self.max_partitions_per_run})"


@overload
def admitting_cli_ranges(policy: dg.BackfillPolicy) -> dg.BackfillPolicy: ...
@overload
def admitting_cli_ranges(policy: None) -> None: ...
def admitting_cli_ranges(policy: dg.BackfillPolicy | None) -> dg.BackfillPolicy | None:
    """`policy` as the daemon reads it, which `--partition-range` on the CLI also accepts.

    A multi-run policy becomes the `BackfillPolicy` above; `single_run()` and None (one
    partition per run, which no CLI range accepts) are returned as given.
    """
    if policy is None or policy.max_partitions_per_run is None:
        return policy
    return BackfillPolicy(max_partitions_per_run=policy.max_partitions_per_run)


# sha256 of `inspect.getsource(MultiprocessExecutor.execute)` in Dagster 1.13.27, the method
# `PlanStateMultiprocessExecutor.execute` writes out: test_compat fails, naming the installed
# version, when Dagster's original differs from the one written out below.
DAGSTER_MULTIPROCESS_EXECUTE_SHA256 = (
    "60b1287e2c5b3cd84595cdf40cef004e41e142b74aa46c2af85e919d84f12633"
)


class PlanStateMultiprocessExecutor(MultiprocessExecutor):
    """Dagster's multiprocess executor, whose run loop keeps its plan state in
    `plan_state_class` (a subclass of Dagster's `ActiveExecution`).

    Written for Dagster 1.13.27. `MultiprocessExecutor.execute` builds its plan state as
    `ActiveExecution(...)`, by the module-level name, and has no hook for another class,
    so `execute` below is Dagster 1.13.27's, written out, with one change, marked
    "Changed": the plan state is `self.plan_state_class(...)`. Everything else is
    Dagster's as it is, and the functions it calls are Dagster's own (a step's process,
    `execute_step_out_of_process`; the child process command; the termination). When a
    Dagster release changes its `execute`, test_compat's hash of it fails: carry the change
    over here, then record the new hash.

    The loop calls the plan state's `get_steps_to_execute(limit=…)` and launches a process
    for each step returned, and calls `verify_complete(plan_context, key)` as each step's
    process is done with; `sleep_interval()` is how long until a waiting step is due.
    """

    plan_state_class: ClassVar[type[ActiveExecution]] = ActiveExecution

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        """The executor of a run's `multiprocess` executor config, read as Dagster reads it.

        Written for Dagster 1.13.27: `_core_multiprocess_executor_creation` in
        `dagster/_core/definitions/executor_definition.py` (the creation function of
        `multiprocess_executor` and of `multi_or_in_process_executor`'s `multiprocess`);
        test_compat compares what the two build from the same configs.
        """
        start_method, start_config = None, {}
        if config.get("start_method"):
            [(start_method, start_config)] = config["start_method"].items()
        return cls(
            retries=retry_mode_from_config(config["retries"]),
            max_concurrent=config.get("max_concurrent"),
            tag_concurrency_limits=config.get("tag_concurrency_limits"),
            start_method=start_method,
            # Dagster reads an absent `preload_modules` as [], not as None.
            explicit_forkserver_preload=list((start_config or {}).get("preload_modules") or []),
            step_dependency_config=StepDependencyConfig.from_config(
                config.get("step_dependency_config")
            ),
        )

    def execute(
        self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan
    ) -> Iterator[DagsterEvent]:
        check.inst_param(plan_context, "plan_context", PlanOrchestrationContext)
        check.inst_param(execution_plan, "execution_plan", ExecutionPlan)

        job = plan_context.reconstructable_job

        multiproc_ctx = multiprocessing.get_context(self._start_method)
        if self._start_method == "forkserver":
            module = job.get_module()
            # if explicitly listed in config we will use that
            if self._explicit_forkserver_preload is not None:
                preload = self._explicit_forkserver_preload

            # or if the reconstructable job has a module target, we will use that
            elif module is not None:
                preload = [module]

            # base case is to preload the dagster library
            else:
                preload = ["dagster"]

            # we import this module first to avoid user code like
            # pyspark.serializers._hijack_namedtuple from breaking us
            if "dagster._core.executor.multiprocess" not in preload:
                preload = ["dagster._core.executor.multiprocess", *preload]

            multiproc_ctx.set_forkserver_preload(list(preload))

        limit = self._max_concurrent
        tag_concurrency_limits = self._tag_concurrency_limits

        yield DagsterEvent.engine_event(
            plan_context,
            f"Executing steps using multiprocess executor: parent process (pid: {os.getpid()})",
            event_specific_data=EngineEventData.multiprocess(
                os.getpid(), step_keys_to_execute=execution_plan.step_keys_to_execute
            ),
        )

        timer_result: TimerResult | None = None
        with ExitStack() as stack:
            timer_result = stack.enter_context(time_execution_scope())

            instance_concurrency_context = stack.enter_context(
                InstanceConcurrencyContext(plan_context.instance, plan_context.dagster_run)
            )
            active_execution = stack.enter_context(
                # Changed: Dagster 1.13.27 builds `ActiveExecution(...)` here.
                self.plan_state_class(
                    execution_plan,
                    retry_mode=self.retries,
                    max_concurrent=limit,
                    tag_concurrency_limits=tag_concurrency_limits,
                    instance_concurrency_context=instance_concurrency_context,
                    step_dependency_config=self._step_dependency_config,
                )
            )
            active_iters: dict[str, Iterator[DagsterEvent | None]] = {}
            errors: dict[int, SerializableErrorInfo] = {}
            processes: dict[str, BaseProcess] = {}
            term_events: dict[str, Any] = {}
            stopping: bool = False

            try:
                while (not stopping and not active_execution.is_complete) or active_iters:
                    if active_execution.check_for_interrupts():
                        yield DagsterEvent.engine_event(
                            plan_context,
                            "Multiprocess executor: received termination signal - "
                            "forwarding to active child processes",
                            EngineEventData.interrupted(list(active_iters.keys())),
                        )
                        stopping = True
                        active_execution.mark_interrupted()
                        for key, term_event in term_events.items():
                            if key in processes:
                                if processes[key].is_alive():
                                    term_event.set()
                                del processes[key]

                    while not stopping:
                        steps = active_execution.get_steps_to_execute(
                            limit=(limit - len(active_iters)),
                        )

                        yield from active_execution.concurrency_event_iterator(plan_context)

                        if not steps:
                            break

                        for step in steps:
                            step_context = plan_context.for_step(step)
                            term_events[step.key] = multiproc_ctx.Event()
                            active_iters[step.key] = execute_step_out_of_process(
                                multiproc_ctx,
                                job,
                                step_context,
                                step,
                                errors,
                                processes,
                                term_events,
                                self.retries,
                                active_execution.get_known_state(),
                                execution_plan.repository_load_data,
                            )

                    # process active iterators
                    empty_iters = []
                    for key, step_iter in active_iters.items():
                        try:
                            event_or_none = next(step_iter)
                            if event_or_none is None:
                                continue

                            yield event_or_none
                            active_execution.handle_event(event_or_none)

                            if event_or_none.is_resource_init_failure:
                                step_context = plan_context.for_step(
                                    active_execution.get_step_by_key(key)
                                )
                                assert isinstance(
                                    event_or_none.engine_event_data.error, SerializableErrorInfo
                                )

                                failure_or_retry_event = (
                                    self.log_failure_or_retry_event_after_error(
                                        step_context,
                                        event_or_none.engine_event_data.error,
                                        active_execution.get_known_state(),
                                    )
                                )
                                yield failure_or_retry_event
                                active_execution.handle_event(failure_or_retry_event)

                        except ChildProcessCrashException as crash:
                            serializable_error = serializable_error_info_from_exc_info(
                                sys.exc_info()
                            )
                            step_context = plan_context.for_step(
                                active_execution.get_step_by_key(key)
                            )
                            yield DagsterEvent.engine_event(
                                step_context,
                                get_run_crash_explanation(
                                    prefix=f"Multiprocess executor: child process for step {key}",
                                    exit_code=crash.exit_code,
                                ),
                                EngineEventData.engine_error(serializable_error),
                            )
                            failure_or_retry_event = self.log_failure_or_retry_event_after_error(
                                step_context, serializable_error, active_execution.get_known_state()
                            )

                            active_execution.handle_event(failure_or_retry_event)
                            yield failure_or_retry_event
                            empty_iters.append(key)
                            if failure_or_retry_event.is_step_failure:
                                errors[crash.pid] = serializable_error
                        except StopIteration:
                            empty_iters.append(key)

                    # clear and mark complete finished iterators
                    for key in empty_iters:
                        del active_iters[key]
                        del term_events[key]
                        processes.pop(key, None)
                        active_execution.verify_complete(plan_context, key)

                    # process skipped and abandoned steps
                    yield from active_execution.plan_events_iterator(plan_context)
            except Exception:
                if not stopping and active_iters:
                    serializable_error = serializable_error_info_from_exc_info(sys.exc_info())
                    yield DagsterEvent.engine_event(
                        plan_context,
                        "Unexpected exception while steps were still in-progress - "
                        "terminating running steps:",
                        event_specific_data=EngineEventData(
                            metadata={
                                "steps_interrupted": MetadataValue.text(
                                    str(list(active_iters.keys()))
                                )
                            },
                            error=serializable_error,
                        ),
                    )
                    for key, term_event in term_events.items():
                        if key in processes:
                            if processes[key].is_alive():
                                term_event.set()
                            del processes[key]

                raise

            errs = {pid: err for pid, err in errors.items() if err}

            # After termination starts, raise an interrupted exception once all subprocesses
            # have finished cleaning up (and the only errors were from being interrupted)
            if (
                stopping
                and (not active_iters)
                and all(
                    [
                        err_info.cls_name
                        in {"DagsterExecutionInterruptedError", "KeyboardInterrupt"}
                        for err_info in errs.values()
                    ]
                )
            ):
                yield DagsterEvent.engine_event(
                    plan_context,
                    "Multiprocess executor: interrupted all active child processes",
                    event_specific_data=EngineEventData(),
                )
                raise DagsterExecutionInterruptedError()
            elif errs:
                raise DagsterSubprocessError(
                    "During multiprocess execution errors occurred in child"
                    " processes:\n{error_list}".format(
                        error_list="\n".join(
                            [f"In process {pid}: {err.to_string()}" for pid, err in errs.items()]
                        )
                    ),
                    subprocess_error_infos=list(errs.values()),
                )

        if timer_result:
            yield DagsterEvent.engine_event(
                plan_context,
                "Multiprocess executor: parent process exiting after "
                f"{format_duration(timer_result.millis)} (pid: {os.getpid()})",
                event_specific_data=EngineEventData.multiprocess(os.getpid()),
            )


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
