"""The warehouse as the CLI opens it: one line naming it and what to check, when it cannot."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.location import (
    add_module_option,
    load_definitions,
    location_settings,
    named_module,
)
from jobs_platform.settings import Settings, embedded_database_url
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import normalize_url, redact_url
from jobs_platform.store.migrate import ready_warehouse

# Where a warehouse URL comes from.
_NAMED_BY = "JOBS_PLATFORM_DATABASE_URL (or the code location's jobs_platform resource)"


class WarehouseUnavailable(Exception):
    """The CLI cannot open the warehouse; the message names it, password hidden."""


def add_reading_command(
    actions,
    name: str,
    help: str,
    handler: Callable[[argparse.Namespace], int],
    *,
    one_partition: bool = False,
) -> argparse.ArgumentParser:
    """A subcommand that reads the warehouse: `-m` names the code location (and with it the
    warehouse, `command_settings`), `--json` prints machine-readable output; with
    `one_partition`, it names one partition as ASSET PARTITION."""
    command = actions.add_parser(name, help=help)
    add_module_option(command)
    if one_partition:
        command.add_argument("asset")
        command.add_argument("partition")
    command.add_argument("--json", action="store_true", help="machine-readable output")
    command.set_defaults(handler=handler)
    return command


def command_settings(module: str | None) -> Settings:
    """The settings a command that reads the warehouse works with.

    With a code location named (`-m`, or $JOBS_PLATFORM_MODULE): its bound `jobs_platform`
    resource's, so that the command reads the warehouse the location writes to (loading
    the location imports Dagster: seconds). Without one: the environment's, at once.
    """
    if named_module(module):
        return location_settings(load_definitions(module))
    return Settings.from_env()


def open_warehouse(settings: Settings | None = None) -> sa.Engine:
    """The engine of the warehouse `settings` name (the environment's by default), its
    schema checked current.

    A SQLite warehouse must be in an existing folder: a command that reads state must not
    answer "nothing here" from a fresh, empty warehouse made at a mistyped path.
    """
    url = (settings or Settings.from_env()).database_url
    shown = f"cannot open the warehouse {redact_url(url)}"
    parsed = normalize_url(url)
    # The embedded default is zero set-up: before anything ran here it is created, empty.
    explicit_sqlite = parsed.get_backend_name() == "sqlite" and url != embedded_database_url()
    if explicit_sqlite and parsed.database not in (None, "", ":memory:"):
        folder = Path(parsed.database).parent
        if not folder.is_dir():
            raise WarehouseUnavailable(
                f"{shown}: the folder {folder} does not exist; check {_NAMED_BY} (a SQLite "
                "warehouse is created by `jobs-platform db upgrade` or by a run)"
            )
    try:
        engine = ready_warehouse(url)
    except sa.exc.DBAPIError as error:
        # The driver's first line says why (refused, unknown host, bad password); the
        # rest of its text and SQLAlchemy's traceback say nothing more to a person.
        reason = (str(error.orig).strip().splitlines() or [type(error.orig).__name__])[0]
        raise WarehouseUnavailable(
            f"{shown} ({reason}): check that the database is running and reachable from "
            f"here, and that {_NAMED_BY} names it with the right credentials"
        ) from None
    return engine


def open_store(settings: Settings | None = None) -> Warehouse:
    """`open_warehouse` as a `Warehouse`, on the database's clock: what a command that stamps or
    compares a time writes through (`engine.warehouse`)."""
    return Warehouse(open_warehouse(settings), DATABASE_CLOCK)
