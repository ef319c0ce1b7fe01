"""A failure's signature: one short stable hash per cause, whatever partition it hit.

A dead letter of thousands of entries is read by cause. Two entries share a cause when
their error class and type agree and their messages agree once the parts that vary from
partition to partition are replaced by placeholders: the partition key and asset name,
timestamps and dates, quoted values, ids, paths, URLs, line numbers and other numbers.
What stays is the wording the code that raised the error chose: its cause.
"""

from __future__ import annotations

import hashlib
import re

SIGNATURE_LENGTH = 12
# Only the head of a message names its cause; tracebacks and statements follow it.
_NORMALISED_PREFIX = 600

# What follows the database's own words in a driver's error. SQLAlchemy appends the
# statement, its parameters and a documentation link: the statement is the code's, not the
# cause, and varies with the chunk (one VALUES tuple per row of a multi-row insert), so
# everything from it on is dropped. PostgreSQL's DETAIL line repeats the refused row or key
# (`Failing row contains (3, null, bad)`, `Key (id)=(7) already exists`): the primary
# message already names the constraint, the row's values vary.
_APPENDICES = (
    re.compile(r"\n?\[SQL: .*", re.S),
    re.compile(r"\(Background on this error at: [^)]*\)"),
    re.compile(r"^DETAIL: .*$", re.M),
)

# Order matters: a timestamp before the numbers inside it, a URL before its path.
_VARIABLE_PARTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\[parameters: .*?\](?=\s|$)", re.S), ""),
    (re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.I), "<url>"),
    (
        re.compile(
            r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?"
            r"(?:Z|[+-]\d{2}:?\d{2})?(?:-\d{2}:\d{2})?"
        ),
        "<time>",
    ),
    (re.compile(r"\b\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?\b"), "<time>"),
    (
        re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
        "<id>",
    ),
    (re.compile(r"(?<![\w<])(?:[A-Za-z]:)?(?:[\\/][\w.@%+=~-]+){2,}"), "<path>"),
    (re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.I), "<id>"),
    (re.compile(r"[-+]?\b\d+(?:\.\d+)?(?:e[-+]?\d+)?\b", re.I), "<n>"),
    (re.compile(r"\s+"), " "),
)


# A quoted name after one of these words names where the failure is (a field, a column, a
# constraint): a different name is a different cause. Any other quoted text is a value.
_NAMING_WORDS = r"(?:field|column|table|relation|constraint|index|key|type|schema|function)"
_QUOTED = re.compile(
    rf"(?P<named>\b{_NAMING_WORDS}\s+)?(?P<quote>['\"])"
    r"(?P<text>(?:(?!(?P=quote))[^\\\n]|\\.){0,200})(?P=quote)",
    re.I,
)
# "…, got VALUE" (Python's wording for a refused value, the orders reader's too) ends its
# line with the value as its repr, cut short: `'JPY'`, `None`, `[1, 2]`, `-500`, `'aaa...`.
# Whatever it is, the refusal is one cause; a trailing parenthesis (`(… in UTC)`) stays.
# "got an unexpected keyword argument 'x'" is not a value.
_GOT_VALUE = re.compile(r"\bgot (?!an? |multiple )\S.*?(?= \([^()\n]*\)$|$)", re.M)
_IDENTIFIER = re.compile(r"[A-Za-z_][\w.$]{0,62}")
# An HTTP status is the cause (400 is not 404), not a varying number: after `HTTP` or
# `status`, as requests words it (`404 Client Error: Not Found for url: …`) and as httpx
# quotes it (`Client error '404 Not Found' for url '…'`).
_HTTP_STATUS = re.compile(r"\b(HTTP|status(?: code)?)\s*:?\s*([1-5]\d\d)\b", re.I)
_HTTP_STATUS_ERROR = re.compile(r"\b([1-5]\d\d)( (?:Client|Server) Error\b)")
_HTTP_STATUS_LINE = re.compile(r"(['\"])([1-5]\d\d)( [A-Z][A-Za-z -]*)\1")


def _quoted(match: re.Match[str]) -> str:
    if match["named"] and _IDENTIFIER.fullmatch(match["text"]):
        return match.group(0)
    return f"{match['named'] or ''}<value>"


def normalised_message(message: str | None, *, asset: str = "", partition: str = "") -> str:
    """`message` with the parts that vary per partition replaced by placeholders."""
    text = message or ""
    for appendix in _APPENDICES:
        text = appendix.sub("", text)
    text = text[:_NORMALISED_PREFIX]
    if _QUOTED.fullmatch(text.strip()) and _IDENTIFIER.fullmatch(text.strip()[1:-1]):
        # A message that is only a quoted name names the cause: a KeyError's missing key.
        return text.strip()
    # The entry's own names first: a multi-partition key (`2024-03-03|apac`) or an asset
    # key with a prefix (`acme/events`) is not caught whole by the general patterns. Whole
    # words only: a static key `us` is no part of `status`. An asset's name inside a path
    # (`/readers/orders.py`) or quoted (`table "orders"`) names a file or a table, the same
    # whichever asset failed on it, so it stays.
    if partition:
        text = re.sub(rf"(?<!\w){re.escape(partition)}(?!\w)", "<partition>", text)
    if asset:
        text = re.sub(rf"(?<![\w/\\.'\"-]){re.escape(asset)}(?![\w'\"-]|\.\w)", "<asset>", text)
    text = _HTTP_STATUS.sub(lambda m: f"{m[1]} <status{m[2]}>", text)
    text = _HTTP_STATUS_ERROR.sub(lambda m: f"<status{m[1]}>{m[2]}", text)
    text = _HTTP_STATUS_LINE.sub(lambda m: f"<status{m[2]}{m[3]}>", text)
    text = _GOT_VALUE.sub("got <value>", text)
    text = _QUOTED.sub(_quoted, text)
    for pattern, placeholder in _VARIABLE_PARTS:
        text = pattern.sub(placeholder, text)
    return text.strip()


def failure_signature(
    error_class: str,
    error_type: str | None,
    message: str | None,
    *,
    asset: str = "",
    partition: str = "",
) -> str:
    """A short hash of the failure's class, type and normalised message: one per cause."""
    text = normalised_message(message, asset=asset, partition=partition)
    digest = hashlib.sha256(f"{error_class}\x1f{error_type or ''}\x1f{text}".encode())
    return digest.hexdigest()[:SIGNATURE_LENGTH]
