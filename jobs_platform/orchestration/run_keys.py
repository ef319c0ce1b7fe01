"""Whether the runs a sensor or the CLI asked for exist in the Dagster instance.

Launches are at-least-once: whoever asks for a run under a run key asks again until a run
with that key is in the instance. A repeat is harmless, because a sensor's run request
whose run key was used before is skipped by the daemon.
"""

from collections.abc import Iterable, Mapping

import dagster as dg

from jobs_platform.orchestration.tags import RUN_KEY_TAG


def launched_runs(
    instance: dg.DagsterInstance, run_keys: Iterable[str], tags: Mapping[str, str]
) -> dict[str, dg.DagsterRun]:
    """The runs carrying `tags` with a key among `run_keys` that were launched, by key.

    `tags` narrows the match to the framework's own runs (another sensor may use the same
    key). A run still `NOT_STARTED` was created but never submitted: it does not count,
    and the daemon launches that very run when its key is requested again.
    """
    keys = sorted(set(run_keys))
    if not keys:
        return {}
    runs = instance.get_runs(dg.RunsFilter(tags={**tags, RUN_KEY_TAG: keys}))
    return {
        run.tags[RUN_KEY_TAG]: run for run in runs if run.status != dg.DagsterRunStatus.NOT_STARTED
    }
