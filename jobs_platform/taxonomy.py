"""The taxonomy's tables: the classes an attempt may end in, and which failures fall in each.

Data, read by `errors.classify` (the entry point, with the rules that are not a lookup:
the cause chain, our own errors, whose code raised a programming error). What each class
leads to: docs/ARCHITECTURE.md, "Error taxonomy". No database is imported here: a
driver's or SQLAlchemy's exception types are named by module and looked up in
`sys.modules`, and a SQLSTATE is read from the attributes the drivers spell it in.
"""

from __future__ import annotations

import enum
import json
import re
import sys

__all__ = [
    "BY_HTTP_STATUS",
    "BY_SQLSTATE",
    "BY_SQLSTATE_CLASS",
    "HTTP_HONOURS_RETRY_AFTER",
    "PROGRAMMING_ERRORS",
    "SHARED_LIBRARIES",
    "Classification",
    "driver_error",
    "foreign_types",
    "sqlstate_of",
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


_R, _T = Classification.RETRYABLE, Classification.TERMINAL

# Exceptions not the platform's own, by type. First isinstance match wins. Exceptions
# carrying a SQLSTATE or an HTTP status are looked up in the tables below first; these
# are the fallbacks by type.
_BY_TYPE: tuple[tuple[type[BaseException], Classification, str], ...] = (
    # Ctrl-C is an operator stopping the worker, not a fault in the input.
    (KeyboardInterrupt, Classification.INTERRUPTED, "interrupted by shutdown"),
    (TimeoutError, _R, "timeout"),  # socket.timeout is an alias of it since Python 3.10
    (ConnectionError, _R, "connection error"),
    (json.JSONDecodeError, _T, "malformed JSON"),
    (UnicodeDecodeError, _T, "undecodable text"),
    (FileNotFoundError, _T, "missing input file"),
)

# Exceptions of libraries and drivers, by module and class name. An exception of a
# library cannot exist before the library was imported, so they are looked up in
# `sys.modules` when classifying: importing the taxonomy (every CLI command does) then
# costs no database driver, nor httpx nor pydantic. None subclasses a type above.
_BY_LIBRARY_TYPE: tuple[tuple[str, str, Classification, str], ...] = (
    # Without a known SQLSTATE (connection refused, SQLite's "database is locked") an
    # operational error is about the database's state, not the data: worth another try.
    ("sqlalchemy.exc", "OperationalError", _R, "database operational error"),
    ("sqlite3", "OperationalError", _R, "database operational error"),
    ("sqlalchemy.exc", "TimeoutError", _R, "database connection pool timeout"),
    ("sqlalchemy.exc", "IntegrityError", _T, "integrity constraint violation"),
    ("sqlalchemy.exc", "DataError", _T, "data error"),
    ("sqlite3", "IntegrityError", _T, "integrity constraint violation"),
    ("httpx", "TimeoutException", _R, "HTTP timeout"),
    ("httpx", "NetworkError", _R, "HTTP network error"),  # includes httpx.ConnectError
    ("httpx", "RemoteProtocolError", _R, "server dropped the connection"),
    ("pydantic", "ValidationError", _T, "payload validation failed"),
    ("psycopg", "OperationalError", _R, "database operational error"),
    ("psycopg", "IntegrityError", _T, "integrity constraint violation"),
    ("psycopg", "DataError", _T, "data error"),
)


def foreign_types() -> list[tuple[type[BaseException], Classification, str]]:
    """The types above, those of libraries not loaded left out, in the order they match."""
    loaded = [
        (getattr(sys.modules[module], name), classification, label)
        for module, name, classification, label in _BY_LIBRARY_TYPE
        if module in sys.modules
    ]
    return [*_BY_TYPE, *loaded]


BY_SQLSTATE: dict[str, tuple[Classification, str]] = {
    "40001": (_R, "serialization failure"),
    "40P01": (_R, "deadlock detected"),
    "55P03": (_R, "lock not available"),
    "53300": (_R, "too many connections"),
    "57014": (_R, "query canceled (statement timeout)"),
    "57P01": (_R, "admin shutdown"),
    "57P02": (_R, "crash shutdown"),
    "57P03": (_R, "cannot connect now"),
    # Deployment errors (see class 42 below); the recorded error names the deploy step.
    "42P01": (_T, "undefined table"),
    "42703": (_T, "undefined column"),
    "42501": (_T, "insufficient privilege"),
    "42601": (_T, "syntax error, a bug in code"),
}

# The first two characters of a SQLSTATE name its class; consulted after exact codes.
BY_SQLSTATE_CLASS: dict[str, tuple[Classification, str]] = {
    "08": (_R, "connection exception"),
    "22": (_T, "data exception"),
    "23": (_T, "integrity constraint violation"),
    # Class 42 fails the same way on every attempt, so every code of it is terminal: a
    # retry only delays the quarantine that shows it to a person, and a requeue after the
    # fix runs the partition again. An undefined table or column (42P01, 42703) or a
    # missing privilege (42501) is a deploy step not taken: the recorded error names the
    # step (`store.database_errors`). A syntax error (42601), an undefined function
    # (42883) or a type mismatch (42804) is a bug in the code or a drift between the code
    # and the table: terminal too, but no deploy step fixes it, so the database's own
    # words stay.
    "42": (_T, "syntax error or access rule violation"),
}

# SQLite has no SQLSTATE; these of its messages say what a class-42 code says.
_SQLITE_AS_SQLSTATE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^no such table: "), "42P01"),
    (re.compile(r"^no such column: |^table \S+ has no column named "), "42703"),
    (re.compile(r"^attempt to write a readonly database"), "42501"),
    (re.compile(r"syntax error|^incomplete input"), "42601"),
)


def driver_error(exc: BaseException) -> BaseException:
    """The driver's own error, looking through SQLAlchemy's wrapper."""
    wrappers = sys.modules.get("sqlalchemy.exc")
    if wrappers is not None and isinstance(exc, wrappers.DBAPIError) and exc.orig is not None:
        return exc.orig
    return exc


def sqlstate_of(error: BaseException) -> str | None:
    """The SQLSTATE of a driver's error, or the one a SQLite message is equivalent to."""
    # psycopg 3 spells it `sqlstate` (and `diag.sqlstate`); psycopg2 spells it `pgcode`.
    for code in (
        getattr(error, "sqlstate", None),
        getattr(getattr(error, "diag", None), "sqlstate", None),
        getattr(error, "pgcode", None),
    ):
        if isinstance(code, str) and len(code) == 5:
            return code
    sqlite = sys.modules.get("sqlite3")
    if sqlite is not None and isinstance(error, sqlite.Error):
        message = str(error)
        return next(
            (code for pattern, code in _SQLITE_AS_SQLSTATE if pattern.search(message)), None
        )
    return None


# A programming error fails the same way on every attempt: a retry only delays the
# quarantine that shows it to a person, and a requeue after the fix runs the partition
# again. A missing key or index (KeyError, IndexError) is not one of them: it is often the
# shape of a transient answer (an API's error payload lacks the expected key), so it stays
# `unknown`, retried within the budget; a reader that knows better raises TerminalError.
PROGRAMMING_ERRORS: tuple[type[BaseException], ...] = (
    TypeError,
    NameError,  # UnboundLocalError too
    AttributeError,
    ImportError,  # ModuleNotFoundError too
    SyntaxError,  # compile() or the import of a broken module
    NotImplementedError,
)
# Libraries that both the framework and the user's code call. A frame in one of them, or
# in the standard library, says nothing about whose mistake it was: the frame that called
# it decides. So `sa.text(5)` in a reader is the reader's error, and the writer handing
# SQLAlchemy or pandas what it cannot take is the framework's (a bug of ours or of a
# driver: `unknown`, retried within the budget). Any other library counts as the user's.
SHARED_LIBRARIES = frozenset(
    {"alembic", "dagster", "fsspec", "httpcore", "httpx", "numpy", "pandas", "psycopg",
     "psycopg2", "pyarrow", "pydantic", "sqlalchemy"}
)  # fmt: skip

BY_HTTP_STATUS: dict[int, Classification] = {
    408: _R,
    429: _R,
    # A bare 500 is usually a server hiccup or a deploy in progress; UNKNOWN would retry it
    # anyway, and RETRYABLE says so plainly while the attempt ceiling still bounds it.
    500: _R,
    502: _R,
    503: _R,
    504: _R,
}
HTTP_HONOURS_RETRY_AFTER = frozenset({429, 503})
