"""The orders example's landing input: one day's JSON-lines file, validated in chunks.

Plain Python, no Dagster: the ``orders`` asset calls these functions and commits each chunk.
Every problem with the file's content raises ``InputValidationError``, which is terminal: the
same bytes fail the same way on every attempt, so a retry could only loop.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from typing import IO, Any

import fsspec
import numpy as np
import pandas as pd

from jobs_platform import InputValidationError, TerminalError

__all__ = [
    "CURRENCIES",
    "KNOWN_SCHEMA_VERSIONS",
    "ORDER_COLUMNS",
    "STATUSES",
    "input_fingerprint",
    "landing_file",
    "read_order_chunks",
]

# What a reader calls to reject a row: `PartitionInput.reject(row_number, reason, values)`.
RowRejecter = Callable[[int, str, Mapping[str, object]], None]

ORDER_COLUMNS = ("order_id", "customer_id", "amount_cents", "currency", "status", "ordered_at")
KNOWN_SCHEMA_VERSIONS = frozenset({1})
CURRENCIES = frozenset({"USD", "EUR", "GBP"})
STATUSES = frozenset({"paid", "refunded", "pending"})

# Integer fields and their smallest allowed value. The upper bound is int64's, the type of
# the columns they land in; a larger JSON integer would otherwise overflow in numpy.
_INTEGER_MINIMUMS = (("order_id", 1), ("customer_id", 1), ("amount_cents", 0))
_INT64_MAX = 2**63 - 1
_ENUM_FIELDS = (("currency", CURRENCIES), ("status", STATUSES))
# One valid line: ORDER_COLUMNS in order, `ordered_at` in UTC microseconds.
_Row = tuple[int, int, int, str, str, int]
# Rows as columns, in the same order.
_Columns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]

_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_FINGERPRINT_BLOCK_BYTES = 1 << 20
_SHOWN_VALUE_CHARS = 60
_MISSING = object()
# Editors and Windows tools may begin a "UTF-8" file with U+FEFF; JSON lines may not start
# with it. Checked only when a line fails to parse, so valid files pay nothing for it.
_BYTE_ORDER_MARK = "\ufeff"
_BYTE_ORDER_MARK_PROBLEM = (
    "starts with a UTF-8 byte-order mark (BOM, bytes EF BB BF), which JSON lines may not "
    "contain: save the file as UTF-8 without a BOM (Python: encoding='utf-8', not "
    "'utf-8-sig'), or strip it with sed -i 's/^\\xEF\\xBB\\xBF//' FILE"
)
# Decoding the bytes ourselves and calling the decoder directly is about 40% faster than
# json.loads(bytes), which sniffs the encoding of every line.
_decode_json = json.JSONDecoder().decode

# A valid order's line as `json.dumps` writes it, with or without its spaces, keys in
# ORDER_COLUMNS order: what the batch check accepts (`_validated_columns`). Integers take
# JSON's form (no leading zero) and at most 18 digits (int64 holds them); the words are
# the allowed ones, unescaped; the timestamp is left to `datetime.fromisoformat`. Bytes,
# so non-ASCII (and invalid UTF-8) never match.
_SEP, _COLON = rb", ?", rb": ?"
_PLAIN_LINE = re.compile(
    rb'^\{"schema_version"' + _COLON + rb"1" + _SEP
    + rb'"order_id"' + _COLON + rb"([1-9]\d{0,17})" + _SEP
    + rb'"customer_id"' + _COLON + rb"([1-9]\d{0,17})" + _SEP
    + rb'"amount_cents"' + _COLON + rb"(0|[1-9]\d{0,17})" + _SEP
    + rb'"currency"' + _COLON + rb'"(USD|EUR|GBP)"' + _SEP
    + rb'"status"' + _COLON + rb'"(paid|refunded|pending)"' + _SEP
    + rb'"ordered_at"' + _COLON
    + rb'"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?(?:Z|[+-]\d\d:\d\d)?)"'
    + rb"\}\r?$",
    re.MULTILINE,
)  # fmt: skip
_JSON_TYPE_NAMES = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def landing_file(landing_root: str, day: str) -> str:
    """The landing file of ``day`` (YYYY-MM-DD) under a local folder or an fsspec URL."""
    _parse_day(day)  # a malformed day must not become a path such as "../x"
    if _is_url(landing_root):
        return f"{landing_root.rstrip('/')}/orders/{day}.jsonl"
    return os.path.join(landing_root, "orders", f"{day}.jsonl")


def input_fingerprint(path: str) -> str:
    """The sha256 hex digest of the file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with _open_input(path) as stream:
        while block := stream.read(_FINGERPRINT_BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def read_order_chunks(
    path: str, day: str, chunk_rows: int, *, reject: RowRejecter | None = None
) -> Iterator[pd.DataFrame]:
    """Validated orders of ``day``'s file as DataFrames of ``chunk_rows`` rows (the last shorter).

    The file is streamed a chunk's lines at a time, checked together (one regex pass and
    numpy); a batch with an invalid line is checked again line by line, for its message.
    Blank lines produce no row but still count for the 1-based line numbers in errors.
    An empty file yields no chunk: a day without orders, which leaves the partition with
    no rows (the runner sweeps any an earlier input left).
    Arguments are checked at the call; the file is opened and validated as the chunks are
    consumed, so a bad line surfaces after the chunks before it. With `reject` (a backfill
    under `bad_rows=RejectRows(...)` passes `source.reject`), an invalid line is rejected
    instead: `reject(row_number, problem, {"line": text})`, its row number counting the
    non-blank lines, and the file read on.
    """
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    day_start = datetime.combine(_parse_day(day), datetime.min.time(), tzinfo=UTC)
    first_us = (day_start - _UNIX_EPOCH) // _MICROSECOND
    end_us = first_us + (timedelta(days=1) // _MICROSECOND)
    return _read_chunks(path, day, first_us, end_us, chunk_rows, reject)


def _read_chunks(
    path: str,
    day: str,
    first_us: int,
    end_us: int,
    chunk_rows: int,
    reject: RowRejecter | None,
) -> Iterator[pd.DataFrame]:
    held: list[_Columns] = []  # valid rows read for the next chunk, in parts
    held_rows = 0
    line_number = 0  # lines so far, blank ones included: errors name the file's line
    row_number = 0  # non-blank lines so far: the input's rows, as the framework numbers them
    with _open_input(path) as stream:
        while True:
            # Exactly the lines that can fill the chunk: a line rejected after them would
            # belong to the next chunk, as when the file was read line by line.
            wanted = chunk_rows - held_rows
            lines, filled = _next_lines(stream, wanted)
            columns = _validated_columns(filled, first_us, end_us) if filled else None
            if columns is None:  # a line is invalid (or none is there): line by line
                rows = _rows_line_by_line(
                    lines, line_number, row_number, day, first_us, end_us, reject
                )
                columns = _columns(rows) if rows else None
            line_number += len(lines)
            row_number += len(filled)
            if columns is not None:
                held.append(columns)
                held_rows += len(columns[0])
            if held and (held_rows == chunk_rows or len(filled) < wanted):
                yield _frame(held)
                held, held_rows = [], 0
            if len(filled) < wanted:
                return


def _next_lines(stream: IO[bytes], wanted: int) -> tuple[list[bytes], list[bytes]]:
    """The next lines up to the `wanted`-th non-blank one (fewer at the end of the file):
    all of them, and the non-blank ones."""
    lines: list[bytes] = []
    filled: list[bytes] = []
    while len(filled) < wanted:
        # Never past the wanted-th non-blank line: at most as many lines as are missing.
        more = list(itertools.islice(stream, wanted - len(filled)))
        if not more:
            break
        lines += more
        filled += itertools.filterfalse(bytes.isspace, more)
    return lines, filled


def _rows_line_by_line(
    lines: list[bytes],
    line_number: int,
    row_number: int,
    day: str,
    first_us: int,
    end_us: int,
    reject: RowRejecter | None,
) -> list[_Row]:
    """The valid lines' rows, each line checked on its own: an invalid one is rejected
    (`reject`) or raised, with a message naming its line and field."""
    rows: list[_Row] = []
    for number, raw in enumerate(lines, start=line_number + 1):
        if raw.isspace():
            continue
        row_number += 1
        try:
            rows.append(_parse_line(raw, number, day, first_us, end_us))
        except InputValidationError as invalid:
            if reject is None:
                raise
            line = {"line": raw.decode("utf-8", errors="replace").rstrip("\r\n")}
            reject(row_number, str(invalid), line)
    return rows


def _validated_columns(lines: list[bytes], first_us: int, end_us: int) -> _Columns | None:
    """The rows of `lines` (non-blank) as columns when every line is valid, else None.

    Each line must match `_PLAIN_LINE`, a line as a JSON writer spells a valid order: the
    pattern admits no line that `_parse_line` rejects, and its numbers and words are the
    values json reads. One regex pass and numpy replace the Python loop per line. A batch
    with any other line (invalid, or valid but spelled otherwise) is read line by line,
    which finds the line and words the problem, or accepts it.
    """
    found = _PLAIN_LINE.findall(b"".join(lines))
    # One match at most per line (the pattern spans no newline), so equal counts mean
    # every line matched.
    if len(found) != len(lines):
        return None
    order_ids, customer_ids, amounts, currencies, statuses, ordered_at = zip(*found, strict=True)
    ordered_at_us = _validated_moments(ordered_at, first_us, end_us)
    if ordered_at_us is None:
        return None
    return (
        # Up to 18 digits (the pattern): int64 holds them all.
        np.array(list(map(int, order_ids)), dtype=np.int64),
        np.array(list(map(int, customer_ids)), dtype=np.int64),
        np.array(list(map(int, amounts)), dtype=np.int64),
        np.array(list(map(bytes.decode, currencies)), dtype=object),
        np.array(list(map(bytes.decode, statuses)), dtype=object),
        ordered_at_us,
    )


def _validated_moments(values: tuple[bytes, ...], first_us: int, end_us: int) -> np.ndarray | None:
    """`ordered_at` values in UTC microseconds when all are timestamps of the day, else None."""
    try:
        moments = list(map(datetime.fromisoformat, map(bytes.decode, values)))
        # utc=True reads a naive moment as UTC, the landing contract, as `_parse_ordered_at`.
        instants = pd.to_datetime(moments, utc=True, cache=False).as_unit("ns")
        nanoseconds = np.asarray(instants.values).view(np.int64)  # UTC, as `asi8` gives
    except (ValueError, OverflowError):  # not a date, or out of pandas' range of years
        return None
    microseconds = nanoseconds // 1000  # exact: a datetime holds whole microseconds
    if microseconds.min() < first_us or microseconds.max() >= end_us:
        return None
    return microseconds


def _parse_line(raw: bytes, line_number: int, day: str, first_us: int, end_us: int) -> _Row:
    """One line as a row tuple in ORDER_COLUMNS order, ``ordered_at`` in UTC microseconds.

    Plain checks rather than a pydantic model: this runs once per line over files of millions
    of lines, and each failure needs a message naming the line and the field.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid(line_number, None, f"not valid UTF-8 ({exc.reason})") from None
    try:
        record = _decode_json(text)
    except json.JSONDecodeError as exc:
        if text.startswith(_BYTE_ORDER_MARK):
            raise _invalid(line_number, None, _BYTE_ORDER_MARK_PROBLEM) from None
        problem = f"not valid JSON ({exc.msg}, column {exc.colno})"
        raise _invalid(line_number, None, problem) from None
    except RecursionError:
        raise _invalid(line_number, None, "not valid JSON (nested too deeply)") from None
    if type(record) is not dict:
        kind = _JSON_TYPE_NAMES.get(type(record), type(record).__name__)
        raise _invalid(line_number, None, f"must be a JSON object, got {kind}")

    version = record.get("schema_version", _MISSING)
    if version is _MISSING:
        raise _invalid(line_number, "schema_version", "required field is missing")
    # type() first: True == 1, so a boolean would otherwise pass as version 1.
    if type(version) is not int or version not in KNOWN_SCHEMA_VERSIONS:
        raise _invalid(line_number, "schema_version", f"unknown schema_version {_shown(version)}")

    integers = []
    for field, minimum in _INTEGER_MINIMUMS:
        value = record.get(field, _MISSING)
        if value is _MISSING:
            raise _invalid(line_number, field, "required field is missing")
        if type(value) is not int:  # rejects bool, float and numeric strings alike
            raise _invalid(line_number, field, f"must be an integer, got {_shown(value)}")
        if value < minimum:
            raise _invalid(line_number, field, f"must be >= {minimum}, got {value}")
        if value > _INT64_MAX:
            raise _invalid(line_number, field, f"must be <= {_INT64_MAX}, got {value}")
        integers.append(value)

    labels = []
    for field, allowed in _ENUM_FIELDS:
        value = record.get(field, _MISSING)
        if value is _MISSING:
            raise _invalid(line_number, field, "required field is missing")
        # The str check comes first because a list or dict is unhashable in a set lookup.
        if type(value) is not str or value not in allowed:
            choices = ", ".join(repr(choice) for choice in sorted(allowed))
            raise _invalid(line_number, field, f"must be one of {choices}, got {_shown(value)}")
        labels.append(value)

    ordered_at_us = _parse_ordered_at(record, line_number, day, first_us, end_us)
    return (integers[0], integers[1], integers[2], labels[0], labels[1], ordered_at_us)


def _parse_ordered_at(
    record: dict[str, Any], line_number: int, day: str, first_us: int, end_us: int
) -> int:
    value = record.get("ordered_at", _MISSING)
    if value is _MISSING:
        raise _invalid(line_number, "ordered_at", "required field is missing")
    # fromisoformat would read a bare date as midnight; an order time needs a time of day.
    if type(value) is not str or len(value) <= len("YYYY-MM-DD"):
        raise _invalid(
            line_number, "ordered_at", f"must be an ISO-8601 timestamp, got {_shown(value)}"
        )
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise _invalid(
            line_number, "ordered_at", f"must be an ISO-8601 timestamp, got {_shown(value)}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # the landing contract: no offset means UTC
    moment_us = (moment - _UNIX_EPOCH) // _MICROSECOND
    if not first_us <= moment_us < end_us:
        raise _invalid(
            line_number,
            "ordered_at",
            f"must fall on {day} (UTC), got {_describe_moment(value, moment)}",
        )
    return moment_us


def _describe_moment(text: str, moment: datetime) -> str:
    """The timestamp as written, with its UTC time when it carries another offset."""
    if moment.utcoffset() == timedelta(0):
        return _shown(text)
    try:
        in_utc = moment.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00+01:00 has no UTC datetime
        return _shown(text)
    return f"{_shown(text)} ({in_utc.isoformat()} in UTC)"


def _columns(rows: list[_Row]) -> _Columns:
    order_ids, customer_ids, amounts, currencies, statuses, ordered_at_us = zip(*rows, strict=True)
    return (
        np.array(order_ids, dtype=np.int64),
        np.array(customer_ids, dtype=np.int64),
        np.array(amounts, dtype=np.int64),
        # object, not pandas' string dtype: the writer is tested against object columns.
        np.array(currencies, dtype=object),
        np.array(statuses, dtype=object),
        np.array(ordered_at_us, dtype=np.int64),
    )


def _frame(parts: list[_Columns]) -> pd.DataFrame:
    columns = parts[0] if len(parts) == 1 else tuple(map(np.concatenate, zip(*parts, strict=True)))
    order_ids, customer_ids, amounts, currencies, statuses, ordered_at_us = columns
    return pd.DataFrame(
        {
            "order_id": order_ids,
            "customer_id": customer_ids,
            "amount_cents": amounts,
            "currency": currencies,
            "status": statuses,
            "ordered_at": pd.to_datetime(ordered_at_us, unit="us", utc=True).as_unit("ns"),
        },
        columns=list(ORDER_COLUMNS),
    )


@contextmanager
def _open_input(path: str) -> Iterator[IO[bytes]]:
    try:
        stream = fsspec.open(path, "rb").open() if _is_url(path) else open(path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        raise TerminalError(f"no input: {path} does not exist") from None
    with stream:
        yield stream


def _invalid(line_number: int, field: str | None, problem: str) -> InputValidationError:
    # InputValidationError prefixes "line N, field 'F': " to the problem itself.
    return InputValidationError(problem, line=line_number, field=field)


def _shown(value: object) -> str:
    text = repr(value)
    if len(text) > _SHOWN_VALUE_CHARS:
        return text[: _SHOWN_VALUE_CHARS - 3] + "..."
    return text


def _parse_day(day: str) -> date:
    try:
        parsed = date.fromisoformat(day)
    except (TypeError, ValueError):
        parsed = None
    # fromisoformat also accepts "20240103"; partitions and file names use YYYY-MM-DD only.
    if parsed is None or parsed.isoformat() != day:
        raise ValueError(f"day must be a date as YYYY-MM-DD, got {day!r}")
    return parsed


def _is_url(path: str) -> bool:
    return "://" in path
