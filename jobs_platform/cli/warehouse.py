"""The warehouse as the CLI opens it: one line naming it and what to check, when it cannot."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

from jobs_platform.settings import Settings, embedded_database_url
from jobs_platform.store.db import normalize_url, redact_url
from jobs_platform.store.migrate import ready_warehouse


class WarehouseUnavailable(Exception):
    """The CLI cannot open the warehouse; the message names it, password hidden."""


def open_warehouse() -> sa.Engine:
    """The engine of JOBS_PLATFORM_DATABASE_URL's warehouse, its schema checked current.

    A SQLite warehouse must be in an existing folder: a command that reads state must not
    answer "nothing here" from a fresh, empty warehouse made at a mistyped path.
    """
    url = Settings.from_env().database_url
    shown = f"cannot open the warehouse {redact_url(url)}"
    parsed = normalize_url(url)
    # The embedded default is zero set-up: before anything ran here it is created, empty.
    explicit_sqlite = parsed.get_backend_name() == "sqlite" and url != embedded_database_url()
    if explicit_sqlite and parsed.database not in (None, "", ":memory:"):
        folder = Path(parsed.database).parent
        if not folder.is_dir():
            raise WarehouseUnavailable(
                f"{shown}: the folder {folder} does not exist; check JOBS_PLATFORM_DATABASE_URL "
                "(a SQLite warehouse is created by `jobs-platform db upgrade` or by a run)"
            )
    try:
        engine = ready_warehouse(url)
    except sa.exc.DBAPIError as error:
        # The driver's first line says why (refused, unknown host, bad password); the
        # rest of its text and SQLAlchemy's traceback say nothing more to a person.
        reason = (str(error.orig).strip().splitlines() or [type(error.orig).__name__])[0]
        raise WarehouseUnavailable(
            f"{shown} ({reason}): check that the database is running and reachable from "
            "here, and that JOBS_PLATFORM_DATABASE_URL names it with the right credentials"
        ) from None
    return engine
