"""What the CLI works on in Dagster: the code location, loaded by name, and the instance.

The CLI stands outside the code location, as `dagster -m MODULE` does: a command that
needs one takes `-m/--module MODULE` (a module with a module-level `defs`), else
`$JOBS_PLATFORM_MODULE`, else the bundled example `jobs_platform.definitions`, and loads
it when it needs it. No module of the package imports a code location, which imports
them, so there is no import cycle through it.
"""

from __future__ import annotations

import argparse
import importlib
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dagster as dg

CODE_LOCATION_MODULE = "jobs_platform.definitions"
MODULE_VARIABLE = "JOBS_PLATFORM_MODULE"


def add_module_option(parser: argparse.ArgumentParser) -> None:
    """`-m/--module MODULE`, as on `dagster … -m`."""
    parser.add_argument(
        "-m",
        "--module",
        metavar="MODULE",
        default=None,
        help=f"the code location: a module with `defs` (default ${MODULE_VARIABLE}, "
        f"then {CODE_LOCATION_MODULE})",
    )


def code_location_module(module: str | None = None) -> str:
    """The module the command works on: `-m`, then $JOBS_PLATFORM_MODULE, then the example."""
    return module or os.environ.get(MODULE_VARIABLE) or CODE_LOCATION_MODULE


def load_definitions(module: str | None = None) -> dg.Definitions:
    """The code location's module-level `defs`; a clear error when there is none."""
    name = code_location_module(module)
    try:
        loaded = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise LookupError(
            f"cannot import code location {name!r}: {exc}; pass -m MODULE (a module with "
            f"`defs`) or set {MODULE_VARIABLE}"
        ) from None
    defs = getattr(loaded, "defs", None)
    if defs is None:
        raise LookupError(f"code location {name!r} has no module-level `defs`")
    return defs


def dagster_instance() -> dg.DagsterInstance:
    """The instance in DAGSTER_HOME; without one, an empty in-memory instance."""
    import dagster as dg

    if os.environ.get("DAGSTER_HOME"):
        return dg.DagsterInstance.get()
    return dg.DagsterInstance.ephemeral()
