"""The runs `jobs-platform dead-letter requeue` queued, waited for through the instance.

The command returns once its runs are submitted to the Dagster instance. Under Dagster's
default `QueuedRunCoordinator` a daemon runs them (`daemon_running`); an instance told to
launch at once (`launching_at_once`) starts each on the code server the command started,
which finishes the run after the command exits.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from deploy import stack
from jobs_platform_tests.daemon_loops import fast_daemon_loops
from jobs_platform_tests.waiting import wait_for

LAUNCH_AT_ONCE = """
run_coordinator:
  module: dagster.core.run_coordinator
  class: DefaultRunCoordinator
"""
# One line per queued run: `  run <run id>  <run key>`.
_QUEUED_RUN = re.compile(r"^  run ([0-9a-f-]{36})  (\S+)$", re.MULTILINE)
RUN_SECONDS = 180


def launching_at_once(dagster_home: str) -> None:
    """Make the instance in `dagster_home` launch a submitted run at once, with no daemon."""
    config = Path(dagster_home, "dagster.yaml")
    existing = config.read_text() if config.exists() else ""
    assert "run_coordinator" not in existing, existing
    config.write_text(existing + LAUNCH_AT_ONCE)


def queued_runs(stdout: str) -> dict[str, str]:
    """Run key → run id of each run the command's output says it queued."""
    return {key: run_id for run_id, key in _QUEUED_RUN.findall(stdout)}


def finished_runs(
    dagster_home: str, stdout: str, timeout: float = RUN_SECONDS
) -> dict[str, dg.DagsterRun]:
    """Wait for every run the command queued to finish; each by its run key."""
    queued = queued_runs(stdout)
    assert queued, f"the command queued no run:\n{stdout}"
    with dg.DagsterInstance.from_config(dagster_home) as instance:

        def runs() -> dict[str, dg.DagsterRun | None]:
            return {key: instance.get_run_by_id(run_id) for key, run_id in queued.items()}

        def all_finished() -> dict[str, dg.DagsterRun] | None:
            found = runs()
            done = all(run is not None and run.is_finished for run in found.values())
            return {key: run for key, run in found.items() if run is not None} if done else None

        return wait_for(
            all_finished,
            timeout=timeout,
            interval=0.5,
            what=lambda: f"the requeued runs to finish: {runs()}",
        )


@contextlib.contextmanager
def daemon_running(
    env: dict[str, str],
    folder: Path,
    module: str,
    *,
    sensor_seconds: dict[str, int] | None = None,
) -> Iterator[None]:
    """`dagster-daemon run` over a workspace of `module`, as a deployment runs it: its
    sensors (the requeue sensor among them, running by default) tick while inside.

    Its loops run every second (`daemon_loops`), and the sensors named in `sensor_seconds`
    tick at most that many seconds apart."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "workspace.yaml").write_text(f"load_from:\n  - python_module: {module}\n")
    layout = stack.StackLayout(folder / "stack")
    stack.start_process(
        layout,
        "daemon",
        [str(stack.BIN / "dagster-daemon"), "run", "-w", str(folder / "workspace.yaml")],
        stack.process_environment(fast_daemon_loops(env, sensor_seconds=sensor_seconds)),
        cwd=folder,
    )
    try:
        yield
    finally:
        stack.stop_process(layout, "daemon", timeout=30)
