"""A DataFrame chunk as PostgreSQL binary COPY data, built a column at a time with numpy.

Why: text COPY costs both sides. The client turns every value into a string (`copy_text`,
about 0.9 s per 1,000,000 orders here), and the server parses every string back (integers,
and timestamps above all): a server-side `COPY … FROM` a text file spends about 2.3 s of
server CPU on those rows, the same rows in binary about 1.8 s (docs/BENCHMARKS.md). In
binary, fixed-width values are copied as their big-endian bytes and strings as their bytes.

The binary format must match each column's type exactly (an int4 column takes 4 bytes),
so the types are the server's own, read from the table by the caller, never guessed from
the SQLAlchemy declaration. A chunk goes binary only when every column is one of the kinds
below and every value is one the server would take unchanged from text too (integers in
the column's range, strings without NUL, instants in range): otherwise `binary_copy`
returns None and the chunk keeps the text path, where the server's rejection names the row.
What the server checks in both formats (a string too long for varchar(n), a NULL in a
NOT NULL column, a constraint) it rejects in binary as in text, with the row's line.

Each field carries the value the text path sends, so the stored rows are the same.

Layout (PostgreSQL docs, "COPY", binary format): a signature and two 32-bit words, then
per row a 16-bit field count and per field a 32-bit length (-1 for NULL) and its bytes,
then a 16-bit -1. The rows of a block are laid out in a 2-D byte array, one row per line
and each field at its widest, then the unused bytes of the narrower strings are masked
out: one boolean selection packs the block. Checks and fixed-width conversions run over
the whole frame once; strings are encoded block by block.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pandas as pd
import sqlalchemy as sa

from jobs_platform.writer.copy_text import holds_instants

__all__ = ["BinaryCopy", "binary_copy"]

SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # no OIDs, no header extension
TRAILER = b"\xff\xff"

# The server's type OIDs (pg_type.oid, fixed for built-in types) this module writes.
BOOL, INT8, INT2, INT4, TEXT, FLOAT4, FLOAT8 = 16, 20, 21, 23, 25, 700, 701
BPCHAR, VARCHAR, TIMESTAMPTZ = 1042, 1043, 1184
_INTEGERS: dict[int, np.dtype[Any]] = {
    INT2: np.dtype(">i2"),
    INT4: np.dtype(">i4"),
    INT8: np.dtype(">i8"),
}
_STRINGS = {TEXT, VARCHAR, BPCHAR}
# PostgreSQL counts timestamps in microseconds from 2000-01-01T00:00:00Z.
_POSTGRES_EPOCH_US = 946_684_800_000_000
_MICROSECONDS = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": 1}
# A column whose first _SAMPLED_STRINGS values hold at most _FEW_DISTINCT strings has its
# distinct strings encoded once, not each row's.
_SAMPLED_STRINGS, _FEW_DISTINCT = 1_000, 64
# The widest microsecond count of a pandas timestamp that still fits in int64 below.
_MICROS_LIMIT = 2**62


@dataclass(frozen=True)
class _Column:
    """One column of the frame, ready to be packed block by block.

    Its fields come from one of: `fixed`, the whole column's fields as an (n, width) uint8
    array (NULLs zero-filled); `codes` into `distinct`, the bytes and lengths of a column
    of few distinct strings, each encoded once (-1, a NULL, picks the last, empty);
    `strings`, the column's strings (NULLs as ""), encoded block by block. `missing`:
    where the NULLs are, or None when there is none.
    """

    fixed: np.ndarray | None = None
    codes: np.ndarray | None = None
    distinct: tuple[np.ndarray, np.ndarray] | None = None
    strings: np.ndarray | None = None
    missing: np.ndarray | None = None
    encoding: str = "utf-8"

    def fields(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Rows `start:stop` as (bytes per row, each row's length or None if fixed)."""
        if self.fixed is not None:
            return self.fixed[start:stop], None
        if self.codes is not None and self.distinct is not None:
            codes = self.codes[start:stop]
            return self.distinct[0][codes], self.distinct[1][codes]
        return _encoded(cast("np.ndarray", self.strings)[start:stop], self.encoding)


@dataclass(frozen=True)
class BinaryCopy:
    """A frame checked for binary COPY, written block by block (`blocks`)."""

    rows: int
    columns: tuple[_Column, ...]

    def blocks(self, block_rows: int) -> Iterator[bytes]:
        """The whole COPY input: the signature, the rows `block_rows` at a time, the
        trailer. Block by block, so the server stores one block while the next is built."""
        yield SIGNATURE
        for start in range(0, self.rows, block_rows):
            yield self._packed(start, min(start + block_rows, self.rows))
        yield TRAILER

    def _packed(self, start: int, stop: int) -> bytes:
        rows = stop - start
        fields = [column.fields(start, stop) for column in self.columns]
        width = 2 + sum(4 + values.shape[1] for values, _ in fields)
        packed = np.empty((rows, width), dtype=np.uint8)
        packed[:, :2] = _big_endian(len(fields), ">i2")
        unused: list[tuple[int, int, np.ndarray]] = []
        at = 2
        for column, (values, lengths) in zip(self.columns, fields, strict=True):
            field_width = values.shape[1]
            missing = None if column.missing is None else column.missing[start:stop]
            if lengths is None and missing is None:
                packed[:, at : at + 4] = _big_endian(field_width, ">i4")
            else:
                sizes = np.full(rows, field_width, np.int64) if lengths is None else lengths
                if missing is not None:
                    sizes = np.where(missing, -1, sizes)
                packed[:, at : at + 4] = sizes.astype(">i4").view(np.uint8).reshape(rows, 4)
                unused.append((at + 4, field_width, np.maximum(sizes, 0)))
            packed[:, at + 4 : at + 4 + field_width] = values
            at += 4 + field_width
        if not unused:
            return packed.tobytes()
        kept = np.ones((rows, width), dtype=bool)
        for begin, field_width, sizes in unused:
            kept[:, begin : begin + field_width] = np.arange(field_width) < sizes[:, None]
        return packed[kept].tobytes()


def binary_copy(
    frame: pd.DataFrame,
    types: Sequence[sa.types.TypeEngine[Any]],
    oids: Sequence[int],
    dialect: sa.Dialect,
    encoding: str,
) -> BinaryCopy | None:
    """`frame` ready for a binary COPY into columns of the server types `oids`, or None
    when a column or a value needs the text path."""
    columns = []
    for name, column_type, oid in zip(frame.columns, types, oids, strict=True):
        column = _column(frame[name], column_type, oid, dialect, encoding)
        if column is None:
            return None
        columns.append(column)
    return BinaryCopy(len(frame), tuple(columns))


def _column(
    series: pd.Series,
    column_type: sa.types.TypeEngine[Any],
    oid: int,
    dialect: sa.Dialect,
    encoding: str,
) -> _Column | None:
    dtype = series.dtype
    if (pd.api.types.is_object_dtype(dtype) or isinstance(dtype, pd.StringDtype)) and (
        oid in _STRINGS
    ):
        return _strings(series, encoding) if _plain(column_type, dialect, flags=False) else None
    nulls = _nulls(series)
    if isinstance(dtype, pd.DatetimeTZDtype):
        if oid == TIMESTAMPTZ and holds_instants(column_type, dialect):
            return _instants(series, nulls)
        return None
    if pd.api.types.is_bool_dtype(dtype):
        # Boolean's bind processing only checks that values are booleans: these are.
        if oid != BOOL or not _plain(column_type, dialect, flags=True):
            return None
        return _fixed(series.to_numpy(dtype=bool, na_value=False), np.dtype("u1"), nulls)
    if not _plain(column_type, dialect, flags=False):
        return None  # the type transforms values on the way in: only the row path applies it
    if pd.api.types.is_integer_dtype(dtype) and oid in _INTEGERS:
        return _integers(series, _INTEGERS[oid], nulls)
    if pd.api.types.is_float_dtype(dtype) and oid == FLOAT8:
        return _fixed(series.to_numpy(dtype=np.float64, na_value=0.0), np.dtype(">f8"), nulls)
    return None  # float4 (text rounds once, a cast twice), dates, numerics, …: text


def _plain(column_type: sa.types.TypeEngine[Any], dialect: sa.Dialect, *, flags: bool) -> bool:
    """The column type sends values as they are (Boolean: checked, not changed)."""
    if flags and isinstance(column_type, sa.Boolean):
        return True
    return column_type.dialect_impl(dialect).bind_processor(dialect) is None


def _fixed(values: np.ndarray, wire: np.dtype[Any], missing: np.ndarray | None) -> _Column:
    encoded = np.ascontiguousarray(values.astype(wire))
    return _Column(
        fixed=encoded.view(np.uint8).reshape(len(values), wire.itemsize), missing=missing
    )


def _integers(series: pd.Series, wire: np.dtype[Any], missing: np.ndarray | None) -> _Column | None:
    native = np.dtype(np.int64) if series.dtype.kind != "u" else np.dtype(np.uint64)
    values = series.to_numpy(dtype=native, na_value=0)
    if len(values):
        limits = np.iinfo(wire.newbyteorder("="))
        if values.min() < limits.min or values.max() > limits.max:
            return None  # out of the column's range: the server rejects it as text
    return _fixed(values, wire, missing)


def _instants(series: pd.Series, missing: np.ndarray | None) -> _Column | None:
    unit = getattr(series.dtype, "unit", "ns")
    if unit not in _MICROSECONDS:
        return None
    counts = np.asarray(series.array.asi8)
    counts = counts if missing is None else np.where(missing, 0, counts)
    if unit in ("s", "ms") and len(counts) and np.abs(counts).max() > _MICROS_LIMIT // 1_000_000:
        return None
    # Down to whole microseconds, as the text path's numpy cast rounds (towards the past);
    # PostgreSQL keeps microseconds.
    micros = counts // 1_000 if unit == "ns" else counts * _MICROSECONDS[unit]
    return _fixed(micros - _POSTGRES_EPOCH_US, np.dtype(">i8"), missing)


def _strings(series: pd.Series, encoding: str) -> _Column | None:
    values = series.to_numpy(dtype=object)
    sample = values[:_SAMPLED_STRINGS]
    if pd.api.types.infer_dtype(sample, skipna=True) not in ("string", "empty"):
        return None  # (and nothing unhashable reaches `unique`)
    if len(pd.unique(sample)) <= _FEW_DISTINCT:
        return _few_strings(values, encoding)
    if pd.api.types.infer_dtype(values, skipna=False) == "string":
        nulls = None  # every value a string: no NULL to look for
    elif pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty"):
        nulls = _nulls(series)
        values = values if nulls is None else np.where(nulls, "", values)
    else:
        return None
    if "\x00" in "".join(values.tolist()):
        return None  # PostgreSQL stores no NUL: the text path lets the server reject it
    return _Column(strings=values, missing=nulls, encoding=encoding)


def _few_strings(values: np.ndarray, encoding: str) -> _Column | None:
    """A column of few distinct strings (a currency, a status): each encoded once."""
    codes, distinct = pd.factorize(values)  # a NULL (None, NaN, NA) gets code -1
    if pd.api.types.infer_dtype(distinct, skipna=False) not in ("string", "empty"):
        return None
    spelled = [*distinct.tolist(), ""]  # the last, for code -1
    if "\x00" in "".join(spelled):
        return None  # PostgreSQL stores no NUL: the text path lets the server reject it
    missing = codes < 0
    return _Column(
        codes=codes,
        distinct=_encoded(np.array(spelled, dtype=object), encoding),
        missing=missing if missing.any() else None,
    )


def _encoded(strings: np.ndarray, encoding: str) -> tuple[np.ndarray, np.ndarray]:
    """The strings' bytes, one row each at the widest one's width, and their lengths."""
    try:
        raw = strings.astype(np.bytes_)  # ASCII: the same bytes in every encoding
    except UnicodeEncodeError:
        raw = np.array([value.encode(encoding) for value in strings], dtype=np.bytes_)
    # No NUL in the strings (checked): the trailing NULs that pad them are not theirs.
    lengths = np.char.str_len(raw).astype(np.int64)
    return raw.view(np.uint8).reshape(len(strings), raw.dtype.itemsize), lengths


def _nulls(series: pd.Series) -> np.ndarray | None:
    missing = series.isna().to_numpy()
    return missing if missing.any() else None


def _big_endian(value: int, wire: str) -> np.ndarray:
    return np.frombuffer(np.array(value, dtype=wire).tobytes(), dtype=np.uint8)
