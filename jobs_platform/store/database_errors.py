"""What a warehouse's error says beyond its SQLSTATE, read in one place.

- A deployment error (an undefined table or column, a missing privilege): what is missing
  and the deploy step that adds it, from the names in PostgreSQL's (English) or SQLite's
  message. Recorded in place of the database's error (`recorded_error`).
- A rejected value (a type, a length, a NULL, a constraint): the SQLSTATE, the line of a
  COPY, the column, the database's words and what a merge's DETAIL names (`rejection_of`);
  the writer finds the row in its frame (`writer.upsert`, `writer.failing_row`).

How an error is classified, SQLSTATE included, is `errors.classify`'s (`taxonomy`).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from jobs_platform.errors import DeploymentError, Verdict, as_recorded
from jobs_platform.store.schema import STAGE_PREFIX, is_framework_table
from jobs_platform.taxonomy import driver_error, sqlstate_of

if TYPE_CHECKING:  # a SQLite warehouse never loads psycopg
    import psycopg

__all__ = ["Rejection", "deploy_step", "recorded_error", "rejection_of"]

# What a deployment error's message names, as PostgreSQL (in English) and SQLite spell it.
# A message in another language names nothing here; the remedy then quotes the database.
_NAMES_IN_MESSAGE: dict[str, tuple[re.Pattern[str], ...]] = {
    "42P01": (
        re.compile(r'relation "(?P<table>[^"]+)" does not exist'),
        re.compile(r"no such table: (?P<table>\S+)"),
    ),
    "42703": (
        re.compile(r'column "(?P<column>[^"]+)" of relation "(?P<table>[^"]+)" does not exist'),
        re.compile(r'column (?P<table>[^\s."]+)\.(?P<column>\S+) does not exist'),
        re.compile(r'column "(?P<column>[^"]+)" does not exist'),
        re.compile(r"table (?P<table>\S+) has no column named (?P<column>\S+)"),
        re.compile(r"no such column: (?P<column>\S+)"),
    ),
    "42501": (
        re.compile(
            r"permission denied to create temporary tables in database \"(?P<database>[^\"]+)\""
        ),
        re.compile(r"permission denied for (?:table|relation|view|sequence) (?P<table>\S+)"),
        re.compile(r"(?P<sqlite>readonly database)"),
    ),
}

_UPGRADE = "run: jobs-platform db upgrade"
# How users create their tables (docs/deploying.md, "Your backfills' tables are yours").
_CREATE_TABLE = (
    "create it at deploy time, with your own migrations or "
    "jobs_platform.create_user_tables(engine, table) "
    "(jobs-platform db upgrade creates only the framework's jp_* tables)"
)
_ADD_COLUMN = (
    "add it at deploy time with your own migration (create_user_tables never alters a table)"
)
# The writer's temporary tables live as long as the attempt's connection, across its
# transactions: only a connection that lost its session between them loses one.
_KEEP_SESSION = (
    "the warehouse connection lost its session between two transactions of the attempt; "
    "connect without a pooler in transaction mode (PgBouncer: pool_mode = session)"
)


def _table_owner(table: str | None) -> str:
    """Whose table: the framework's (migrated), a stage (temporary) or a backfill's."""
    name = (table or "").rpartition(".")[2]
    if name.startswith(STAGE_PREFIX):
        return "stage"
    return "framework" if is_framework_table(name) else "backfill"


def _missing_table(names: dict[str, str]) -> str:
    table = names.get("table")
    owner = _table_owner(table)
    if owner == "stage":
        return f'temporary table "{table}" does not exist: {_KEEP_SESSION}'
    what = f'table "{table}"' if table else "a table"
    return f"{what} does not exist in the warehouse: " + (
        _UPGRADE if owner == "framework" else _CREATE_TABLE
    )


def _missing_column(names: dict[str, str]) -> str:
    table, column = names.get("table"), names.get("column")
    what = f'column "{column}"' if column else "a column"
    if table is None:  # PostgreSQL names no table for an unqualified column of a SELECT
        fix = f"{_ADD_COLUMN}; if it is a column of a framework table (jp_*), {_UPGRADE}"
    else:
        what += f' of table "{table}"'
        fix = _UPGRADE if _table_owner(table) == "framework" else _ADD_COLUMN
    return f"{what} does not exist in the warehouse: {fix}"


def _missing_privilege(names: dict[str, str]) -> str:
    if "database" in names:
        database = names["database"]
        return (
            f'the warehouse user may not create temporary tables in database "{database}", '
            f"where the writer stages each chunk: grant it at deploy time "
            f"(GRANT TEMPORARY ON DATABASE {database} TO the user)"
        )
    if "sqlite" in names:
        return (
            "the SQLite warehouse is read-only to this worker: "
            "make the file and its folder writable"
        )
    table = names.get("table")
    what = f'table "{table}"' if table else "an object of the warehouse"
    return (
        f"the warehouse user lacks a privilege on {what}: grant it at deploy time "
        "(a backfill's table needs SELECT, INSERT, UPDATE and DELETE)"
    )


# Deployment errors: what is missing and the deploy step that adds it, from the names in
# the message. Other class-42 codes have no entry: no deploy step fixes a bug in code.
_DEPLOY_STEPS: dict[str, Callable[[dict[str, str]], str]] = {
    "42P01": _missing_table,
    "42703": _missing_column,
    "42501": _missing_privilege,
}

# Long enough for any realistic wrapping (as `errors.classify` walks the causes).
_MAX_CAUSE_DEPTH = 8


def _database_message(error: BaseException) -> str:
    """The database's one-line message, without the statement SQLAlchemy appends."""
    primary = getattr(getattr(error, "diag", None), "message_primary", None)
    return primary if isinstance(primary, str) and primary else str(error).partition("\n")[0]


def _error_of(exc: BaseException, sqlstate: str) -> BaseException | None:
    """The driver's error, `exc` or one of its causes, that the verdict's SQLSTATE is of."""
    current: BaseException | None = exc
    for _ in range(_MAX_CAUSE_DEPTH):
        if current is None:
            return None
        error = driver_error(current)
        if sqlstate_of(error) == sqlstate:
            return error
        current = current.__cause__
    return None


def deploy_step(exc: BaseException, verdict: Verdict) -> str | None:
    """What the warehouse lacks and the deploy step that adds it, with the database's own
    words; None unless `verdict` went by a SQLSTATE some deploy step fixes."""
    code = verdict.sqlstate
    step = _DEPLOY_STEPS.get(code) if code is not None else None
    error = _error_of(exc, code) if code is not None and step is not None else None
    if code is None or step is None or error is None:
        return None
    message = _database_message(error)
    names = next(
        (
            {name: value for name, value in found.groupdict().items() if value}
            for pattern in _NAMES_IN_MESSAGE[code]
            if (found := pattern.search(message))
        ),
        {},
    )
    return f"{step(names)} [{type(error).__name__}: {message}]"


def recorded_error(exc: BaseException, verdict: Verdict) -> BaseException:
    """The error to record for `exc`: a `DeploymentError` naming the deploy step when the
    warehouse lacks what the code needs, else as `errors.as_recorded` says (a programming
    error naming where it was raised). The original stays the cause."""
    step = None if isinstance(exc, DeploymentError) else deploy_step(exc, verdict)
    if step is None:
        return as_recorded(exc, verdict)
    recorded = DeploymentError(step)
    recorded.__cause__ = exc
    return recorded


# PostgreSQL's context of a failed COPY: the line of its input (one per row of the frame
# it was given) and, for a value it could not convert, the column: followed by the value
# in text (`column unit: "kilo"`), alone in binary (`column unit`).
_COPY_CONTEXT = re.compile(
    r"^COPY [^,]+, line (?P<line>\d+)(?:, column (?P<column>.+?)(?:: |$))?", re.M
)
_SQLITE_NOT_NULL = re.compile(r"^NOT NULL constraint failed: \S+\.(?P<column>\S+)$")
# PostgreSQL's DETAIL of a rejected merge: the failing row of a check or not-null violation
# ("Failing row contains (7, 1, -5, USD)."), the missing key of a foreign-key violation
# ("Key (customer_id)=(99) is not present in table …").
_FAILING_ROW = re.compile(r"^Failing row contains \((?P<fields>.*)\)\.$", re.S)
_MISSING_KEY = re.compile(r"^Key \((?P<column>[^,()]+)\)=\((?P<value>.*)\) is not present", re.S)
# What a rejected value's SQLSTATE means, in the framework's words.
_PROBLEMS = {
    "22001": "{value} is too long for {type}",
    "22003": "{value} is out of range for {type}",
    "22007": "{value} is not a valid {type}",
    "22008": "{value} is out of range for {type}",
    "22P02": "{value} is not a valid {type}",
    "23502": "NULL in a NOT NULL column",
}


@dataclass(frozen=True)
class Rejection:
    """What a write's error says about the value the warehouse rejected."""

    sqlstate: str
    message: str
    """The database's one-line words."""
    line: int | None = None
    """The 1-based line of a COPY's input: the row's position in what was copied."""
    column: str | None = None
    detail: str | None = None
    """PostgreSQL's DETAIL, which may name a merge's failing row (`writer.failing_row`)."""

    def problem(self, value: str, column_type: str) -> str:
        """The rejection of `value` (as shown) in a column of `column_type`, in our words."""
        problem = _PROBLEMS.get(self.sqlstate, "{value} was rejected: {message}")
        return problem.format(value=value, type=column_type, message=self.message)

    def failing_row(self) -> list[str] | None:
        """The fields of the failing row the DETAIL spells out, as text (a check or not-null
        violation); split on ", ", so a field holding one reads as two."""
        failing = _FAILING_ROW.match(self.detail or "")
        return failing["fields"].split(", ") if failing else None

    def missing_key(self) -> tuple[str, str] | None:
        """The column and the value (as text) of the key a foreign-key violation's DETAIL
        says is missing."""
        if self.sqlstate != "23503":
            return None
        missing = _MISSING_KEY.match(self.detail or "")
        return (missing["column"], missing["value"]) if missing else None


def rejection_of(error: BaseException) -> Rejection | None:
    """What `error` says about a rejected value (SQLSTATE class 22 or 23), or None."""
    driver = driver_error(error)
    sqlstate = getattr(driver, "sqlstate", None)
    if isinstance(sqlstate, str):  # psycopg
        if sqlstate[:2] not in ("22", "23"):
            return None
        # A string SQLSTATE comes from psycopg 3, the PostgreSQL driver (`db.normalize_url`).
        diag = cast("psycopg.Error", driver).diag
        copied = _COPY_CONTEXT.match(diag.context or "")
        return Rejection(
            sqlstate,
            diag.message_primary or str(driver),
            line=int(copied["line"]) if copied else None,
            column=(copied["column"] if copied else None) or diag.column_name,
            detail=diag.message_detail,
        )
    if isinstance(driver, sqlite3.IntegrityError):
        not_null = _SQLITE_NOT_NULL.match(str(driver))
        return Rejection(
            "23502" if not_null else "23000",
            str(driver),
            column=not_null["column"] if not_null else None,
        )
    return None
