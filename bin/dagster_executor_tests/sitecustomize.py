"""Puts the framework's executor in place of Dagster's multiprocess executor, in every
process of a run of Dagster's own tests (`bin/dagster-executor-tests`).

Python imports `sitecustomize` at the start of every interpreter that has this directory
on its path; the script puts it on PYTHONPATH, which the processes the tests start inherit
(run workers, code servers, step processes, forkservers). Only when
`JP_SUBSTITUTION_LOG` names a file, so that nothing else is touched.

Substituted: the creation functions of Dagster's `multi_or_in_process_executor` (every
job's default) and `multiprocess_executor`, changed in place on the definitions Dagster's
jobs hold, so a job defined before or after this ran gets the framework's executor. Each
process writes one JSON line per executor built and per multiprocess loop run to
`JP_SUBSTITUTION_LOG`: the script counts the framework's loops and fails the run when any
loop of Dagster's own ran.
"""

import os

if os.environ.get("JP_SUBSTITUTION_LOG"):
    import json

    import dagster as dg
    from dagster._core.executor.multiprocess import MultiprocessExecutor

    from jobs_platform.orchestration.executors import (
        SleepingMultiprocessExecutor,
        forkserver_multi_or_in_process_executor,
    )

    def _note(**what):
        with open(os.environ["JP_SUBSTITUTION_LOG"], "a") as log:
            log.write(json.dumps({"pid": os.getpid(), **what}) + "\n")

    _create = forkserver_multi_or_in_process_executor.executor_creation_fn

    def _default_executor(init_context):
        executor = _create(init_context)
        _note(event="built", definition="multi_or_in_process_executor", cls=type(executor).__name__)
        return executor

    def _multiprocess_executor(init_context):
        executor = _create(
            dg.InitExecutorContext(
                job=init_context.job,
                executor_def=init_context.executor_def,
                executor_config={"multiprocess": init_context.executor_config},
                instance=init_context.instance,
            )
        )
        _note(event="built", definition="multiprocess_executor", cls=type(executor).__name__)
        return executor

    dg.multi_or_in_process_executor._executor_creation_fn = _default_executor
    dg.multiprocess_executor._executor_creation_fn = _multiprocess_executor

    def _noting(loop, execute):
        def noted(self, plan_context, execution_plan):
            _note(event="loop", loop=loop, cls=type(self).__name__, start=self._start_method)
            yield from execute(self, plan_context, execution_plan)

        return noted

    # Dagster's own loop runs only for an executor that escaped the substitution.
    MultiprocessExecutor.execute = _noting("dagster", MultiprocessExecutor.execute)
    SleepingMultiprocessExecutor.execute = _noting(
        "framework", SleepingMultiprocessExecutor.execute
    )
