"""Rows a partition rejected under `bad_rows=RejectRows(...)`: their table's SQL.

Idempotency argument: a rejected row is keyed by (asset, partition, input row number), so
a chunk written again after a crash writes its rejects over themselves, never twice. A
chunk's rejects commit in the chunk's own transaction, with its rows and checkpoint; an
attempt first forgets the rejects of every chunk it will write again (`forget_unkept`),
so the rejects of a partition are always those of its latest input.

Values are kept truncated (`shown_values`): enough to find the row in the source, never a
whole payload. Every statement binds its values; none is built from input.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from jobs_platform.store.schema import rejected_rows

__all__ = [
    "SHOWN_COLUMNS",
    "SHOWN_VALUE_CHARS",
    "RejectedRow",
    "chunk_rejects",
    "forget_chunk",
    "forget_unkept",
    "partition_rejects",
    "record_rejects",
    "rejected_count",
    "rejected_counts",
    "shown_values",
]

# A value is kept to this many characters, and a row to this many columns.
SHOWN_VALUE_CHARS = 200
SHOWN_COLUMNS = 50


@dataclass(frozen=True)
class RejectedRow:
    """One input row rejected: where it was, why, and its values (truncated)."""

    row: int  # 1-based position in the partition's input, as the reader yielded it
    reason: str
    column: str | None = None
    sqlstate: str | None = None
    values: Mapping[str, str] | None = None

    def as_json(self) -> dict[str, Any]:
        """The `dead-letter rows --json` shape."""
        return {
            "row": self.row,
            "column": self.column,
            "sqlstate": self.sqlstate,
            "reason": self.reason,
            "values": dict(self.values) if self.values is not None else None,
        }

    def summary(self) -> str:
        """`row 17 (column 'amount', 22003): … out of range …`, for a quarantine message."""
        where = [f"column {self.column!r}"] if self.column else []
        where += [self.sqlstate] if self.sqlstate else []
        return f"row {self.row}" + (f" ({', '.join(where)})" if where else "") + f": {self.reason}"


def shown_values(values: Mapping[str, object] | None) -> dict[str, str] | None:
    """A row's values as text, each cut to SHOWN_VALUE_CHARS, at most SHOWN_COLUMNS of them."""
    if values is None:
        return None
    # A numpy scalar (a DataFrame's value) shows as its Python value. numpy is not imported
    # for this: the CLI's read commands import this module and never need it, and a value
    # cannot be a numpy scalar unless numpy was imported.
    numpy = sys.modules.get("numpy")
    shown = {}
    for name, value in list(values.items())[:SHOWN_COLUMNS]:
        if numpy is not None and isinstance(value, numpy.generic):
            value = value.item()
        text = "null" if value is None else str(value)
        if len(text) > SHOWN_VALUE_CHARS:
            text = text[: SHOWN_VALUE_CHARS - 3] + "..."
        shown[str(name)[:SHOWN_VALUE_CHARS]] = text
    return shown


def record_rejects(
    connection: sa.Connection,
    *,
    asset: str,
    partition: str,
    chunk_index: int,
    rejects: Sequence[RejectedRow],
    at: dt.datetime,
) -> None:
    """Write a chunk's rejects in the caller's transaction (the chunk's), over any earlier."""
    if not rejects:
        return
    insert = (postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert)(
        rejected_rows
    )
    statement = insert.on_conflict_do_update(
        index_elements=["asset", "partition", "row_number"],
        set_={
            name: insert.excluded[name]
            for name in (
                "chunk_index",
                "column_name",
                "sqlstate",
                "reason",
                "row_values",
                "rejected_at",
            )
        },
    )
    connection.execute(
        statement,
        [
            {
                "asset": asset,
                "partition": partition,
                "row_number": reject.row,
                "chunk_index": chunk_index,
                "column_name": reject.column,
                "sqlstate": reject.sqlstate,
                "reason": reject.reason,
                "row_values": json.dumps(reject.values) if reject.values is not None else None,
                "rejected_at": at,
            }
            for reject in rejects
        ],
    )


def forget_unkept(
    connection: sa.Connection, asset: str, partition: str, kept_chunks: Collection[int]
) -> int:
    """Forget the rejects of every chunk but the `kept_chunks` (committed for this input).

    At an attempt's start: the chunks it will write reject their rows again; those of a
    fixed input set none, so a re-run after the fix clears them.
    """
    statement = sa.delete(rejected_rows).where(
        rejected_rows.c.asset == asset, rejected_rows.c.partition == partition
    )
    if kept_chunks:
        statement = statement.where(rejected_rows.c.chunk_index.not_in(sorted(kept_chunks)))
    return connection.execute(statement).rowcount


def forget_chunk(connection: sa.Connection, asset: str, partition: str, chunk_index: int) -> None:
    """Forget one chunk's rejects: it is being written again, and rejects its own."""
    connection.execute(
        sa.delete(rejected_rows).where(
            rejected_rows.c.asset == asset,
            rejected_rows.c.partition == partition,
            rejected_rows.c.chunk_index == chunk_index,
        )
    )


def chunk_rejects(
    connection: sa.Connection, asset: str, partition: str, chunk_index: int
) -> list[RejectedRow]:
    """The rows a committed chunk rejected (a resumed chunk still counts them)."""
    return _rejects_where(
        connection,
        rejected_rows.c.asset == asset,
        rejected_rows.c.partition == partition,
        rejected_rows.c.chunk_index == chunk_index,
    )


def rejected_count(connection: sa.Connection, asset: str, partition: str) -> int:
    """How many rows a partition rejected."""
    count: int = connection.execute(
        sa.select(sa.func.count()).where(
            rejected_rows.c.asset == asset, rejected_rows.c.partition == partition
        )
    ).scalar_one()
    return count


def partition_rejects(
    connection: sa.Connection, asset: str, partition: str, *, limit: int | None = None
) -> list[RejectedRow]:
    """A partition's rejects in input order (the first `limit` of them)."""
    return _rejects_where(
        connection,
        rejected_rows.c.asset == asset,
        rejected_rows.c.partition == partition,
        limit=limit,
    )


def _rejects_where(
    connection: sa.Connection, *conditions: sa.ColumnElement[bool], limit: int | None = None
) -> list[RejectedRow]:
    query = sa.select(rejected_rows).where(*conditions).order_by(rejected_rows.c.row_number)
    return [
        RejectedRow(
            row=row.row_number,
            reason=row.reason,
            column=row.column_name,
            sqlstate=row.sqlstate,
            values=json.loads(row.row_values) if row.row_values is not None else None,
        )
        for row in connection.execute(query.limit(limit))
    ]


def rejected_counts(
    connection: sa.Connection, assets: Collection[str] | None = None
) -> dict[str, int]:
    """Rows rejected per asset (over all its partitions)."""
    query = sa.select(rejected_rows.c.asset, sa.func.count()).group_by(rejected_rows.c.asset)
    if assets is not None:
        query = query.where(rejected_rows.c.asset.in_(sorted(assets)))
    return {asset: count for asset, count in connection.execute(query)}
