"""A DataFrame chunk as PostgreSQL COPY text, built a column at a time.

psycopg's `copy.write_row` formats one Python tuple per call, after pandas has boxed every
value into a Python object: about 10 µs a row here, more than the server spends staging
and merging it. For the column kinds a backfill mostly writes (integers, floats, booleans,
strings, zone-aware timestamps) the text of a whole column is built at once with numpy and
C-level string joins instead, then the lines are joined once.

Each field carries the value `write_row` would send (timestamps spelled differently, as
the same instant in UTC), so the stored rows are the same either way. A chunk holding any
other kind of column (dates, decimals, mixed objects, naive timestamps, a type with its
own bind processing) returns None and keeps the per-row path, where psycopg's adapters
and the column types decide.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import sqlalchemy as sa

from jobs_platform.store.schema import UtcDateTime

__all__ = ["copy_text", "holds_instants"]

NULL = "\\N"
# COPY's text format: these four would end a field or a line, or start an escape.
_SPECIAL = ("\\", "\t", "\n", "\r")
_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def copy_text(
    frame: pd.DataFrame, types: Sequence[sa.types.TypeEngine[Any]], dialect: sa.Dialect
) -> bytes | None:
    """The rows of `frame` as COPY text-format lines, or None if a column needs the row path."""
    encoded = []
    for name, column_type in zip(frame.columns, types, strict=True):
        column = _column_text(frame[name], column_type, dialect)
        if column is None:
            return None
        encoded.append(column)
    lines = "\n".join(map("\t".join, zip(*encoded, strict=True)))
    return f"{lines}\n".encode()


def _column_text(
    series: pd.Series, column_type: sa.types.TypeEngine[Any], dialect: sa.Dialect
) -> list[str] | None:
    dtype = series.dtype
    if isinstance(dtype, pd.DatetimeTZDtype):
        return _timestamps(series) if holds_instants(column_type, dialect) else None
    if pd.api.types.is_bool_dtype(dtype) and isinstance(column_type, sa.Boolean):
        # Boolean's bind processing only checks that values are booleans: these are.
        return _numbers(series, np.bool_, lambda flag: "t" if flag else "f")
    if column_type.dialect_impl(dialect).bind_processor(dialect) is not None:
        return None  # the type transforms values on the way in: only the row path applies it
    if pd.api.types.is_bool_dtype(dtype):
        return _numbers(series, np.bool_, lambda flag: "t" if flag else "f")
    if pd.api.types.is_integer_dtype(dtype):
        return _numbers(series, _numpy_type(dtype), str)
    if pd.api.types.is_float_dtype(dtype):
        return _numbers(series, np.float64, repr)  # repr: the shortest exact round trip
    if pd.api.types.is_object_dtype(dtype) or isinstance(dtype, pd.StringDtype):
        return _strings(series)
    return None


def holds_instants(column_type: sa.types.TypeEngine[Any], dialect: sa.Dialect) -> bool:
    """A zone-aware column type: any representation of the same instant stores the same value.

    UtcDateTime's bind processing only converts to UTC, which the text below already is.
    """
    if isinstance(column_type, UtcDateTime):
        return True
    impl = column_type.dialect_impl(dialect)
    return isinstance(impl, sa.DateTime) and impl.timezone and impl.bind_processor(dialect) is None


def _timestamps(series: pd.Series) -> list[str]:
    utc = series.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
    # numpy rounds down to whole microseconds, as a stdlib datetime would; PostgreSQL
    # keeps microseconds. NaT becomes "NaT" here and NULL below.
    micros = utc.astype("datetime64[us]")
    # `timezone="UTC"` spells the instant with a `Z`, which PostgreSQL reads as UTC: a
    # third of the time of appending "+00:00" to each string (docs/BENCHMARKS.md).
    text = np.datetime_as_string(micros, unit="us", timezone="UTC").tolist()
    return _with_nulls(text, np.isnat(micros))


def _numpy_type(dtype: np.dtype[Any] | pd.api.extensions.ExtensionDtype) -> type[np.generic]:
    """The numpy scalar type of an integer column: a numpy dtype's, or the one behind an
    extension dtype (Int64's int64, int64[pyarrow]'s int64)."""
    if isinstance(dtype, np.dtype):
        return dtype.type
    # pandas-stubs' ExtensionDtype has no `numpy_dtype`; the masked and Arrow dtypes do.
    behind: np.dtype[Any] = getattr(dtype, "numpy_dtype")  # noqa: B009
    return behind.type


def _numbers(
    series: pd.Series, numpy_type: type[np.generic], to_text: Callable[[object], str]
) -> list[str]:
    missing = series.isna().to_numpy()
    if missing.any():
        filler = np.zeros(1, dtype=numpy_type)[0]
        values = series.to_numpy(dtype=numpy_type, na_value=filler)
    else:
        values = series.to_numpy(dtype=numpy_type)
    return _with_nulls(list(map(to_text, values.tolist())), missing)


def _strings(series: pd.Series) -> list[str] | None:
    if pd.api.types.infer_dtype(series, skipna=True) not in ("string", "empty"):
        return None
    missing = series.isna().to_numpy()
    values = series.tolist()
    if missing.any():
        values = ["" if absent else value for value, absent in zip(values, missing, strict=True)]
    joined = "".join(values)
    if any(special in joined for special in _SPECIAL):
        values = [value.translate(_ESCAPES) for value in values]
    return _with_nulls(values, missing)


def _with_nulls(text: list[str], missing: np.ndarray) -> list[str]:
    if not missing.any():
        return text
    return [NULL if absent else value for value, absent in zip(text, missing, strict=True)]
