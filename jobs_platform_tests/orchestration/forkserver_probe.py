"""A code location of one job on the framework's executor whose step writes down how its
process was started: its parent's command line, and the pid of the run that asked for it.
`test_executors` runs it with `dagster job execute -m` in a real subprocess."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from pathlib import Path

import dagster as dg

from jobs_platform.orchestration._compat import INSTANCE_STORAGE_MODULES
from jobs_platform.orchestration.executors import platform_executor
from jobs_platform.settings import Settings

PROBE_FILE_VARIABLE = "JP_TEST_PROBE_FILE"


# Imported with this module in the forkserver: True only if the forkserver preloaded the
# instance's storage modules before it (the step builds its instance after the fork).
_STORAGE_AT_FORK = INSTANCE_STORAGE_MODULES[0] in sys.modules


@dg.op
def report_how_this_step_started() -> None:
    parent = os.getppid()
    Path(os.environ[PROBE_FILE_VARIABLE]).write_text(
        json.dumps(
            {
                "parent_command": Path(f"/proc/{parent}/cmdline").read_bytes().decode(),
                "parent_pid": parent,
                "run_worker_pid": multiprocessing.parent_process().pid,
                "instance_storage_preloaded": _STORAGE_AT_FORK,
            }
        )
    )


@dg.job(executor_def=platform_executor(Settings.from_env({})))
def probe():
    report_how_this_step_started()


defs = dg.Definitions(jobs=[probe])
