"""The ways psycopg 3 offers to COPY a DataFrame into a stage, written as an expert would.

`bench staging` times each of them on the same rows. The plain script (`bench.baselines`)
stages with `FASTEST`, the way that bench found fastest on this machine. Nothing here
imports the framework: these are the baseline's own.

- binary_numpy      binary COPY with `set_types`, `write_row` of itertuples (numpy values)
- binary_python     binary COPY with `set_types`, `write_row` of Python values: each
                    column's `tolist`, datetimes as `datetime` (`python_rows`)
- text_write_row    text COPY, `write_row` of the same Python values (psycopg formats text)
- csv_to_csv        `DataFrame.to_csv` into a buffer, one `copy.write` of CSV
- prepared_text     `DataFrame.to_csv` in PostgreSQL's text format (tab-separated, `\\N`
                    for null, no quoting), one `copy.write`
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Iterator, Sequence

import pandas as pd
import psycopg
from psycopg import sql

# PostgreSQL's binary COPY type for each kind of pandas column the bench frames hold.
_COPY_TYPES = {"i": "int8", "f": "float8", "b": "bool", "O": "text", "M": "timestamptz"}

StageWay = Callable[[psycopg.Cursor, sql.Composable, pd.DataFrame], None]


def copy_types(frame: pd.DataFrame) -> list[str]:
    """The binary COPY type of each column of `frame`."""
    return [_COPY_TYPES[dtype.kind] for dtype in frame.dtypes]


def target(table: str, columns: Sequence[str]) -> sql.Composed:
    """`table (col, …)`, what a COPY names."""
    names = sql.SQL(", ").join(map(sql.Identifier, columns))
    return sql.SQL("{} ({})").format(sql.Identifier(table), names)


def python_rows(frame: pd.DataFrame) -> Iterator[tuple]:
    """The rows of `frame` as plain Python values, converted column by column.

    psycopg dumps a `datetime` fast but a `pd.Timestamp` (its subclass) slowly, and
    `astype(object)` gives Timestamps: the datetime columns go through `to_pydatetime`.
    """
    columns = [
        frame[name].array.to_pydatetime().tolist()
        if frame[name].dtype.kind == "M"
        else frame[name].tolist()
        for name in frame.columns
    ]
    return zip(*columns, strict=True)


def binary_numpy(cursor: psycopg.Cursor, into: sql.Composable, frame: pd.DataFrame) -> None:
    with cursor.copy(sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(into)) as copy:
        copy.set_types(copy_types(frame))
        for row in frame.itertuples(index=False, name=None):
            copy.write_row(row)


def binary_python(cursor: psycopg.Cursor, into: sql.Composable, frame: pd.DataFrame) -> None:
    write_binary_rows(cursor, into, copy_types(frame), python_rows(frame))


def write_binary_rows(
    cursor: psycopg.Cursor, into: sql.Composable, types: Sequence[str], rows: Iterable[tuple]
) -> None:
    """Binary COPY of rows of Python values (`binary_python`'s COPY, for a reader's tuples)."""
    with cursor.copy(sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(into)) as copy:
        copy.set_types(list(types))
        for row in rows:
            copy.write_row(row)


def text_write_row(cursor: psycopg.Cursor, into: sql.Composable, frame: pd.DataFrame) -> None:
    with cursor.copy(sql.SQL("COPY {} FROM STDIN").format(into)) as copy:
        for row in python_rows(frame):
            copy.write_row(row)


def csv_to_csv(cursor: psycopg.Cursor, into: sql.Composable, frame: pd.DataFrame) -> None:
    text = frame.to_csv(index=False, header=False)
    with cursor.copy(sql.SQL("COPY {} FROM STDIN (FORMAT CSV)").format(into)) as copy:
        copy.write(text)


def prepared_text(cursor: psycopg.Cursor, into: sql.Composable, frame: pd.DataFrame) -> None:
    # No quoting and no escape character: a value holding a tab or a newline makes
    # `to_csv` raise rather than send a wrong row. The bench frames hold no backslash.
    text = frame.to_csv(sep="\t", na_rep="\\N", header=False, index=False, quoting=csv.QUOTE_NONE)
    with cursor.copy(sql.SQL("COPY {} FROM STDIN").format(into)) as copy:
        copy.write(text)


WAYS: dict[str, StageWay] = {
    way.__name__: way
    for way in (binary_numpy, binary_python, text_write_row, csv_to_csv, prepared_text)
}
# What `bin/bench staging --rows 200000 --repeats 3` found fastest on this machine: 0.42 s,
# against 1.7 s to 2.9 s for the others (2 cores, load 4.8; text and CSV pay the
# server's parsing, and a `pd.Timestamp` dumps slowly).
FASTEST = "binary_python"
