"""COPY a DataFrame into a PostgreSQL table: binary, column-wise text, or row by row.

The upsert's bulk path (`writer.upsert`). A chunk goes as binary COPY when every column
and value allows it (`copy_binary`): no text to build on the client, none to parse on the
server. Otherwise the COPY text of common column kinds is built a column at a time
(`copy_text`), and only what neither covers goes row by row. Figures and how they were
measured: docs/BENCHMARKS.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import pandas as pd
import sqlalchemy as sa

from jobs_platform.writer.copy_binary import binary_copy
from jobs_platform.writer.copy_text import copy_text

if TYPE_CHECKING:  # imported where COPY runs: a SQLite warehouse never loads psycopg
    import psycopg
    import psycopg.sql

__all__ = ["COPY_BLOCK_ROWS", "copied_as_new_rows", "copy_into", "python_values"]

# Rows turned into COPY text at a time: small enough that the server is kept busy from
# the first block on, large enough that building a block's text stays column-wise.
COPY_BLOCK_ROWS = 5_000
# A missing value as the writer hands it over. Typed Any: pandas-stubs' `where` takes no
# None for `other`, though pandas puts None in an object column as asked.
_NULL: Any = None


def python_values(frame: pd.DataFrame) -> list[tuple[object, ...]]:
    """Rows as tuples of plain Python values, missing values as None."""
    # Zone-aware timestamps as stdlib datetimes: a pandas Timestamp is several times
    # slower to make and to pass through the column type's bind processing.
    aware = {
        name: pd.Series(frame[name].array.to_pydatetime(), index=frame.index, dtype=object)
        for name in frame.columns
        if isinstance(frame[name].dtype, pd.DatetimeTZDtype)
    }
    if aware:
        frame = frame.assign(**aware)
    # Other extension dtypes (Int64, boolean, …) yield numpy scalars, which sqlite3
    # would store as BLOBs; going through object gives Python values.
    if frame.isna().to_numpy().any() or any(
        isinstance(dtype, pd.api.extensions.ExtensionDtype) for dtype in frame.dtypes
    ):
        frame = frame.astype(object).where(frame.notna(), _NULL)
    return list(frame.itertuples(index=False, name=None))


def copied_as_new_rows(
    connection: sa.Connection,
    table: sa.Table,
    key: Sequence[str],
    columns: Sequence[str],
    frame: pd.DataFrame,
) -> bool:
    """COPY the chunk straight into `table` when its keys' range holds no row yet.

    A first backfill of a partition writes only new keys. Then the stage and the merge
    are pure overhead, half the time of the whole upsert: a plain COPY into the table has
    the same effect. One index probe of the chunk's key range tells whether it applies
    (integer keys: their order is the same in pandas and PostgreSQL; other keys, or a
    range that holds rows, take the merge). A concurrent writer may insert one of the
    keys after the probe; the COPY then fails on the key and, its savepoint rolled back,
    the chunk takes the merge like any other.
    """
    if len(key) != 1:
        return False
    column, values = table.c[key[0]], frame[key[0]]
    if not isinstance(column.type, sa.Integer) or not _whole_keys(values):
        return False
    from psycopg import sql
    from psycopg.errors import UniqueViolation

    # One round trip tells both whether the range holds a row and the columns' server
    # types (the binary COPY's formats): a row of the range, or none, and its description.
    probe = sql.SQL("SELECT {} FROM {} WHERE {} BETWEEN %s AND %s LIMIT 1").format(
        _column_list(columns), _table_name(table), sql.Identifier(column.name)
    )
    with _driver(connection).cursor() as cursor:
        cursor.execute(probe, (int(values.min()), int(values.max())))
        if cursor.fetchone() is not None:
            return False
        oids = _type_oids(cursor)
    try:
        with connection.begin_nested():
            copy_into(connection, table, columns, frame, oids)
    except UniqueViolation:
        return False
    return True


def _whole_keys(values: pd.Series) -> bool:
    return pd.api.types.is_signed_integer_dtype(values.dtype) and not values.isna().any()


def copy_into(
    connection: sa.Connection,
    target: sa.Table,
    columns: Sequence[str],
    frame: pd.DataFrame,
    oids: Sequence[int] | None = None,
) -> None:
    """COPY `frame` into `target`: binary when every column and value allows it
    (`copy_binary`), else column-wise text (`copy_text`), else row by row.

    `oids`: the server types of `columns` in `target`, when the caller has read them.
    """
    from psycopg import sql

    driver_connection = _driver(connection)
    dialect = connection.dialect
    selected = frame[list(columns)]
    types = [target.c[name].type for name in columns]
    if oids is None:
        oids = _server_types(driver_connection, target, columns)
    binary = binary_copy(selected, types, oids, dialect, driver_connection.info.encoding)
    copy_statement = sql.SQL("COPY {} ({}) FROM STDIN{}").format(
        _table_name(target),
        _column_list(columns),
        sql.SQL(" (FORMAT BINARY)" if binary is not None else ""),
    )
    with driver_connection.cursor() as cursor, cursor.copy(copy_statement) as copy:
        if binary is not None:
            for data in binary.blocks(COPY_BLOCK_ROWS):
                copy.write(data)
            return
        # Block by block, so the server stores one block while the next is turned into
        # text: the two overlap instead of adding up (docs/BENCHMARKS.md). One COPY, so
        # its line numbers are still the frame's rows.
        for start in range(0, len(selected), COPY_BLOCK_ROWS):
            block = selected.iloc[start : start + COPY_BLOCK_ROWS]
            text = copy_text(block, types, dialect)
            if text is not None:
                copy.write(text)
            else:
                _write_rows(copy, target, columns, block, dialect)


def _driver(connection: sa.Connection) -> psycopg.Connection[Any]:
    # COPY is psycopg 3's: the driver of every PostgreSQL warehouse (`db.normalize_url`).
    return cast("psycopg.Connection[Any]", connection.connection.driver_connection)


def _table_name(table: sa.Table) -> psycopg.sql.Identifier:
    from psycopg import sql

    return sql.Identifier(table.schema, table.name) if table.schema else sql.Identifier(table.name)


def _column_list(columns: Sequence[str]) -> psycopg.sql.Composed:
    from psycopg import sql

    return sql.SQL(", ").join(sql.Identifier(name) for name in columns)


def _server_types(
    driver_connection: psycopg.Connection[Any], table: sa.Table, columns: Sequence[str]
) -> list[int]:
    """The type OIDs of `columns` as the server has them in `table` (no row read)."""
    from psycopg import sql

    describe = sql.SQL("SELECT {} FROM {} LIMIT 0").format(
        _column_list(columns), _table_name(table)
    )
    with driver_connection.cursor() as cursor:
        cursor.execute(describe)
        return _type_oids(cursor)


def _type_oids(cursor: psycopg.Cursor[Any]) -> list[int]:
    # A domain's column is described by its base type, which is what its COPY reads.
    return [column.type_code for column in cursor.description or ()]


def _write_rows(
    copy: psycopg.Copy,
    target: sa.Table,
    columns: Sequence[str],
    block: pd.DataFrame,
    dialect: sa.Dialect,
) -> None:
    """A block whose columns need the row path: psycopg's adapters, the column types' own
    bind processing (such as UtcDateTime rejecting naive datetimes), as executemany would."""
    processors = [
        (position, processor)
        for position, name in enumerate(columns)
        if (processor := target.c[name].type.dialect_impl(dialect).bind_processor(dialect))
    ]
    for row in python_values(block):
        if processors:
            values = list(row)
            for position, processor in processors:
                values[position] = processor(values[position])
            row = tuple(values)
        copy.write_row(row)
