"""What the command lines work on in Dagster: the code location, loaded by name, and the instance.

`jobs-platform`, `bin/stack` and the benchmarks stand outside the code location, as
`dagster -m MODULE` does. A command that needs one takes `-m/--module MODULE` (a module
with a module-level `defs`), else `$JOBS_PLATFORM_MODULE`, and loads it when it needs it.
There is no default: a command never falls back to a location the user did not name. No
module of the package imports a code location, which imports them, so there is no import
cycle through it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dagster as dg

    from jobs_platform.engine.spec import BackfillSpec
    from jobs_platform.settings import Settings

MODULE_VARIABLE = "JOBS_PLATFORM_MODULE"


def add_module_option(parser: argparse.ArgumentParser) -> None:
    """`-m/--module MODULE`, as on `dagster … -m`."""
    parser.add_argument(
        "-m",
        "--module",
        metavar="MODULE",
        default=None,
        help=f"the code location: a module with `defs` (default ${MODULE_VARIABLE})",
    )


def code_location_module(module: str | None = None) -> str:
    """The module the command works on: `-m`, then $JOBS_PLATFORM_MODULE; else an error."""
    name = named_module(module)
    if name is None:
        raise LookupError(
            f"no code location named: pass -m MODULE (a module with `defs`, as for "
            f"`dagster … -m`) or set {MODULE_VARIABLE}"
        )
    return name


def named_module(module: str | None = None) -> str | None:
    """The code location `-m` or $JOBS_PLATFORM_MODULE names; None when neither names one.

    For the commands that read the whole warehouse unless told which location to look at.
    """
    return module or os.environ.get(MODULE_VARIABLE) or None


def load_definitions(module: str | None = None) -> dg.Definitions:
    """The code location's module-level `defs`; a clear error when there is none."""
    name = code_location_module(module)
    _search_working_directory()
    try:
        loaded = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise _not_found(name, exc) from None
    defs = getattr(loaded, "defs", None)
    if defs is None:
        raise LookupError(f"code location {name!r} has no module-level `defs`")
    # A `@dg.definitions` function (the `definitions.py` that `create-dagster project`
    # writes) builds them when called, as `dagster … -m` calls it; `Definitions` are not
    # callable.
    return defs() if callable(defs) else defs


def require_module(module: str | None = None) -> str:
    """The code location's name, once found; its code is not run (so Dagster not imported).

    For a command that takes `-m` but does not need the location's definitions: a
    mistyped name still fails in one line.
    """
    name = code_location_module(module)
    _search_working_directory()
    try:
        found = importlib.util.find_spec(name)
    except ModuleNotFoundError as exc:  # a missing parent package
        raise _not_found(name, exc) from None
    if found is None:
        raise _not_found(name, f"No module named {name!r}")
    return name


def named_location(module: str | None = None) -> str | None:
    """The code location `-m` or $JOBS_PLATFORM_MODULE names, checked as `require_module`
    checks it; None when neither names one.

    For the commands that read the whole warehouse and name a location only in the
    commands they suggest: without one, the suggestions carry no `-m`.
    """
    return require_module(module) if named_module(module) else None


def _search_working_directory() -> None:
    # As `dagster … -m` finds a module of the working directory, so does the CLI (a
    # console script's path holds its own folder, not the working directory). Appended,
    # so that an installed package is never shadowed by a folder of the same name.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())


def _not_found(name: str, reason: object) -> LookupError:
    return LookupError(
        f"cannot import code location {name!r}: {reason}; pass -m MODULE (a module with "
        f"`defs`) or set {MODULE_VARIABLE}"
    )


def location_backfills(definitions: dg.Definitions) -> list[BackfillSpec]:
    """The backfills a loaded code location serves (its `backfill_asset` assets), in order.

    Found on the location's own asset definitions: a module it imports that declares
    other backfills adds nothing unless the location's `Definitions` hold them.
    """
    from jobs_platform.orchestration.specs import backfill_specs

    return list(backfill_specs(definitions.assets or ()).values())


def location_settings(definitions: dg.Definitions) -> Settings:
    """The settings of the location's bound `jobs_platform` resource, its fields resolved
    (`dg.EnvVar` included); the environment's when the location binds none.

    What a command with `-m` works on, so that it names the warehouse the location's steps
    and sensors write to.
    """
    import dagster as dg

    from jobs_platform.orchestration.resources import JobsPlatformResource
    from jobs_platform.settings import Settings, SettingsError

    resource = (definitions.resources or {}).get("jobs_platform")
    if not isinstance(resource, JobsPlatformResource):
        return Settings.from_env()
    try:
        resource = resource.process_config_and_initialize()
    except dg.DagsterInvalidConfigError as error:  # e.g. a `dg.EnvVar` that is not set
        reasons = "; ".join(_first_line(e.message) for e in error.errors)
        raise SettingsError(f"the code location's jobs_platform resource: {reasons}") from None
    return resource.settings()


def _first_line(message: str) -> str:
    # Dagster's config error: the cause, then its stack trace, on a few lines.
    cause = message.split("Stack Trace:", 1)[0].rsplit("Error: ", 1)[-1]
    return " ".join(cause.split())


def dagster_instance() -> dg.DagsterInstance:
    """The instance in DAGSTER_HOME; without one, an empty in-memory instance."""
    import dagster as dg

    if os.environ.get("DAGSTER_HOME"):
        return dg.DagsterInstance.get()
    return dg.DagsterInstance.ephemeral()
