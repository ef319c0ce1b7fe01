"""Which row of a frame a rejected merge statement was about, from PostgreSQL's DETAIL.

A COPY names its line; a merge (`INSERT … SELECT … ON CONFLICT`) does not. But for a check
or not-null violation PostgreSQL spells the failing row out, and for a foreign-key
violation the missing key (read by `store.database_errors.Rejection`). Finding that row in
the frame turns a bisection (about 2·log2(n) statements, `writer.rejecting_upsert`) into one
statement per bad row.

A hint, never trusted blindly: a failing row is matched by the frame's primary-key
columns and then every field of the frame's columns must read the same, and a missing
key names the first row holding it (any row holding it is rejected). Anything ambiguous
(a field with ", " in it, a table whose columns are in another order than its model,
a value spelled otherwise) finds no row, and the caller bisects as before.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import sqlalchemy as sa

from jobs_platform.store.database_errors import Rejection

__all__ = ["failing_row_position"]

_NULL = "null"


def failing_row_position(rejection: Rejection, table: sa.Table, frame: pd.DataFrame) -> int | None:
    """The position in `frame` of the row the rejection's DETAIL names, when it is certain."""
    if rejection.sqlstate == "23503":
        missing = rejection.missing_key()
        if missing is None or missing[0] not in frame.columns:
            return None
        column, value = missing
        holding = np.flatnonzero(_as_text(frame[column]) == value)
        return int(holding[0]) if len(holding) else None
    fields = rejection.failing_row()
    if fields is None:
        return None
    if len(fields) != len(table.columns):
        return None  # a value holding ", ": no certain reading
    by_column = dict(zip((column.name for column in table.columns), fields, strict=True))
    key = [column.name for column in table.primary_key]
    if not key or any(name not in frame.columns for name in key):
        return None
    matches = np.ones(len(frame), dtype=bool)
    for name in key:
        matches &= _as_text(frame[name]) == by_column[name]
    candidates = np.flatnonzero(matches)
    if len(candidates) != 1:
        return None
    position = int(candidates[0])
    row = frame.iloc[position]
    for name in frame.columns:
        value = row[name]
        if isinstance(value, (int, np.integer, str)) and str(value) != by_column[name]:
            return None
        if value is None and by_column[name] != _NULL:
            return None
    return position


def _as_text(series: pd.Series) -> np.ndarray:
    text: np.ndarray = series.astype(str).to_numpy()
    return text
