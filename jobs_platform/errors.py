"""The errors the platform raises, and `classify`: how a failed attempt is classified.

The exception hierarchy (what job code raises to decide for itself), the verdict, and the
rules of classification that are not a lookup: the cause chain, our own errors first,
whose code raised a programming error. The tables it looks things up in are
`jobs_platform.taxonomy`; what each class leads to is docs/ARCHITECTURE.md, "Error
taxonomy". No Dagster and no database: what a database's error says beyond its SQLSTATE
(the deploy step it calls for, the value it refused) is read in `store.database_errors`.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import FrameType, TracebackType

from jobs_platform.taxonomy import (
    BY_HTTP_STATUS,
    BY_SQLSTATE,
    BY_SQLSTATE_CLASS,
    HTTP_HONOURS_RETRY_AFTER,
    PROGRAMMING_ERRORS,
    SHARED_LIBRARIES,
    Classification,
    driver_error,
    foreign_types,
    sqlstate_of,
)

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


@dataclass(frozen=True)
class Verdict:
    """The outcome `classify` assigns to one exception."""

    classification: Classification
    retry_after: float | None
    reason: str
    sqlstate: str | None = None
    """The SQLSTATE the verdict went by (a SQLite message's equivalent for SQLite): what
    `store.database_errors` reads a deployment error's deploy step by."""
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
    the deploy step that fixes it is known (`store.database_errors`): no retry can succeed
    before someone takes that step, and then a requeue runs the partition again.
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

# What each of the platform's own errors means. First isinstance match wins, so
# subclasses precede their bases (AttemptTimedOut before RetryableError). Other
# exceptions: `taxonomy.foreign_types`.
_OWN_ERRORS: tuple[tuple[type[JobsPlatformError], Classification, str], ...] = (
    (AttemptTimedOut, _R, "attempt deadline passed"),
    (DeploymentError, _T, "deployment error"),
    (RetryableError, _R, "retryable error raised by the job"),
    (TerminalError, _T, "terminal error raised by the job"),
    (LeaseLostError, Classification.LEASE_LOST, "partition lease lost"),
    (AttemptInterrupted, Classification.INTERRUPTED, "interrupted by shutdown"),
)
_FRAMEWORK = __name__.partition(".")[0]


def _innermost_author(traceback: TracebackType | None) -> tuple[FrameType, int] | None:
    """The innermost frame of the traceback that is the framework's or the user's code."""
    frames = []
    while traceback is not None:
        frames.append((traceback.tb_frame, traceback.tb_lineno))
        traceback = traceback.tb_next
    for frame, line in reversed(frames):
        package = str(frame.f_globals.get("__name__") or "").partition(".")[0]
        shared = package in SHARED_LIBRARIES or package.startswith("dagster_")
        if not (shared or package in sys.stdlib_module_names):
            return frame, line
    return None


def _by_programming_error(exc: BaseException) -> Verdict | None:
    """A programming error raised by the user's code: terminal, naming where it was raised.

    Decided by the traceback, so an exception never raised (no traceback) or raised by
    the framework's own code is not the user's.
    """
    if not isinstance(exc, PROGRAMMING_ERRORS):
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


def _by_sqlstate(exc: BaseException) -> Verdict | None:
    error = driver_error(exc)
    code = sqlstate_of(error)
    if code is None:
        return None
    known = BY_SQLSTATE.get(code) or BY_SQLSTATE_CLASS.get(code[:2])
    if known is None:
        return None
    source = "SQLite error like SQLSTATE" if type(error).__module__ == "sqlite3" else "SQLSTATE"
    return Verdict(known[0], None, f"{source} {code} {known[1]}", sqlstate=code)


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
    classification = BY_HTTP_STATUS.get(status, default)
    retry_after = (
        parse_retry_after(retry_after_header) if status in HTTP_HONOURS_RETRY_AFTER else None
    )
    return Verdict(classification, retry_after, f"HTTP {status}")


def _by_type(exc: BaseException) -> Verdict | None:
    for exc_type, classification, label in [*_OWN_ERRORS, *foreign_types()]:
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
    """The error to record for `exc`: a programming error of the user's code naming the
    function, file and line it came from (a database error a deploy step fixes is named by
    `store.database_errors.recorded_error`, which calls this).

    The original stays its cause, so the recorded traceback still shows it.
    """
    if verdict.raised_in is None or isinstance(exc, JobsPlatformError):
        return exc
    recorded = _of_the_same_type(exc, f"{verdict.raised_in}: {exc}")
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
