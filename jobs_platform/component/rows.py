"""A declared backfill's table, and the rows of its source checked against it.

Plain Python over pandas and SQLAlchemy, no Dagster. The source is not trusted: each value
is converted to its column's type here, not by the warehouse, so a bad value fails the
same way on PostgreSQL and on SQLite (which would store a word in an integer column). A
row whose partition column falls outside the partition is refused too: a partition writes
only the rows its sweep owns, or a re-run would not converge.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pandas as pd
import sqlalchemy as sa

from jobs_platform.component.declaration import (
    BackfillDeclaration,
    ColumnDeclaration,
    ColumnType,
)
from jobs_platform.errors import InputValidationError
from jobs_platform.store.schema import UtcDateTime

_SQL_TYPES: Mapping[ColumnType, Callable[[ColumnDeclaration], sa.types.TypeEngine[Any]]] = {
    "string": lambda column: sa.String(column.length) if column.length else sa.Text(),
    "integer": lambda column: sa.Integer(),
    "bigint": lambda column: sa.BigInteger(),
    "float": lambda column: sa.Float(),
    "boolean": lambda column: sa.Boolean(),
    "date": lambda column: sa.Date(),
    "timestamp": lambda column: UtcDateTime(),
}
_INTEGER_BOUNDS = {"integer": 2**31, "bigint": 2**63}
_INTEGER_TEXT = re.compile(r"[+-]?\d+")
_TRUE = frozenset({"true", "t", "yes", "y", "1"})
_FALSE = frozenset({"false", "f", "no", "n", "0"})
# A refused value is shown in its error cut to this many characters.
_SHOWN_CHARS = 60

RowRejecter = Callable[[int, str, Mapping[str, object]], None]
"""`PartitionInput.reject(row_number, reason, values)`."""


@dataclass(frozen=True)
class PartitionWindow:
    """A partition: its key, and its time window where it has one (`end` excluded)."""

    key: str
    start: dt.datetime | None = None
    end: dt.datetime | None = None


def target_table(declaration: BackfillDeclaration) -> sa.Table:
    """The table a declaration names, its natural key the primary key, in its own metadata."""
    required = {*declaration.natural_key, declaration.partition_column}
    return sa.Table(
        declaration.table.name,
        sa.MetaData(),
        *(
            sa.Column(
                column.name,
                _SQL_TYPES[column.type](column),
                primary_key=column.name in declaration.natural_key,
                nullable=column.nullable and column.name not in required,
                autoincrement=False,
            )
            for column in declaration.table.columns
        ),
    )


def partition_rows(
    table: sa.Table, declaration: BackfillDeclaration, window: PartitionWindow
) -> sa.ColumnElement[bool]:
    """The rows of the table a partition owns (those its finalize sweeps)."""
    column = table.c[declaration.partition_column]
    bounds = _bounds(declaration.table.column(declaration.partition_column), window)
    if bounds is None:
        return column == window.key
    return sa.and_(column >= bounds[0], column < bounds[1])


def _bounds(column: ColumnDeclaration, window: PartitionWindow) -> tuple[Any, Any] | None:
    if window.start is None or window.end is None:
        return None
    if column.type == "date":
        return window.start.date(), window.end.date()
    return window.start.astimezone(dt.UTC), window.end.astimezone(dt.UTC)


class IncomingRows:
    """The source's rows of one partition, chunk by chunk, as the table's columns.

    Row numbers count every row the source gave, from 1, across chunks. A bad row is
    rejected through `reject` (a backfill under `bad_rows`), else it stops the partition
    with an `InputValidationError` (terminal).
    """

    def __init__(
        self,
        declaration: BackfillDeclaration,
        window: PartitionWindow,
        reject: RowRejecter | None,
    ) -> None:
        self._table = declaration.table
        self._scope = declaration.table.column(declaration.partition_column)
        self._required = {*declaration.natural_key, declaration.partition_column}
        self._window = window
        self._reject = reject
        self._rows_before = 0

    def conform(self, frame: pd.DataFrame) -> pd.DataFrame:
        """`frame` with the declared columns only, each value of its column's type."""
        missing = [c.name for c in self._table.columns if c.name not in frame.columns]
        if missing:
            raise InputValidationError(
                f"the source has no column {', '.join(map(repr, missing))} "
                f"(it has {', '.join(map(repr, map(str, frame.columns)))})"
            )
        first = self._rows_before + 1
        self._rows_before += len(frame)
        raw = frame[[c.name for c in self._table.columns]].reset_index(drop=True)
        problems: dict[int, str] = {}
        converted = {}
        for column in self._table.columns:
            values, bad = self._column(column, raw[column.name])
            converted[column.name] = values
            for index, problem in bad.items():
                problems.setdefault(index, f"column {column.name!r}: {problem}")
        for index in sorted(problems):
            row_number = first + index
            if self._reject is None:
                raise InputValidationError(f"row {row_number}, {problems[index]}")
            self._reject(
                row_number, problems[index], {str(k): v for k, v in raw.iloc[index].items()}
            )
        conformed = pd.DataFrame(converted, columns=list(converted))
        return conformed.drop(index=list(problems)).reset_index(drop=True)

    def _column(
        self, column: ColumnDeclaration, raw: pd.Series
    ) -> tuple[pd.Series, dict[int, str]]:
        bad: dict[int, str] = {}
        values: list[Any] = []
        nullable = column.nullable and column.name not in self._required
        convert = _CONVERTERS[column.type]
        for index, value in enumerate(raw.tolist()):
            try:
                if _is_null(value, column.type):
                    if not nullable:
                        raise ValueError("is empty, and the column is not nullable")
                    values.append(None)
                    continue
                converted = convert(value, column)
                if column is self._scope:
                    self._check_in_partition(converted)
                values.append(converted)
            except ValueError as problem:
                bad[index] = str(problem)
                values.append(None)
        return _series(values, column.type), bad

    def _check_in_partition(self, value: Any) -> None:
        bounds = _bounds(self._scope, self._window)
        inside = value == self._window.key if bounds is None else bounds[0] <= value < bounds[1]
        if not inside:
            where = (
                self._window.key
                if bounds is None
                else f"{self._window.key} [{bounds[0].isoformat()}, {bounds[1].isoformat()})"
            )
            raise ValueError(f"{_shown(value)} falls outside the partition {where}")


def _is_null(value: Any, column_type: ColumnType) -> bool:
    if value is None or value is pd.NaT or value is pd.NA:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    # A CSV field cannot tell an empty string from a missing value; only a string is empty.
    return value == "" and column_type != "string"


def _to_string(value: Any, column: ColumnDeclaration) -> str:
    text = value if isinstance(value, str) else str(value)
    if column.length is not None and len(text) > column.length:
        raise ValueError(f"{_shown(text)} is longer than {column.length} characters")
    return text


def _to_integer(value: Any, column: ColumnDeclaration) -> int:
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, (float, Decimal)) and math.isfinite(value) and value == int(value):
        number = int(value)
    elif isinstance(value, str) and _INTEGER_TEXT.fullmatch(value.strip()):
        number = int(value.strip())
    elif hasattr(value, "item") and not isinstance(value.item(), bool):  # a numpy scalar
        return _to_integer(value.item(), column)
    if number is None:
        raise ValueError(f"must be an integer, got {_shown(value)}")
    limit = _INTEGER_BOUNDS[column.type]
    if not -limit <= number < limit:
        raise ValueError(f"{number} does not fit a column of type {column.type}")
    return number


def _to_float(value: Any, column: ColumnDeclaration) -> float:
    number: float | None = None
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    elif hasattr(value, "item") and not isinstance(value.item(), bool):
        return _to_float(value.item(), column)
    if number is None or not math.isfinite(number):
        raise ValueError(f"must be a finite number, got {_shown(value)}")
    return number


def _to_boolean(value: Any, column: ColumnDeclaration) -> bool:
    if hasattr(value, "item"):  # numpy's bool_ and integers
        value = value.item()
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"must be true or false, got {_shown(value)}")


def _to_date(value: Any, column: ColumnDeclaration) -> dt.date:
    if isinstance(value, dt.datetime):
        raise ValueError(f"must be a date, got the timestamp {_shown(value)}")
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str) and len(value.strip()) == len("YYYY-MM-DD"):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            pass
    raise ValueError(f"must be a date as YYYY-MM-DD, got {_shown(value)}")


def _to_timestamp(value: Any, column: ColumnDeclaration) -> dt.datetime:
    moment: dt.datetime | None = None
    if isinstance(value, dt.datetime):  # pandas' Timestamp too
        moment = value.to_pydatetime() if isinstance(value, pd.Timestamp) else value
    # A bare date would read as midnight: a timestamp needs its time of day.
    elif isinstance(value, str) and len(value.strip()) > len("YYYY-MM-DD"):
        try:
            moment = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            moment = None
    if moment is None:
        raise ValueError(f"must be an ISO-8601 timestamp, got {_shown(value)}")
    # No offset means UTC, as the warehouse keeps it.
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)


_CONVERTERS: Mapping[ColumnType, Callable[[Any, ColumnDeclaration], Any]] = {
    "string": _to_string,
    "integer": _to_integer,
    "bigint": _to_integer,
    "float": _to_float,
    "boolean": _to_boolean,
    "date": _to_date,
    "timestamp": _to_timestamp,
}


def _series(values: list[Any], column_type: ColumnType) -> pd.Series:
    """The column as the writer takes it: numbers in numpy's (or pandas' nullable)
    dtypes, timestamps in UTC, dates, strings and booleans as Python objects."""
    if column_type in ("integer", "bigint"):
        return pd.Series(values, dtype="Int64")
    if column_type == "float":
        return pd.Series(values, dtype="float64")
    if column_type == "timestamp":
        return pd.Series(pd.to_datetime(values, utc=True)).dt.as_unit("ns")
    return pd.Series(values, dtype=object)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."
