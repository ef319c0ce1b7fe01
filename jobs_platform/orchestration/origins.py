"""The code location a run or a sensor tick belongs to, named as `jobs-platform -m` names it.

What the commands the framework suggests carry as `-m MODULE` (`suggested_commands`), so a
command pasted from a location's UI, alert or failed step acts on that location. When
Dagster does not say (a run in process, a location on a code server of its own), the
location is the one `jobs-platform` loads without `-m` (`$JOBS_PLATFORM_MODULE`), or
none: the suggestion then carries no `-m`.
"""

import dagster as dg

from jobs_platform.location import named_module
from jobs_platform.orchestration._compat import run_location_module, sensor_location_module


def location_of_run(run: dg.DagsterRun) -> str | None:
    return run_location_module(run) or named_module()


def location_of_sensor(context: dg.SensorEvaluationContext) -> str | None:
    return sensor_location_module(context) or named_module()
