"""A value the warehouse rejects, named by where it is in the caller's frame.

A value the warehouse rejects (not of its column's type, too long, a NULL in a NOT NULL
column) raises `RejectedValue`, terminal, naming the row of the caller's frame, the column
and the value: not the COPY into a staging table that happened to meet it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd
import sqlalchemy as sa

from jobs_platform.errors import TerminalError
from jobs_platform.store.database_errors import rejection_of
from jobs_platform.writer.failing_row import failing_row_position

__all__ = ["RejectedValue", "naming_rejected_values"]

_SHOWN_VALUE_CHARS = 60


class RejectedValue(TerminalError):
    """The warehouse rejected a value of a chunk: a type, a length, a NULL, a constraint.

    Named by where the value is in the input: the chunk (0-based, when the caller knows
    it), the row by its label in the reader's frame (`row 4`; `line 6` when the reader
    named its index `line`), the column and the value.
    """

    def __init__(
        self,
        problem: str,
        *,
        chunk: int | None = None,
        row: str | None = None,
        column: str | None = None,
        sqlstate: str | None = None,
        label: object = None,
    ) -> None:
        where = [f"chunk {chunk}"] if chunk is not None else []
        where += [row] if row is not None else []
        where += [f"column {column!r}"] if column is not None else []
        # The location goes into args too, so str() and a pickled copy both read naturally.
        super().__init__(f"{', '.join(where)}: {problem}" if where else problem)
        self.problem, self.chunk, self.row, self.column = problem, chunk, row, column
        # The SQLSTATE, and the rejected row's label in the frame when the warehouse said
        # which row it was: what rejecting rows (`writer.rejecting_upsert`) goes by.
        self.sqlstate, self.label = sqlstate, label

    def in_chunk(self, chunk: int) -> RejectedValue:
        """The same rejection, naming the chunk it happened in."""
        return RejectedValue(
            self.problem,
            chunk=chunk,
            row=self.row,
            column=self.column,
            sqlstate=self.sqlstate,
            label=self.label,
        )


@contextmanager
def naming_rejected_values(
    connection: sa.Connection, table: sa.Table, frame: pd.DataFrame
) -> Iterator[None]:
    """Raise a value the warehouse rejects while writing `frame` as `RejectedValue`."""
    try:
        yield
    except Exception as error:
        rejected = _rejected_value(error, connection.dialect, table, frame)
        if rejected is None:
            raise
        raise rejected from error


def _rejected_value(
    error: Exception, dialect: sa.Dialect, table: sa.Table, frame: pd.DataFrame
) -> RejectedValue | None:
    """The row, column and value `error` rejected, found in the frame that was written.

    Every statement writes the frame's rows in its order, so the line of a COPY is a
    position in the frame; a NOT NULL violation without one (a merge, SQLite) is about the
    first row with a NULL in that column.
    """
    rejection = rejection_of(error)
    if rejection is None:
        return None
    sqlstate, line, column = rejection.sqlstate, rejection.line, rejection.column
    if column not in frame.columns:
        column = None
    position = line - 1 if line is not None and 0 < line <= len(frame) else None
    if position is None and sqlstate == "23502" and column is not None:
        nulls = np.flatnonzero(frame[column].isna().to_numpy())
        position = int(nulls[0]) if len(nulls) else None
    if position is None:  # a merge's check or foreign-key violation may still name it
        position = failing_row_position(rejection, table, frame)
    if position is None:
        return RejectedValue(
            f"the warehouse rejected a row: {rejection.message}", column=column, sqlstate=sqlstate
        )
    row, label = _row_label(frame.index, position), frame.index[position]
    if column is None:
        return RejectedValue(
            f"the warehouse rejected it: {rejection.message}",
            row=row,
            sqlstate=sqlstate,
            label=label,
        )
    value = _shown(frame[column].iloc[position])
    column_type = table.c[column].type.compile(dialect=dialect)
    return RejectedValue(
        rejection.problem(value, column_type),
        row=row,
        column=column,
        sqlstate=sqlstate,
        label=label,
    )


def _row_label(index: pd.Index, position: int) -> str:
    """The row as the reader's frame labels it: `row 4`, or `line 6` for an index named so."""
    label = index[position]
    label = label.item() if isinstance(label, np.generic) else label
    return f"{index.name} {label}" if index.name is not None else f"row {label}"


def _shown(value: object) -> str:
    value = value.item() if isinstance(value, np.generic) else value
    text = repr(value)
    if len(text) > _SHOWN_VALUE_CHARS:
        return text[: _SHOWN_VALUE_CHARS - 3] + "..."
    return text
