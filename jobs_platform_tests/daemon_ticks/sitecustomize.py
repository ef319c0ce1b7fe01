"""Shortens the Dagster daemon's fixed waits in the processes of a test.

`daemon_loops.fast_daemon_loops` puts this folder on `PYTHONPATH`, so every Python
process of the test loads this module at start. Dagster 1.13's backfill daemon loops
every 30 s (`dagster._daemon.controller.DEFAULT_DAEMON_INTERVAL_SECONDS`, a constant, not
configurable) and its sensor daemon looks for due sensors every 5 s (`dagster._daemon.
sensor.MIN_INTERVAL_LOOP_TIME`): a test of the UI path would wait up to 30 s for its
backfill's first run and up to 30 s more for the backfill to be marked done, idle. Both
constants are read at each loop, so they are set once their module is imported. With
`JOBS_PLATFORM_TESTS_SENSOR_SECONDS` (`name=seconds,…`) too, the named sensors' minimum
intervals are capped at those seconds (a requeue or dead-letter sensor ticks within
seconds of what it waits for). What the daemon and the sensors do is unchanged; only how
long they sleep. Dagster is not imported here: a process that never imports these
modules pays nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

LOOP_VARIABLE = "JOBS_PLATFORM_TESTS_DAEMON_LOOP_SECONDS"
SENSOR_VARIABLE = "JOBS_PLATFORM_TESTS_SENSOR_SECONDS"


def _set(name: str, seconds: float):
    def patch(module) -> None:
        # Loud, not silently slow, when a Dagster upgrade renames what is patched.
        if not hasattr(module, name):
            raise RuntimeError(f"{module.__name__}.{name} is gone: update {__file__}")
        setattr(module, name, seconds)

    return patch


def _cap_sensor_intervals(caps: dict[str, int]):
    def patch(module) -> None:
        sensor = module.RemoteSensor
        defined = sensor.min_interval_seconds
        if not isinstance(defined, property):
            raise RuntimeError(f"RemoteSensor.min_interval_seconds changed: update {__file__}")

        def capped(self) -> int:
            seconds = defined.fget(self)
            return min(seconds, caps.get(self.name, seconds))

        sensor.min_interval_seconds = property(capped)

    return patch


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Loads the modules it has patches for as usual, then applies the patch."""

    def __init__(self, patches: dict) -> None:
        self.patches = patches

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.patches:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Patching(spec.loader, self.patches[fullname])
        return spec


class _Patching(importlib.abc.Loader):
    def __init__(self, loader, patch) -> None:
        self.loader, self.patch = loader, patch

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        self.loader.exec_module(module)
        self.patch(module)


def _patches() -> dict:
    patches = {}
    loop = os.environ.get(LOOP_VARIABLE)
    if loop:
        seconds = float(loop)
        patches["dagster._daemon.controller"] = _set("DEFAULT_DAEMON_INTERVAL_SECONDS", seconds)
        patches["dagster._daemon.sensor"] = _set("MIN_INTERVAL_LOOP_TIME", seconds)
    sensors = os.environ.get(SENSOR_VARIABLE)
    if sensors:
        caps = {name: int(s) for name, s in (cap.split("=") for cap in sensors.split(","))}
        patches["dagster._core.remote_representation.external"] = _cap_sensor_intervals(caps)
    return patches


_wanted = _patches()
if _wanted:
    sys.meta_path.insert(0, _PatchAfterImport(_wanted))
