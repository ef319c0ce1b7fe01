"""A code location of one job on the framework's executor whose step writes down how its
process was started: its parent's command line, the pid of the run that asked for it, and
whether a retry of it would sleep its retry time itself. `test_executors` runs it with
`dagster job execute -m` in a real subprocess, or several runs in one process
(`run_one_after_another`)."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from pathlib import Path

import dagster as dg

from jobs_platform.orchestration._compat import INSTANCE_STORAGE_MODULES
from jobs_platform.orchestration.executors import platform_executor, retries_wait_in_the_step
from jobs_platform.settings import Settings

PROBE_FILE_VARIABLE = "JP_TEST_PROBE_FILE"


# Imported with this module in the forkserver: True only if the forkserver preloaded the
# instance's storage modules before it (the step builds its instance after the fork).
_STORAGE_AT_FORK = INSTANCE_STORAGE_MODULES[0] in sys.modules


@dg.op
def report_how_this_step_started(context) -> None:
    parent = os.getppid()
    # In the run's own process (in_process) the step has no parent process of its run.
    run_worker = multiprocessing.parent_process()
    report = {
        "parent_command": Path(f"/proc/{parent}/cmdline").read_bytes().decode(),
        "parent_pid": parent,
        "run_worker_pid": run_worker.pid if run_worker else os.getpid(),
        "instance_storage_preloaded": _STORAGE_AT_FORK,
        "retries_wait_in_the_step": retries_wait_in_the_step(context),
    }
    # One line a run: several runs may name one file.
    with open(os.environ[PROBE_FILE_VARIABLE], "a") as probe_file:
        probe_file.write(json.dumps(report) + "\n")


@dg.job(executor_def=platform_executor(Settings.from_env({})))
def probe():
    report_how_this_step_started()


defs = dg.Definitions(jobs=[probe])


def run_one_after_another(probe_files: list[str]) -> None:
    """Run the job once per file, one run after the other in this process, each with its
    file in the environment (a script, a notebook or a test suite runs jobs so)."""
    with dg.instance_for_test() as instance:
        for probe_file in probe_files:
            os.environ[PROBE_FILE_VARIABLE] = probe_file
            with dg.execute_job(dg.reconstructable(probe), instance=instance) as result:
                if not result.success:
                    raise SystemExit(f"the run that wrote {probe_file} failed")
