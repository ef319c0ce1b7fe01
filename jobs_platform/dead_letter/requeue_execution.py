"""A requeue's runs, run by the command itself where no daemon launches them (CI).

Wherever a `dagster-daemon` serves the Dagster instance, the requeue sensor launches a
requeue's runs. Where none does, `jobs-platform dead-letter requeue --wait` runs them in
its own process, as `dagster job execute` runs a job: with the code location's resources
and executor (a process per step under `multiprocess`, the workers under `celery`), and
recorded in the instance under the run key and tags the sensor would have given them. The
sensor, once a daemon runs, finds them by that key and never launches them again.
"""

from __future__ import annotations

import os

import dagster as dg

from jobs_platform.dead_letter.requeue_plan import RequeueRun
from jobs_platform.location import load_definitions
from jobs_platform.orchestration._compat import FRAMEWORK_JOB_RECONSTRUCTOR
from jobs_platform.orchestration.tags import RUN_KEY_TAG

# The job of a run executed here: a job of its own, since Dagster reserves the name of the
# implicit asset job the daemon's runs have (`__ASSET_JOB`) to itself.
REQUEUE_RUN_JOB = "jobs_platform_requeue_run"


def requeue_run_job(module: str, assets: list[str]) -> dg.JobDefinition:
    """The job of a requeue run: the backfills `assets` (asset keys as user strings) of the
    code location `module`, with its resources and executor. Each step process rebuilds
    it this way (`FRAMEWORK_JOB_RECONSTRUCTOR`)."""
    definitions = load_definitions(module)
    job = dg.define_asset_job(
        REQUEUE_RUN_JOB, selection=[dg.AssetKey.from_user_string(asset) for asset in assets]
    )
    merged = dg.Definitions.merge(definitions, dg.Definitions(jobs=[job]))
    return merged.resolve_job_def(REQUEUE_RUN_JOB)


def execute_requeue_run(
    instance: dg.DagsterInstance, module: str, run: RequeueRun
) -> dg.DagsterRun:
    """Run `run` of the code location `module` in this process until it ends; the run as
    the instance recorded it (its status says whether it succeeded)."""
    assets = [key.to_user_string() for key in run.selection]
    job = dg.build_reconstructable_job(
        *FRAMEWORK_JOB_RECONSTRUCTOR,
        reconstructable_kwargs={"module": module, "assets": assets},
        reconstructor_working_directory=os.getcwd(),
    )
    result = dg.execute_job(
        job, instance=instance, tags={**run.tags, RUN_KEY_TAG: run.run_key}, raise_on_error=False
    )
    recorded = instance.get_run_by_id(result.run_id)
    assert recorded is not None  # execute_job records its run before it starts
    return recorded
