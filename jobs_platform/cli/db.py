"""`jobs-platform db upgrade [--sql] | current | check`: the framework's tables at deploy time."""

from __future__ import annotations

import argparse
import sys

import sqlalchemy as sa

# `db check`: 0 at head, 1 behind (or at a revision this version does not know).
EXIT_BEHIND = 1
EXIT_UNREACHABLE = 2


def register(commands) -> None:
    parser = commands.add_parser("db", help="migrate the framework's tables (a deploy step)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    upgrade = actions.add_parser(
        "upgrade", help="upgrade the warehouse's framework tables to this version's head"
    )
    upgrade.add_argument(
        "--sql", action="store_true", help="print the SQL for a DBA to run instead; change nothing"
    )
    upgrade.set_defaults(handler=run_upgrade)
    current = actions.add_parser("current", help="show the warehouse's schema revision")
    current.set_defaults(handler=run_current)
    check = actions.add_parser("check", help="exit 1 when the warehouse is behind, 0 at head")
    check.set_defaults(handler=run_check)


def run_upgrade(args: argparse.Namespace) -> int:
    from jobs_platform.store.migrate import upgrade_warehouse, write_upgrade_sql

    engine, url = _warehouse()
    try:
        if args.sql:
            # stdout is the script alone, so that it can be piped to psql or saved for review.
            state = write_upgrade_sql(engine, sys.stdout)
            note = "nothing to do" if state.at_head else "nothing was changed"
            print(
                f"-- warehouse {url} is at revision {state.describe_revision()}, "
                f"head is {state.head}: {note}",
                file=sys.stderr,
            )
            return 0
        print(f"warehouse: {url}")
        done = upgrade_warehouse(engine)
    except sa.exc.OperationalError as exc:
        return _unreachable(url, exc)
    if done.adopted:
        print("found the unversioned tables of jobs_platform 0.1.0: adopted them as the baseline")
    if done.before == done.after:
        print(f"already at head {done.after}")
    else:
        print(f"upgraded from {done.before or 'an empty schema'} to {done.after}")
    return 0


def run_current(args: argparse.Namespace) -> int:
    read = _read_schema_state()
    if isinstance(read, int):
        return read
    state, url = read
    print(f"warehouse: {url}")
    where = "head" if state.at_head else f"behind head {state.head}"
    if not state.known:
        where = f"unknown to this version, whose head is {state.head}"
    print(f"revision:  {state.describe_revision()} ({where})")
    return 0


def run_check(args: argparse.Namespace) -> int:
    read = _read_schema_state()
    if isinstance(read, int):
        return read
    state, url = read
    if state.at_head:
        print(f"ok: warehouse {url} is at head {state.head}")
        return 0
    print(state.not_ready_message())
    return EXIT_BEHIND


def _read_schema_state():
    """(the warehouse's schema state, its redacted URL), or the exit code when unreachable."""
    from jobs_platform.store.migrate import schema_state

    engine, url = _warehouse()
    try:
        return schema_state(engine), url
    except sa.exc.OperationalError as exc:
        return _unreachable(url, exc)


def _warehouse() -> tuple[sa.Engine, str]:
    from jobs_platform.settings import Settings
    from jobs_platform.store.db import redact_url, warehouse_engine

    database_url = Settings.from_env().database_url
    return warehouse_engine(database_url), redact_url(database_url)


def _unreachable(url: str, exc: sa.exc.OperationalError) -> int:
    reason = str(exc.orig or exc).strip().splitlines()[0]
    print(f"error: cannot reach warehouse {url}: {reason}", file=sys.stderr)
    return EXIT_UNREACHABLE
