"""Upsert a chunk the warehouse refused, setting aside exactly the rows it refuses.

Only a chunk whose plain upsert (`upsert.upsert_frame`) was refused comes here, in a new
transaction: a chunk with no bad row never pays for any of this. The chunk is written in
parts, each inside a SAVEPOINT, so a refused part is rolled back alone and the chunk's
transaction (its rows, checkpoint and fence) carries on:
- a part the warehouse accepts is written (the COPY fast path or the merge, as usual);
- a refused part whose refusal names its row (a COPY's line, the first NULL of a NOT NULL
  column, the failing row a merge's DETAIL spells out) sets that row aside and writes the
  rows before it as one part and the rows after it in windows (`_around`): a couple of
  statements per bad row, each row sent about twice;
- any other refused part is split in two halves, each tried again (bisection): one bad
  row among n costs at most 2·log2(n) extra statements.

Only refusals caused by one row are set aside (`REFUSED_BY_ROW`): data exceptions (class
22) and not-null, foreign-key and check violations (23502, 23503, 23514). Anything else
(a unique violation on another index, an undefined column, a lost connection) is raised
as the plain upsert would have raised it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import pandas as pd
import sqlalchemy as sa

from jobs_platform.writer.refused_value import RefusedValue
from jobs_platform.writer.upsert import UpsertCounts, upsert_frame

__all__ = ["REFUSED_BY_ROW", "RefusedRow", "SetAside", "refused_by_row", "upsert_setting_aside"]

# The least rows a part after a bad row holds (`_around`): fewer would cost more statements
# than the rows they save.
WINDOW_ROWS = 1_000
REFUSED_BY_ROW_CONSTRAINTS = frozenset({"23502", "23503", "23514"})
REFUSED_BY_ROW = "class 22, " + ", ".join(sorted(REFUSED_BY_ROW_CONSTRAINTS))


def refused_by_row(refusal: RefusedValue) -> bool:
    """Whether one row's values caused `refusal` (so setting the row aside can cure it)."""
    sqlstate = refusal.sqlstate or ""
    return sqlstate.startswith("22") or sqlstate in REFUSED_BY_ROW_CONSTRAINTS


@dataclass(frozen=True)
class RefusedRow:
    """A row of the chunk the warehouse refused: its label in the frame, and why."""

    label: object
    reason: str
    column: str | None
    sqlstate: str | None


@dataclass
class SetAside:
    """What writing a refused chunk came to: the rows written, and the rows set aside."""

    counts: UpsertCounts = field(default_factory=UpsertCounts)
    refused: list[RefusedRow] = field(default_factory=list)
    statements: int = 0  # parts tried: the cost of finding the refused rows
    stopped_early: bool = False  # more rows were refused than `most`: the rest untried


def upsert_setting_aside(
    connection: sa.Connection,
    table: sa.Table,
    key: Sequence[str],
    frame: pd.DataFrame,
    *,
    most: int | None = None,
    refused_whole: RefusedValue | None = None,
) -> SetAside:
    """Merge `frame` into `table` (in the caller's transaction) without the rows it refuses.

    `frame` must have unique labels (the engine labels rows by input row number) and one
    row per key. Once more than `most` rows are refused, stops (`stopped_early`): the
    caller gives the partition up, and the rest of the chunk is never tried.
    `refused_whole` is how the plain upsert of the whole `frame` was refused, when the
    caller tried it: it is not tried again.
    """
    result = SetAside()
    parts = [frame]  # a stack: the first half is tried before the second
    while parts:
        part = parts.pop()
        if part.empty:
            continue
        try:
            if refused_whole is not None:
                known, refused_whole = refused_whole, None
                raise known
            result.statements += 1
            with connection.begin_nested():
                counts = upsert_frame(connection, table, key, part)
        except RefusedValue as refusal:
            if not refused_by_row(refusal):
                raise
            if len(part) == 1 or refusal.label in part.index:
                label = part.index[0] if len(part) == 1 else refusal.label
                result.refused.append(
                    RefusedRow(label, refusal.problem, refusal.column, refusal.sqlstate)
                )
                if most is not None and len(result.refused) > most:
                    result.stopped_early = True
                    return result
                # The row numbers are unique: a label's location is one position.
                parts += _around(part, cast(int, part.index.get_loc(label)))
            else:
                half = len(part) // 2
                parts += [part.iloc[half:], part.iloc[:half]]
            continue
        result.counts += counts
    return result


def _around(part: pd.DataFrame, position: int) -> list[pd.DataFrame]:
    """The parts to try after the row at `position` was set aside, last tried first.

    The rows before it were very likely accepted (a COPY and a merge take their rows in
    order): one part. The rows after it go in windows about twice the distance the bad
    row was found at (at least WINDOW_ROWS): a refused statement has still sent and
    parsed all its rows, so trying the whole rest again after each bad row would cost
    the chunk once per bad row; windows cost each row about twice however many there are.
    """
    rest = part.iloc[position + 1 :]
    window = max(2 * (position + 1), WINDOW_ROWS)
    windows = [rest.iloc[start : start + window] for start in range(0, len(rest), window)]
    return [*reversed(windows), part.iloc[:position]]
