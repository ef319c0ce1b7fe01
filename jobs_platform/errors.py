"""The error taxonomy: how a failed attempt is classified, with no Dagster in sight.

The classes and what each leads to: docs/ARCHITECTURE.md, "Error taxonomy".
"""

from __future__ import annotations

import enum
import json
import math
import re
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import FrameType, TracebackType

import sqlalchemy.exc

__all__ = [
    "AttemptInterrupted",
    "AttemptTimedOut",
    "Classification",
    "DeploymentError",
    "InputValidationError",
    "JobsPlatformError",
    "LeaseLostError",
    "RetryableError",
    "TerminalError",
    "Verdict",
    "WarehouseNotShared",
    "as_recorded",
    "classify",
    "parse_retry_after",
]


class Classification(enum.StrEnum):
    """How an attempt ended, as spelled in histories, the CLI and metadata."""

    RETRYABLE = "retryable"
    """A transient failure (timeout, lost connection, 429/503, deadlock): retried with backoff."""
    TERMINAL = "terminal"
    """The input itself is bad (validation, malformed data, 4xx): quarantined at once."""
    CRASH = "crash"
    """The worker process died mid-attempt; recorded by the rescuer, never by `classify`."""
    LEASE_LOST = "lease_lost"
    """The worker's fencing token no longer owns the partition lease; its commit is rolled back."""
    INTERRUPTED = "interrupted"
    """A graceful shutdown stopped the attempt; not counted against the input."""
    UNKNOWN = "unknown"
    """Anything unrecognised: retried (bounded) but labelled so someone can classify it."""


@dataclass(frozen=True)
class Verdict:
    """The outcome `classify` assigns to one exception."""

    classification: Classification
    retry_after: float | None
    reason: str
    remedy: str | None = None
    """For a deployment error: what is missing and the deploy step that adds it (recorded)."""
    raised_in: str | None = None
    """For a programming error of the user's code: `TypeError in f() at file:line` (recorded)."""


class JobsPlatformError(Exception):
    """Base of every error the platform raises on purpose."""


class RetryableError(JobsPlatformError):
    """A transient failure job code signals explicitly, optionally with a server-given delay."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class TerminalError(JobsPlatformError):
    """A failure retrying cannot fix: the partition is quarantined at once."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


class WarehouseNotShared(TerminalError):
    """A step that may run on another machine has no warehouse every machine can reach.

    Under a remote executor the embedded SQLite default (or any relative SQLite path)
    would be a file on whichever worker ran the step: the step refuses instead of writing
    a partition where no one else will find it.
    """


class DeploymentError(TerminalError):
    """The warehouse lacks what the code needs: a table, a column, a privilege.

    Recorded in place of the database's error (kept as its cause, with its traceback) when
    `classify` knows the deploy step that fixes it: no retry can succeed before someone
    takes that step, and then a requeue runs the partition again.
    """


class InputValidationError(TerminalError):
    """A record of the input data is invalid."""

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None) -> None:
        where = [f"line {line}"] if line is not None else []
        where += [f"field {field!r}"] if field is not None else []
        # The location goes into args too, so str() and a pickled copy both read naturally.
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.detail = message
        self.line = line
        self.field = field


class LeaseLostError(JobsPlatformError):
    """The worker's fencing token no longer owns the partition lease."""


class AttemptInterrupted(JobsPlatformError):
    """A graceful shutdown (SIGTERM, run terminated) interrupted the attempt."""


class AttemptTimedOut(RetryableError):
    """The attempt passed its deadline."""


_R, _T = Classification.RETRYABLE, Classification.TERMINAL

# First isinstance match wins, so subclasses precede their bases (AttemptTimedOut before
# RetryableError). Exceptions carrying a SQLSTATE or an HTTP status are looked up in the
# tables below first; these are the fallbacks by type.
_BY_TYPE: tuple[tuple[type[BaseException], Classification, str], ...] = (
    (AttemptTimedOut, _R, "attempt deadline passed"),
    (DeploymentError, _T, "deployment error"),
    (RetryableError, _R, "retryable error raised by the job"),
    (TerminalError, _T, "terminal error raised by the job"),
    (LeaseLostError, Classification.LEASE_LOST, "partition lease lost"),
    (AttemptInterrupted, Classification.INTERRUPTED, "interrupted by shutdown"),
    # Ctrl-C is an operator stopping the worker, not a fault in the input.
    (KeyboardInterrupt, Classification.INTERRUPTED, "interrupted by shutdown"),
    (TimeoutError, _R, "timeout"),  # socket.timeout is an alias of it since Python 3.10
    (ConnectionError, _R, "connection error"),
    (json.JSONDecodeError, _T, "malformed JSON"),
    (UnicodeDecodeError, _T, "undecodable text"),
    (FileNotFoundError, _T, "missing input file"),
    # Without a known SQLSTATE (connection refused, SQLite's "database is locked") an
    # operational error is about the database's state, not the data: worth another try.
    (sqlalchemy.exc.OperationalError, _R, "database operational error"),
    (sqlite3.OperationalError, _R, "database operational error"),
    (sqlalchemy.exc.TimeoutError, _R, "database connection pool timeout"),
    (sqlalchemy.exc.IntegrityError, _T, "integrity constraint violation"),
    (sqlalchemy.exc.DataError, _T, "data error"),
    (sqlite3.IntegrityError, _T, "integrity constraint violation"),
)

# Exceptions of libraries the core does not import itself, by module and class name. An
# exception of a library cannot exist before the library was imported, so they are looked
# up in `sys.modules` when classifying: importing the taxonomy (every CLI command does)
# then costs neither httpx nor psycopg nor pydantic. None subclasses a type above.
_BY_LIBRARY_TYPE: tuple[tuple[str, str, Classification, str], ...] = (
    ("httpx", "TimeoutException", _R, "HTTP timeout"),
    ("httpx", "NetworkError", _R, "HTTP network error"),  # includes httpx.ConnectError
    ("httpx", "RemoteProtocolError", _R, "server dropped the connection"),
    ("pydantic", "ValidationError", _T, "payload validation failed"),
    ("psycopg", "OperationalError", _R, "database operational error"),
    ("psycopg", "IntegrityError", _T, "integrity constraint violation"),
    ("psycopg", "DataError", _T, "data error"),
)


def _types_to_match() -> list[tuple[type[BaseException], Classification, str]]:
    loaded = [
        (getattr(sys.modules[module], name), classification, label)
        for module, name, classification, label in _BY_LIBRARY_TYPE
        if module in sys.modules
    ]
    return [*_BY_TYPE, *loaded]


_BY_SQLSTATE: dict[str, tuple[Classification, str]] = {
    "40001": (_R, "serialization failure"),
    "40P01": (_R, "deadlock detected"),
    "55P03": (_R, "lock not available"),
    "53300": (_R, "too many connections"),
    "57014": (_R, "query canceled (statement timeout)"),
    "57P01": (_R, "admin shutdown"),
    "57P02": (_R, "crash shutdown"),
    "57P03": (_R, "cannot connect now"),
    # Deployment errors (see class 42 below); their verdict carries the deploy step.
    "42P01": (_T, "undefined table"),
    "42703": (_T, "undefined column"),
    "42501": (_T, "insufficient privilege"),
    "42601": (_T, "syntax error, a bug in code"),
}

# The first two characters of a SQLSTATE name its class; consulted after exact codes.
_BY_SQLSTATE_CLASS: dict[str, tuple[Classification, str]] = {
    "08": (_R, "connection exception"),
    "22": (_T, "data exception"),
    "23": (_T, "integrity constraint violation"),
    # Class 42 fails the same way on every attempt, so every code of it is terminal: a
    # retry only delays the quarantine that shows it to a person, and a requeue after the
    # fix runs the partition again. An undefined table or column (42P01, 42703) or a
    # missing privilege (42501) is a deploy step not taken: the recorded error names the
    # step (`_DEPLOY_STEPS`). A syntax error (42601), an undefined function (42883) or a
    # type mismatch (42804) is a bug in the code or a drift between the code and the
    # table: terminal too, but no deploy step fixes it, so the database's own words stay.
    "42": (_T, "syntax error or access rule violation"),
}

# SQLite has no SQLSTATE; these of its messages say what a class-42 code says.
_SQLITE_AS_SQLSTATE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^no such table: "), "42P01"),
    (re.compile(r"^no such column: |^table \S+ has no column named "), "42703"),
    (re.compile(r"^attempt to write a readonly database"), "42501"),
    (re.compile(r"syntax error|^incomplete input"), "42601"),
)

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
# How users create their tables today (README, "Your backfills' tables are yours").
_CREATE_TABLE = (
    "create it at deploy time, with your own migrations or "
    "jobs_platform.store.schema.create_user_tables(engine, table) "
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
    """Whose table: the framework's (`jp_*`, migrated), a stage (temporary) or a backfill's."""
    name = (table or "").rpartition(".")[2]
    if name.startswith("jp_stage_"):
        return "stage"
    return "framework" if name.startswith("jp_") else "backfill"


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

# A programming error fails the same way on every attempt: a retry only delays the
# quarantine that shows it to a person, and a requeue after the fix runs the partition
# again. A missing key or index (KeyError, IndexError) is not one of them: it is often the
# shape of a transient answer (an API's error payload lacks the expected key), so it stays
# `unknown`, retried within the budget; a reader that knows better raises TerminalError.
_PROGRAMMING_ERRORS: tuple[type[BaseException], ...] = (
    TypeError,
    NameError,  # UnboundLocalError too
    AttributeError,
    ImportError,  # ModuleNotFoundError too
    SyntaxError,  # compile() or the import of a broken module
    NotImplementedError,
)
_FRAMEWORK = __name__.partition(".")[0]
# Libraries that both the framework and the user's code call. A frame in one of them, or
# in the standard library, says nothing about whose mistake it was: the frame that called
# it decides. So `sa.text(5)` in a reader is the reader's error, and the writer handing
# SQLAlchemy or pandas what it cannot take is the framework's (a bug of ours or of a
# driver: `unknown`, retried within the budget). Any other library counts as the user's.
_SHARED_LIBRARIES = frozenset(
    {"alembic", "dagster", "fsspec", "httpcore", "httpx", "numpy", "pandas", "psycopg",
     "psycopg2", "pyarrow", "pydantic", "sqlalchemy"}
)  # fmt: skip


def _innermost_author(traceback: TracebackType | None) -> tuple[FrameType, int] | None:
    """The innermost frame of the traceback that is the framework's or the user's code."""
    frames = []
    while traceback is not None:
        frames.append((traceback.tb_frame, traceback.tb_lineno))
        traceback = traceback.tb_next
    for frame, line in reversed(frames):
        package = str(frame.f_globals.get("__name__") or "").partition(".")[0]
        shared = package in _SHARED_LIBRARIES or package.startswith("dagster_")
        if not (shared or package in sys.stdlib_module_names):
            return frame, line
    return None


def _by_programming_error(exc: BaseException) -> Verdict | None:
    """A programming error raised by the user's code: terminal, naming where it was raised.

    Decided by the traceback, so an exception never raised (no traceback) or raised by
    the framework's own code is not the user's.
    """
    if not isinstance(exc, _PROGRAMMING_ERRORS):
        return None
    author = _innermost_author(exc.__traceback__)
    if author is None:
        return None
    frame, line = author
    if str(frame.f_globals.get("__name__") or "").partition(".")[0] == _FRAMEWORK:
        return None
    code = frame.f_code
    function = code.co_qualname if code.co_qualname.startswith("<") else f"{code.co_qualname}()"
    where = f"{type(exc).__name__} in {function} at {code.co_filename}:{line}"
    return Verdict(
        _T, None, f"programming error in user code ({type(exc).__name__})", raised_in=where
    )


_BY_HTTP_STATUS: dict[int, Classification] = {
    408: _R,
    429: _R,
    # A bare 500 is usually a server hiccup or a deploy in progress; UNKNOWN would retry it
    # anyway, and RETRYABLE says so plainly while the attempt ceiling still bounds it.
    500: _R,
    502: _R,
    503: _R,
    504: _R,
}
_HTTP_HONOURS_RETRY_AFTER = frozenset({429, 503})

# Long enough for any realistic wrapping, short enough to stop a pathological chain.
_MAX_CAUSE_DEPTH = 8


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delay-seconds or HTTP-date), None if unusable."""
    if value is None or not value.strip():
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # "-0000" means UTC with no claim about local time (RFC 5322)
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if not math.isfinite(seconds):
        return None
    # A date in the past or a negative delay means "now", not "never".
    return max(0.0, seconds)


def _database_error(exc: BaseException) -> BaseException:
    """The driver's own error, looking through SQLAlchemy's wrapper."""
    if isinstance(exc, sqlalchemy.exc.DBAPIError) and exc.orig is not None:
        return exc.orig
    return exc


def _sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of a driver's error, or the one a SQLite message is equivalent to."""
    # psycopg 3 spells it `sqlstate` (and `diag.sqlstate`); psycopg2 spells it `pgcode`.
    for code in (
        getattr(error, "sqlstate", None),
        getattr(getattr(error, "diag", None), "sqlstate", None),
        getattr(error, "pgcode", None),
    ):
        if isinstance(code, str) and len(code) == 5:
            return code
    if isinstance(error, sqlite3.Error):
        message = str(error)
        return next(
            (code for pattern, code in _SQLITE_AS_SQLSTATE if pattern.search(message)), None
        )
    return None


def _database_message(error: BaseException) -> str:
    """The database's one-line message, without the statement SQLAlchemy appends."""
    primary = getattr(getattr(error, "diag", None), "message_primary", None)
    return primary if isinstance(primary, str) and primary else str(error).partition("\n")[0]


def _by_sqlstate(exc: BaseException) -> Verdict | None:
    error = _database_error(exc)
    code = _sqlstate(error)
    if code is None:
        return None
    known = _BY_SQLSTATE.get(code) or _BY_SQLSTATE_CLASS.get(code[:2])
    if known is None:
        return None
    source = "SQLite error like SQLSTATE" if isinstance(error, sqlite3.Error) else "SQLSTATE"
    return Verdict(known[0], None, f"{source} {code} {known[1]}", _remedy(code, error))


def _remedy(code: str, error: BaseException) -> str | None:
    deploy_step = _DEPLOY_STEPS.get(code)
    if deploy_step is None:
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
    return f"{deploy_step(names)} [{type(error).__name__}: {message}]"


def _by_http_status(exc: BaseException) -> Verdict | None:
    # Duck-typed so requests.HTTPError works without importing requests; a foreign
    # `.response` property may raise anything, and classify must never raise.
    try:
        response = getattr(exc, "response", None)
        status = getattr(response, "status_code", None)
        headers = getattr(response, "headers", None)
        if not isinstance(status, int) or headers is None or status < 300:
            return None
        retry_after_header = headers.get("Retry-After")
    except Exception:
        return None
    default = _T if 400 <= status < 500 else Classification.UNKNOWN
    classification = _BY_HTTP_STATUS.get(status, default)
    retry_after = (
        parse_retry_after(retry_after_header) if status in _HTTP_HONOURS_RETRY_AFTER else None
    )
    return Verdict(classification, retry_after, f"HTTP {status}")


def _by_type(exc: BaseException) -> Verdict | None:
    for exc_type, classification, label in _types_to_match():
        if isinstance(exc, exc_type):
            retry_after = exc.retry_after if isinstance(exc, RetryableError) else None
            retry_after = float(retry_after) if retry_after is not None else None
            return Verdict(classification, retry_after, f"{label} ({type(exc).__name__})")
    return None


def _classify_one(exc: BaseException) -> Verdict | None:
    # Our own errors are an explicit decision by job code, so they outrank what they wrap.
    if isinstance(exc, JobsPlatformError):
        return _by_type(exc)
    return _by_sqlstate(exc) or _by_http_status(exc) or _by_type(exc) or _by_programming_error(exc)


def classify(exc: BaseException) -> Verdict:
    """Decide how an attempt that raised `exc` ended (docs/ARCHITECTURE.md, "Error taxonomy")."""
    current: BaseException | None = exc
    seen: set[int] = set()
    while current is not None and id(current) not in seen and len(seen) < _MAX_CAUSE_DEPTH:
        verdict = _classify_one(current)
        if verdict is not None:
            if current is not exc:
                verdict = replace(
                    verdict, reason=f"{verdict.reason}, the cause of {type(exc).__name__}"
                )
            return verdict
        seen.add(id(current))
        # Only an explicit `raise ... from cause`: an implicit __context__ may be unrelated.
        current = current.__cause__
    return Verdict(Classification.UNKNOWN, None, f"unclassified {type(exc).__name__}")


def as_recorded(exc: BaseException, verdict: Verdict) -> BaseException:
    """The error to record for `exc`: a `DeploymentError` naming the fix when there is one,
    a programming error of the user's code naming the function, file and line it came from.

    The original stays its cause, so the recorded traceback still shows it.
    """
    if verdict.raised_in is not None and not isinstance(exc, JobsPlatformError):
        recorded = _of_the_same_type(exc, f"{verdict.raised_in}: {exc}")
    elif verdict.remedy is not None and not isinstance(exc, DeploymentError):
        recorded = DeploymentError(verdict.remedy)
    else:
        return exc
    recorded.__cause__ = exc
    return recorded


def _of_the_same_type(exc: BaseException, message: str) -> BaseException:
    """An error of `exc`'s type (or the nearest base that takes a message) saying `message`.

    The recorded type stays the one raised (`error_type` in the history).
    """
    for error_type in type(exc).__mro__:
        try:
            return error_type(message)
        except Exception:
            continue  # a constructor that wants more than a message
    return Exception(message)
