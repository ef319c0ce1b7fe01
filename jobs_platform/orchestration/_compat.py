"""Shims over Dagster's private API (`dagster._…`): the framework's code imports it here.

Dagster may change these names in any release. Each shim says which Dagster version it was
read against, and `jobs_platform_tests/orchestration/test_compat.py` fails, naming the
installed version, when a name or a shape a shim relies on is missing or has changed.
Keep each one small and named for what it gives.
"""

from __future__ import annotations

import types
from collections.abc import Callable

from dagster._core.execution.plan.active import ActiveExecution
from dagster._core.executor.multiprocess import MultiprocessExecutor

__all__ = [
    "DAGSTER_VERSION_READ",
    "ActiveExecution",
    "MultiprocessExecutor",
    "multiprocess_execute_with",
]

# The Dagster release the shims below were read against.
DAGSTER_VERSION_READ = "1.13.27"


def multiprocess_execute_with(active_execution_class: type[ActiveExecution]) -> Callable:
    """`MultiprocessExecutor.execute`, whose loop keeps its plan state in `active_execution_class`.

    Dagster 1.13.27: `execute` builds `ActiveExecution(...)` by its module-level name and
    has no hook for another class. This is the same code with that one name bound to the
    subclass; the loop, its step processes and its termination stay Dagster's. Its loop
    calls `get_steps_to_execute(limit=…)` and launches a process for each step returned,
    and calls `verify_complete(plan_context, key)` as each step's process is done with.
    """
    execute = MultiprocessExecutor.execute
    rebound = types.FunctionType(
        execute.__code__,
        {**execute.__globals__, "ActiveExecution": active_execution_class},
        execute.__name__,
        execute.__defaults__,
        execute.__closure__,
    )
    rebound.__kwdefaults__ = execute.__kwdefaults__
    rebound.__qualname__ = execute.__qualname__
    rebound.__doc__ = execute.__doc__
    return rebound
