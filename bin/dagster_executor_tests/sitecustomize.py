"""Puts the framework's executor in place of Dagster's multiprocess executor, in every
process of a run of Dagster's own tests (`bin/dagster-executor-tests`).

Python imports `sitecustomize` at the start of every interpreter that has this directory
on its path; the script puts it on PYTHONPATH, which the processes the tests start inherit
(run workers, code servers, step processes, forkservers). Only when
`JP_SUBSTITUTION_LOG` names a file, so that nothing else is touched.

Substituted: the creation functions of Dagster's `multi_or_in_process_executor` (every
job's default) and `multiprocess_executor`, changed in place on the definitions Dagster's
jobs hold, so a job defined before or after this ran gets the framework's executor. That
is what `jobs_platform_executor` builds: Dagster's own executor, by
Dagster's own creation function (read before the substitution), with the framework's
config. Each process writes one JSON line per executor built and per multiprocess loop run
to `JP_SUBSTITUTION_LOG`. The loop is Dagster's own; it counts as the framework's when the
framework's creation function built its executor, and the script fails the run when any
other loop ran.
"""

import os

if os.environ.get("JP_SUBSTITUTION_LOG"):
    import json

    import dagster as dg
    from dagster._core.executor.multiprocess import MultiprocessExecutor

    from jobs_platform.orchestration.executors import jobs_platform_executor

    # Set on each executor the framework's creation function built.
    BUILT_BY_FRAMEWORK = "_jobs_platform_built"

    def _note(**what):
        with open(os.environ["JP_SUBSTITUTION_LOG"], "a") as log:
            log.write(json.dumps({"pid": os.getpid(), **what}) + "\n")

    _create = jobs_platform_executor.executor_creation_fn

    def _built(definition, init_context, executor_config):
        executor = _create(
            dg.InitExecutorContext(
                job=init_context.job,
                executor_def=jobs_platform_executor,
                executor_config=executor_config,
                instance=init_context.instance,
            )
        )
        setattr(executor, BUILT_BY_FRAMEWORK, True)
        _note(event="built", definition=definition, cls=type(executor).__name__)
        return executor

    def _default_executor(init_context):
        return _built("multi_or_in_process_executor", init_context, init_context.executor_config)

    def _multiprocess_executor(init_context):
        config = {"multiprocess": init_context.executor_config}
        return _built("multiprocess_executor", init_context, config)

    dg.multi_or_in_process_executor._executor_creation_fn = _default_executor
    dg.multiprocess_executor._executor_creation_fn = _multiprocess_executor

    _execute = MultiprocessExecutor.execute

    def _noted_execute(self, plan_context, execution_plan):
        loop = "framework" if getattr(self, BUILT_BY_FRAMEWORK, False) else "dagster"
        _note(event="loop", loop=loop, cls=type(self).__name__, start=self._start_method)
        yield from _execute(self, plan_context, execution_plan)

    MultiprocessExecutor.execute = _noted_execute
