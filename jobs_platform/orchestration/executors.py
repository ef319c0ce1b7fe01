"""The executor of every backfill job and asset run, chosen by `JOBS_PLATFORM_EXECUTOR`.

`platform_executor()` is read when the code location loads: Dagster binds a code
location's executor then, so users get Celery by setting a variable, not by merging
Definitions. Under Celery the guarantees need more than dagster-celery's defaults:

- `task_acks_late` + `task_reject_on_worker_lost`: a task is acknowledged only when its
  step has finished, so a worker killed mid-step hands the step back to the broker and the
  same run finishes it (the lease and the chunk checkpoints make the second attempt safe);
  acknowledged on receipt, the step is lost and the run waits for it for ever;
- a broker visibility timeout (Redis, SQS) longer than anything a step may take, or the
  broker hands a running step to a second worker while the first still works on it;
- a bounded result wait that honours termination (`BoundedCeleryExecutor`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping

import dagster as dg

from jobs_platform.orchestration._compat import INSTANCE_STORAGE_MODULES, job_module_name
from jobs_platform.orchestration.step_bounds import (
    STOP_GRACE_SECONDS,
    celery_app_settings,
    step_deadline_seconds,
)
from jobs_platform.settings import (
    DEFAULT_CELERY_BACKEND,
    DEFAULT_CELERY_BROKER,
    Settings,
)

# The framework's executor (`jobs_platform_executor`): its own name, not Dagster's default's.
EXECUTOR_NAME = "jobs_platform_executor"

# Steps that run in a process on this machine; any other executor ships them elsewhere.
# (`execute_in_process_executor` is what `execute_in_process` and `dg.materialize` run on.)
LOCAL_EXECUTORS = frozenset(
    {
        EXECUTOR_NAME,
        "in_process",
        "multiprocess",
        "multi_or_in_process_executor",
        "execute_in_process_executor",
    }
)


def celery_executor_config(settings: Settings, environ_has: Callable[[str], bool]) -> dict:
    """The configured celery executor's config; URLs given as variables stay variables.

    A URL that came from the environment is passed as `{"env": NAME}`, so its password is
    read where the executor starts and never lands in run config or the UI.
    """

    def url(name: str, value: str, default: str) -> str | dict:
        return {"env": name} if environ_has(name) else (value or default)

    return {
        "broker": url("JOBS_PLATFORM_CELERY_BROKER", settings.celery_broker, DEFAULT_CELERY_BROKER),
        "backend": url(
            "JOBS_PLATFORM_CELERY_BACKEND", settings.celery_backend, DEFAULT_CELERY_BACKEND
        ),
        "config_source": celery_app_settings(settings),
        "result_timeout_seconds": step_deadline_seconds(settings),
        "stop_grace_seconds": STOP_GRACE_SECONDS,
    }


# Imported by the forkserver of a job that was not loaded from a module (a file, a test).
FRAMEWORK_MODULES = ("dagster", "jobs_platform.orchestration.backfill_asset")


def with_forkserver_by_default(config: Mapping, job_module: str | None) -> Mapping:
    """The executor config, with a preloading forkserver where a multiprocess run names no
    start method; a start method or in_process chosen by the run is kept as it is."""
    multiprocess = config.get("multiprocess")
    if multiprocess is None or multiprocess.get("start_method"):
        return config
    # Name the modules: with `forkserver: {}` Dagster 1.13 preloads only its executor
    # module (its `preload_modules` reads as [] when absent, not as "the job's module").
    # Before them what each step imports to build its instance: once for all the steps.
    preload = [*INSTANCE_STORAGE_MODULES, *([job_module] if job_module else FRAMEWORK_MODULES)]
    return {
        "multiprocess": {
            **multiprocess,
            "start_method": {"forkserver": {"preload_modules": preload}},
        }
    }


# The environment of this process's first run whose steps fork from a forkserver. Python
# starts one forkserver per process, at that run's first step, with the environment of the
# moment, and forks every later step of the process from it.
_forkserver_environment: dict[str, str] | None = None


def forkserver_or_spawn(
    config: Mapping, environment: Mapping[str, str], forkserver_environment: Mapping[str, str]
) -> Mapping:
    """The executor config, with `spawn` instead of a forkserver that was started with
    another environment than the run's: its steps would get the other environment."""
    if not _forks_from_a_forkserver(config) or environment == forkserver_environment:
        return config
    return {"multiprocess": {**config["multiprocess"], "start_method": {"spawn": {}}}}


def _start_method_of_this_run(config: Mapping) -> Mapping:
    """The executor config of a run starting now in this process (`forkserver_or_spawn`).

    A run started by a run launcher is a process of its own, and its forkserver starts with
    its environment. A process that runs several jobs (a script, a notebook, a test suite)
    and changes its environment between them spawns the steps of its later runs instead:
    a fresh interpreter per step, slower to start, but with its own run's variables.
    """
    global _forkserver_environment
    environment = dict(os.environ)
    if _forkserver_environment is None and _forks_from_a_forkserver(config):
        _forkserver_environment = environment
    return forkserver_or_spawn(config, environment, _forkserver_environment or environment)


def _forks_from_a_forkserver(config: Mapping) -> bool:
    multiprocess = config.get("multiprocess")
    return multiprocess is not None and "forkserver" in (multiprocess.get("start_method") or {})


def _creation_function(
    executor: dg.ExecutorDefinition,
) -> Callable[[dg.InitExecutorContext], dg.Executor]:
    create = executor.executor_creation_fn
    if create is None:  # an @dg.executor always has one; typed as optional
        raise TypeError(f"Dagster's {executor.name} has no creation function")
    return create


_DAGSTER_DEFAULT = dg.multi_or_in_process_executor
# Dagster's own creation function, read once at import: a substitute set in its place later
# (bin/dagster-executor-tests sets one, to build the framework's executor) is not the one
# the framework's executor calls.
_create_dagster_default = _creation_function(_DAGSTER_DEFAULT)


@dg.executor(
    name=EXECUTOR_NAME,
    config_schema=_DAGSTER_DEFAULT.config_schema.as_field(),
    requirements=_DAGSTER_DEFAULT.get_requirements,
)
def jobs_platform_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    """Dagster's default executor, with step processes forked from a preloaded forkserver.

    Its config is Dagster's `multi_or_in_process_executor`'s: multiprocess, and a run may
    still ask for in_process (`execution: config: in_process: {}`), as the tests and `demo`
    do. Dagster's own creation function builds it, with one change to the config: unless a
    run names a start method, each step process is forked from a forkserver that imported
    the job's code location when it started. A fresh interpreter would import Dagster and
    the code location again for every step (2.5-3 CPU s a step; docs/BENCHMARKS.md). It
    is still a process per step, so a SIGKILLed step is retried in a new one. A later run
    in the same process whose environment changed spawns its steps instead
    (`forkserver_or_spawn`).

    Its own name tells a run on it from one on Dagster's default executor, in the run's
    config and in the UI.
    """
    config = with_forkserver_by_default(
        init_context.executor_config, job_module_name(init_context.job)
    )
    return _create_dagster_default(
        dg.InitExecutorContext(
            job=init_context.job,
            executor_def=_DAGSTER_DEFAULT,
            executor_config=_start_method_of_this_run(config),
            instance=init_context.instance,
        )
    )


def platform_executor(settings: Settings | None = None) -> dg.ExecutorDefinition:
    """The executor `JOBS_PLATFORM_EXECUTOR` names, configured for the framework."""
    settings = settings or Settings.from_env()
    if settings.executor == "in_process":
        return dg.in_process_executor
    if settings.executor == "multiprocess":
        return jobs_platform_executor
    from jobs_platform.orchestration.celery_executor import bounded_celery_executor

    return bounded_celery_executor.configured(
        celery_executor_config(settings, lambda name: bool(os.environ.get(name))),
        name="celery",
    )


def runs_remotely(context: dg.AssetExecutionContext) -> bool:
    """Whether this step may run on another machine than the one that launched it.

    The job's executor says so on the machine that loaded it; a Celery worker started
    without `JOBS_PLATFORM_EXECUTOR` loads the code location with a local executor, so a
    step executing inside a Celery task counts as remote whatever the executor says.
    """
    executor_name = context.op_execution_context.job_def.executor_def.name
    return executor_name not in LOCAL_EXECUTORS or _inside_celery_task()


def _inside_celery_task() -> bool:
    celery = sys.modules.get("celery")
    if celery is None:
        return False
    # `current_task` is a proxy, never None: it is falsy outside a task.
    task = celery.current_task
    return bool(task) and getattr(task.request, "id", None) is not None


# The executors that run Dagster's multiprocess executor: Dagster's `multiprocess`; and the
# framework's and Dagster's default, unless a run's config asks for in_process.
_MULTIPROCESS_EXECUTORS = frozenset({"multiprocess"})
_MULTI_OR_IN_PROCESS_EXECUTORS = frozenset({EXECUTOR_NAME, "multi_or_in_process_executor"})


def retries_wait_in_the_step(context: dg.AssetExecutionContext) -> bool:
    """Whether a retry of this step sleeps its retry time itself, Dagster given no delay.

    Yes under Dagster's multiprocess executor, on this machine: its run loop blocks (in
    20 ms ticks) only on a running step's process, and spins a core while the only steps
    left wait for their retry time. A retried step that starts at once and sleeps gives it
    a process to block on. No under the in-process executor, which sleeps until a retry is
    due (`sleep_til_ready`), and under Celery, where a sleeping task would hold a worker
    slot for the whole wait: Dagster waits the delay there.
    """
    executor_name = context.op_execution_context.job_def.executor_def.name
    if _inside_celery_task():
        return False
    if executor_name in _MULTIPROCESS_EXECUTORS:
        return True
    if executor_name in _MULTI_OR_IN_PROCESS_EXECUTORS:
        execution = context.run.run_config.get("execution")
        config = execution.get("config") if isinstance(execution, Mapping) else None
        return not (isinstance(config, Mapping) and "in_process" in config)
    return False
