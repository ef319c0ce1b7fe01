"""Dagster daemons that loop every second in a test's processes, not every 30 s.

`fast_daemon_loops(env)` puts `daemon_ticks/` (its `sitecustomize`) on the `PYTHONPATH`
of the processes started with `env`: their backfill daemon creates a backfill's runs, and
marks it done, within a second or two instead of up to 30 s each. With `sensor_seconds`
({sensor name: seconds}), the sensors named wait no longer than that between ticks (the
dead-letter sensor's 30 s, the requeue sensor's 15 s). What a backfill or a sensor does
is unchanged; only the daemon's idle waits between its iterations are shorter.
"""

from __future__ import annotations

import os
from pathlib import Path

SITE_DIR = Path(__file__).resolve().with_name("daemon_ticks")
LOOP_VARIABLE = "JOBS_PLATFORM_TESTS_DAEMON_LOOP_SECONDS"
SENSOR_VARIABLE = "JOBS_PLATFORM_TESTS_SENSOR_SECONDS"
LOOP_SECONDS = 1


def fast_daemon_loops(
    env: dict[str, str], *, sensor_seconds: dict[str, int] | None = None
) -> dict[str, str]:
    """`env` with the daemon's loops shortened for every process started with it."""
    inherited = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    path = os.pathsep.join(part for part in (str(SITE_DIR), inherited) if part)
    fast = {**env, "PYTHONPATH": path, LOOP_VARIABLE: str(LOOP_SECONDS)}
    if sensor_seconds:
        fast[SENSOR_VARIABLE] = ",".join(f"{name}={s}" for name, s in sensor_seconds.items())
    return fast
