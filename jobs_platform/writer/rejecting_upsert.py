"""Upsert a chunk the warehouse rejected, rejecting exactly the rows it rejects.

Only a chunk whose plain upsert (`upsert.upsert_frame`) was rejected comes here, in a new
transaction: a chunk with no bad row never pays for any of this. The chunk is written in
parts, each inside a SAVEPOINT, so a rejected part is rolled back alone and the chunk's
transaction (its rows, checkpoint and fence) carries on:
- a part the warehouse accepts is written (the COPY fast path or the merge, as usual);
- a rejected part whose rejection names its row (a COPY's line, the first NULL of a NOT NULL
  column, the failing row a merge's DETAIL spells out) rejects that row and writes the
  rows before it as one part and the rows after it in windows (`_around`): a couple of
  statements per bad row, each row sent about twice;
- any other rejected part is split in two halves, each tried again (bisection): one bad
  row among n costs at most 2·log2(n) extra statements.

Only rejections caused by one row are rejected (`ONE_ROW_REJECTIONS`): data exceptions (class
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

from jobs_platform.writer.rejected_value import RejectedValue
from jobs_platform.writer.upsert import UpsertCounts, upsert_frame

__all__ = [
    "ONE_ROW_REJECTIONS",
    "RejectingUpsert",
    "WarehouseReject",
    "caused_by_one_row",
    "upsert_rejecting_rows",
]

# The least rows a part after a bad row holds (`_around`): fewer would cost more statements
# than the rows they save.
WINDOW_ROWS = 1_000
ONE_ROW_CONSTRAINTS = frozenset({"23502", "23503", "23514"})
ONE_ROW_REJECTIONS = "class 22, " + ", ".join(sorted(ONE_ROW_CONSTRAINTS))


def caused_by_one_row(rejection: RejectedValue) -> bool:
    """Whether one row's values caused `rejection` (so rejecting the row can cure it)."""
    sqlstate = rejection.sqlstate or ""
    return sqlstate.startswith("22") or sqlstate in ONE_ROW_CONSTRAINTS


@dataclass(frozen=True)
class WarehouseReject:
    """A row of the chunk the warehouse rejected: its label in the frame, and why."""

    label: object
    reason: str
    column: str | None
    sqlstate: str | None


@dataclass
class RejectingUpsert:
    """What writing a rejected chunk came to: the rows written, and the rows rejected."""

    counts: UpsertCounts = field(default_factory=UpsertCounts)
    rejected: list[WarehouseReject] = field(default_factory=list)
    statements: int = 0  # parts tried: the cost of finding the rejected rows
    stopped_early: bool = False  # more rows were rejected than `most`: the rest untried


def upsert_rejecting_rows(
    connection: sa.Connection,
    table: sa.Table,
    key: Sequence[str],
    frame: pd.DataFrame,
    *,
    most: int | None = None,
    rejected_whole: RejectedValue | None = None,
) -> RejectingUpsert:
    """Merge `frame` into `table` (in the caller's transaction) without the rows it rejects.

    `frame` must have unique labels (the engine labels rows by input row number) and one
    row per key. Once more than `most` rows are rejected, stops (`stopped_early`): the
    caller gives the partition up, and the rest of the chunk is never tried.
    `rejected_whole` is how the plain upsert of the whole `frame` was rejected, when the
    caller tried it: it is not tried again.
    """
    result = RejectingUpsert()
    parts = [frame]  # a stack: the first half is tried before the second
    while parts:
        part = parts.pop()
        if part.empty:
            continue
        try:
            if rejected_whole is not None:
                known, rejected_whole = rejected_whole, None
                raise known
            result.statements += 1
            with connection.begin_nested():
                counts = upsert_frame(connection, table, key, part)
        except RejectedValue as rejection:
            if not caused_by_one_row(rejection):
                raise
            if len(part) == 1 or rejection.label in part.index:
                label = part.index[0] if len(part) == 1 else rejection.label
                result.rejected.append(
                    WarehouseReject(label, rejection.problem, rejection.column, rejection.sqlstate)
                )
                if most is not None and len(result.rejected) > most:
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
    """The parts to try after the row at `position` was rejected, last tried first.

    The rows before it were very likely accepted (a COPY and a merge take their rows in
    order): one part. The rows after it go in windows about twice the distance the bad
    row was found at (at least WINDOW_ROWS): a rejected statement has still sent and
    parsed all its rows, so trying the whole rest again after each bad row would cost
    the chunk once per bad row; windows cost each row about twice however many there are.
    """
    rest = part.iloc[position + 1 :]
    window = max(2 * (position + 1), WINDOW_ROWS)
    windows = [rest.iloc[start : start + window] for start in range(0, len(rest), window)]
    return [*reversed(windows), part.iloc[:position]]
