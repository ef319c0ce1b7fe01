"""What the CLI works on in Dagster: the code location, loaded by name, and the instance.

The CLI stands outside the code location, as `dagster -m jobs_platform.definitions` does:
it names the module and loads it when a command needs it. No module of the package
imports the code location, which imports them, so there is no import cycle through it.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dagster as dg

CODE_LOCATION_MODULE = "jobs_platform.definitions"


def load_definitions() -> dg.Definitions:
    """The code location's module-level `defs`."""
    return importlib.import_module(CODE_LOCATION_MODULE).defs


def dagster_instance() -> dg.DagsterInstance:
    """The instance in DAGSTER_HOME; without one, an empty in-memory instance."""
    import dagster as dg

    if os.environ.get("DAGSTER_HOME"):
        return dg.DagsterInstance.get()
    return dg.DagsterInstance.ephemeral()
