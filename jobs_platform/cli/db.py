"""`jobs-platform db upgrade [-m MODULE] [--sql] | current | check`: the deploy step.

The framework's tables are migrated (Alembic); then the code location's backfills get
their tables created when missing, never altered: a backfill's table is the user's, and
a change to it is the user's own migration.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from jobs_platform.location import add_module_option
from jobs_platform.suggested_commands import suggested_command

if TYPE_CHECKING:
    from jobs_platform.engine.spec import BackfillSpec

# `db check`: 0 at head with every backfill table there; 1 behind (or at a revision this
# version does not know) or a backfill table missing.
EXIT_BEHIND = 1
EXIT_UNREACHABLE = 2
NO_LOCATION = "none named (-m): the framework's tables only"


def register(commands) -> None:
    parser = commands.add_parser(
        "db", help="migrate the framework's tables, create the backfills' (a deploy step)"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    upgrade = actions.add_parser(
        "upgrade",
        help="upgrade the framework's tables to this version's head, then create the code "
        "location's missing backfill tables (an existing table is never altered)",
    )
    add_module_option(upgrade)
    upgrade.add_argument(
        "--sql", action="store_true", help="print the SQL for a DBA to run instead; change nothing"
    )
    upgrade.set_defaults(handler=run_upgrade)
    current = actions.add_parser(
        "current", help="show the warehouse's schema revision and the backfill tables it lacks"
    )
    add_module_option(current)
    current.set_defaults(handler=run_current)
    check = actions.add_parser(
        "check", help="exit 1 when the warehouse is behind or lacks a backfill table, else 0"
    )
    add_module_option(check)
    check.set_defaults(handler=run_check)


def run_upgrade(args: argparse.Namespace) -> int:
    from jobs_platform.store.migrate import (
        deploy_warehouse,
        write_upgrade_sql,
        write_user_tables_sql,
    )

    # The code location is loaded first: a mistyped module changes nothing.
    module, backfills, database_url = _location(args.module)
    tables = [spec.table for spec in backfills]
    engine, url = _warehouse(database_url, changes=not args.sql)
    try:
        if args.sql:
            # stdout is the script alone, so that it can be piped to psql or saved for review.
            state = write_upgrade_sql(engine, sys.stdout)
            missing = write_user_tables_sql(engine, tables, sys.stdout)
            note = "nothing to do" if state.at_head and not missing else "nothing was changed"
            print(
                f"-- warehouse {url} is at revision {state.describe_revision()}, head is "
                f"{state.head}; {_missing_note(missing, backfills, module)}: {note}",
                file=sys.stderr,
            )
            return 0
        print(f"warehouse:     {url}")
        print(f"code location: {module or NO_LOCATION}")
        deployed = deploy_warehouse(engine, tables)
    except sa.exc.OperationalError as exc:
        return _unreachable(url, exc)
    done, created = deployed.upgrade, deployed.created
    if done.adopted:
        print("found the unversioned tables of jobs_platform 0.1.0: adopted them as the baseline")
    if done.before == done.after:
        print(f"already at head {done.after}")
    else:
        print(f"upgraded from {done.before or 'an empty schema'} to {done.after}")
    for table in created:
        print(f"created table {table.name} ({_backfills_of(table, backfills)})")
    existing = sorted({spec.table.name for spec in backfills} - {t.name for t in created})
    if existing:
        print(f"backfill tables already there, left as they are: {', '.join(existing)}")
    if module is None:
        return 0
    if not backfills:
        print(f"code location {module} declares no backfill: no table to create")
    written = _write_catalog(engine, module)
    print(
        f"catalog: {len(written)} backfill(s) of {module} written "
        "(what `jobs-platform status` reads without loading the location)"
    )
    return 0


def _write_catalog(engine: sa.Engine, module: str) -> list:
    """The location's backfills and their partition keys, into the catalog (`store.catalog`).

    After the upgrade, which creates the catalog's table. The location is loaded already
    (`_location`): importing it again is free.
    """
    from jobs_platform.engine.warehouse import Warehouse
    from jobs_platform.location import dagster_instance, load_definitions
    from jobs_platform.orchestration.catalog import location_assets, write_location_catalog
    from jobs_platform.store.clock import DATABASE_CLOCK

    assets_defs = location_assets(load_definitions(module))
    with dagster_instance() as instance:
        return write_location_catalog(
            Warehouse(engine, DATABASE_CLOCK), module, assets_defs, instance
        )


def run_current(args: argparse.Namespace) -> int:
    read = _read_warehouse(args.module)
    if isinstance(read, int):
        return read
    state, missing, backfills, module, url = read
    print(f"warehouse: {url}")
    where = "head" if state.at_head else f"behind head {state.head}"
    if not state.known:
        where = f"unknown to this version, whose head is {state.head}"
    print(f"revision:  {state.describe_revision()} ({where})")
    print(f"backfills: {_missing_note(missing, backfills, module)}")
    return 0


def run_check(args: argparse.Namespace) -> int:
    read = _read_warehouse(args.module)
    if isinstance(read, int):
        return read
    state, missing, backfills, module, url = read
    if state.at_head and not missing:
        print(
            f"ok: warehouse {url} is at head {state.head}; "
            f"{_missing_note(missing, backfills, module)}"
        )
        return 0
    # The remedy names the location the check read, wherever the command is pasted.
    upgrade = suggested_command("db", "upgrade", *(["-m", module] if module else []))
    if not state.at_head:
        print(state.not_ready_message(upgrade))
    for table in missing:
        print(
            f"warehouse {url} lacks the table {table.name} of "
            f"{_backfills_of(table, backfills)} (code location {module}); run: {upgrade}"
        )
    return EXIT_BEHIND


def _location(module: str | None) -> tuple[str | None, list[BackfillSpec], str]:
    """The code location's name, its backfills (loading it declares them) and the URL of
    its warehouse (its bound `jobs_platform` resource's, else the environment's).

    Without `-m` or $JOBS_PLATFORM_MODULE: no location, no backfill, the environment's
    warehouse; the commands then work on the framework's tables alone.
    """
    from jobs_platform.location import (
        load_definitions,
        location_backfills,
        location_settings,
        named_module,
    )
    from jobs_platform.settings import Settings

    name = named_module(module)
    if name is None:
        return None, [], Settings.from_env().database_url
    definitions = load_definitions(name)
    return name, location_backfills(definitions), location_settings(definitions).database_url


def _read_warehouse(module: str | None):
    """(schema state, missing backfill tables, backfills, module, redacted URL), or the
    exit code when the warehouse is unreachable."""
    from jobs_platform.store.migrate import missing_user_tables, schema_state

    name, backfills, database_url = _location(module)
    engine, url = _warehouse(database_url, changes=False)
    try:
        state = dataclasses.replace(schema_state(engine), url=url)
        missing = missing_user_tables(engine, [spec.table for spec in backfills])
    except sa.exc.OperationalError as exc:
        return _unreachable(url, exc)
    return state, missing, backfills, name, url


def _missing_note(
    missing: list[sa.Table], backfills: list[BackfillSpec], module: str | None
) -> str:
    if module is None:
        return "no code location named (-m), so no backfill table checked"
    if not backfills:
        return f"code location {module} declares no backfill"
    if not missing:
        count = len({spec.table.name for spec in backfills})
        return f"every backfill table of {module} is there ({count})"
    return f"missing backfill table(s) of {module}: {', '.join(table.name for table in missing)}"


def _backfills_of(table: sa.Table, backfills: list[BackfillSpec]) -> str:
    names = [spec.asset for spec in backfills if spec.table.name == table.name]
    return f"backfill {', '.join(names)}"


def _warehouse(database_url: str, *, changes: bool) -> tuple[sa.Engine, str]:
    """The warehouse's engine and its URL, password hidden.

    A SQLite file that does not exist yet (the embedded default in a new folder, say) is
    read as the empty database it would be: opening it would create it, and `--sql`,
    `current` and `check` change nothing.
    """
    from jobs_platform.store.db import normalize_url, redact_url, warehouse_engine

    parsed = normalize_url(database_url)
    sqlite_file = (
        parsed.database
        if parsed.get_backend_name() == "sqlite" and parsed.database not in ("", ":memory:")
        else None
    )
    if not changes and sqlite_file is not None and not Path(sqlite_file).exists():
        return sa.create_engine("sqlite://", poolclass=sa.StaticPool), redact_url(database_url)
    return warehouse_engine(database_url), redact_url(database_url)


def _unreachable(url: str, exc: sa.exc.OperationalError) -> int:
    reason = str(exc.orig or exc).strip().splitlines()[0]
    print(f"error: cannot reach warehouse {url}: {reason}", file=sys.stderr)
    return EXIT_UNREACHABLE
