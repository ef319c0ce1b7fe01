"""The private Dagster names and shapes `orchestration._compat` relies on are still there.

When one fails, the installed Dagster is not the one the shims were read against: read the
shim's docstring and the named Dagster source again before changing the version.
"""

from __future__ import annotations

import importlib
import inspect

import dagster as dg
import pytest

# Module → names the shims import from it.
PRIVATE_NAMES = {
    "dagster._core.executor.multiprocess": ["MultiprocessExecutor"],
    "dagster._core.execution.plan.active": ["ActiveExecution"],
}
# Method → the parameters the framework's subclass of ActiveExecution overrides it with.
ACTIVE_EXECUTION_METHODS = {
    "get_steps_to_execute": ["self", "limit"],
    "verify_complete": ["self", "job_context", "step_key"],
    "sleep_interval": ["self"],
}


def changed(what: str) -> str:
    return (
        f"Dagster {dg.__version__} changed {what}, which jobs_platform/orchestration/_compat.py "
        "relies on (its shims name the Dagster version they were read against)"
    )


@pytest.mark.parametrize("module_name", sorted(PRIVATE_NAMES))
def test_the_private_names_the_shims_import_exist(module_name):
    try:
        module = importlib.import_module(module_name)
    except ImportError as missing:
        pytest.fail(changed(f"the module {module_name} ({missing})"), pytrace=False)
    for name in PRIVATE_NAMES[module_name]:
        if not hasattr(module, name):
            pytest.fail(changed(f"{module_name}.{name}: it is gone"), pytrace=False)


def test_the_multiprocess_loop_builds_its_plan_state_by_the_module_level_name():
    from dagster._core.executor.multiprocess import MultiprocessExecutor

    code = MultiprocessExecutor.execute.__code__
    # The shim rebinds a global, so `execute` must look ActiveExecution up as one, need no
    # closure (a `super()` would add one), and still drive the methods the subclass hooks.
    used = set(code.co_names)
    expected = {"ActiveExecution", "get_steps_to_execute", "verify_complete"}
    assert expected <= used, changed(f"MultiprocessExecutor.execute: no {expected - used}")
    assert not code.co_freevars, changed("MultiprocessExecutor.execute: it now has a closure")


@pytest.mark.parametrize("method", sorted(ACTIVE_EXECUTION_METHODS))
def test_the_active_execution_methods_the_framework_overrides_keep_their_parameters(method):
    from dagster._core.execution.plan.active import ActiveExecution

    assert hasattr(ActiveExecution, method), changed(f"ActiveExecution.{method}: it is gone")
    parameters = list(inspect.signature(getattr(ActiveExecution, method)).parameters)
    assert parameters == ACTIVE_EXECUTION_METHODS[method], changed(
        f"ActiveExecution.{method}: its parameters are now {parameters}"
    )


def test_dagster_builds_a_plain_multiprocess_executor_that_the_framework_adopts():
    from jobs_platform.orchestration._compat import MultiprocessExecutor
    from jobs_platform.orchestration.executors import (
        SleepingMultiprocessExecutor,
        forkserver_multi_or_in_process_executor,
    )

    with dg.DagsterInstance.ephemeral() as instance:
        context = dg.InitExecutorContext(
            job=dg.reconstructable(empty_job),
            executor_def=forkserver_multi_or_in_process_executor,
            executor_config={"multiprocess": {"max_concurrent": 3, "retries": {"enabled": {}}}},
            instance=instance,
        )
        executor = forkserver_multi_or_in_process_executor.executor_creation_fn(context)

    assert type(executor) is SleepingMultiprocessExecutor, changed(
        "the executor multi_or_in_process_executor builds for a multiprocess run"
    )
    assert isinstance(executor, MultiprocessExecutor)
    # Adopted, not rebuilt: the run's configuration is Dagster's reading of it.
    assert executor._max_concurrent == 3


def test_the_rebound_loop_keeps_its_plan_state_in_the_given_class():
    from jobs_platform.orchestration._compat import (
        ActiveExecution,
        MultiprocessExecutor,
        multiprocess_execute_with,
    )

    class Marked(ActiveExecution):
        pass

    execute = multiprocess_execute_with(Marked)

    assert execute.__globals__["ActiveExecution"] is Marked
    assert execute.__code__ is MultiprocessExecutor.execute.__code__
    assert MultiprocessExecutor.execute.__globals__["ActiveExecution"] is ActiveExecution


@dg.op
def nothing() -> None:
    pass


@dg.job
def empty_job():
    nothing()
