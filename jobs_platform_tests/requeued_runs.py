"""A daemon for the runs of a requeue: the requeue sensor launches them, the daemon runs them.

`jobs-platform dead-letter requeue` releases entries; the code location's requeue sensor,
which a `dagster-daemon` evaluates, launches their runs (`daemon_running`), queued in the
instance's run queue (`queueing_for_a_daemon`). Where no daemon runs, `requeue --wait`
runs them itself: those tests need nothing from here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from deploy import stack
from jobs_platform.dead_letter.requeue import silent_daemons
from jobs_platform_tests.daemon_loops import fast_daemon_loops
from jobs_platform_tests.waiting import wait_for

# The daemon's dead-letter sensor requests a run per entry it has not shown yet as it
# starts: they stay queued (limit 0), so that they do not take the CPU the requeue's runs,
# which the tests wait for, need (a run worker and a step process each, on two cores).
# Nothing the tests assert is about them: the dead-letter sensor and its runs have tests
# of their own (dead_letter/test_dead_letter_sensor.py, ui/).
QUEUED_INSTANCE = """
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    max_concurrent_runs: 4
    dequeue_interval_seconds: 1
    tag_concurrency_limits:
      - key: dagster/sensor_name
        value: dead_letter_sensor
        limit: 0
telemetry:
  enabled: false
"""
RUN_SECONDS = 180
# The daemon's start: its interpreter, Dagster's imports, its code server's first load.
DAEMON_START_SECONDS = 120


def queueing_for_a_daemon(dagster_home: str) -> None:
    """Make the instance in `dagster_home` queue its runs for a daemon (`QUEUED_INSTANCE`)."""
    Path(dagster_home, "dagster.yaml").write_text(QUEUED_INSTANCE)


@contextlib.contextmanager
def daemon_running(
    env: dict[str, str],
    folder: Path,
    module: str,
    *,
    location_name: str | None = None,
    sensor_seconds: dict[str, int] | None = None,
) -> Iterator[None]:
    """`dagster-daemon run` over a workspace of `module`, as a deployment runs it: its
    sensors (the requeue sensor among them, running by default) tick while inside.

    The workspace names the location `location_name` when given (a workspace.yaml's
    `location_name:`), else after the module, as Dagster does. Its loops run every second
    (`daemon_loops`), and the sensors named in `sensor_seconds` tick at most that many
    seconds apart."""
    folder.mkdir(parents=True, exist_ok=True)
    entry = (
        f"python_module: {{module_name: {module}, location_name: {location_name}}}"
        if location_name
        else f"python_module: {module}"
    )
    (folder / "workspace.yaml").write_text(f"load_from:\n  - {entry}\n")
    layout = stack.StackLayout(folder / "stack")
    stack.start_process(
        layout,
        "daemon",
        [str(stack.BIN / "dagster-daemon"), "run", "-w", str(folder / "workspace.yaml")],
        stack.process_environment(fast_daemon_loops(env, sensor_seconds=sensor_seconds)),
        cwd=folder,
    )
    try:
        # Started once it beats: a command run now sees a daemon serving the instance.
        with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            wait_for(
                lambda: not silent_daemons(instance),
                timeout=DAEMON_START_SECONDS,
                interval=0.5,
                what=lambda: f"the daemon's first heartbeat (log: {layout.log_file('daemon')})",
            )
        yield
    finally:
        stack.stop_process(layout, "daemon", timeout=30)
