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

from jobs_platform.store.partitions import PartitionStatus
from jobs_platform.store.schema import (
    UtcDateTime,
    partitions,
    reject_history,
    rejected_rows,
)

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
    version: str = "",
) -> None:
    """Write a chunk's rejects in the caller's transaction (the chunk's), over any earlier;
    `version` is the backfill's code_version, which a new one replays (`rejects_replayed`)."""
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
                "code_version",
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
                "code_version": version or None,
            }
            for reject in rejects
        ],
    )


@dataclass(frozen=True)
class Clearing:
    """Who clears rejects: the backfill's code_version and the time, kept in each journey."""

    version: str
    at: dt.datetime | sa.ColumnElement[dt.datetime]  # a time, or one a statement reads


def forget_unkept(
    connection: sa.Connection,
    asset: str,
    partition: str,
    kept_chunks: Collection[int],
    clearing: Clearing | None = None,
) -> int:
    """Forget the rejects of every chunk but the `kept_chunks` (committed for this input).

    At an attempt's start: the chunks it will write reject their rows again; those of a
    fixed input set none, so a re-run after the fix clears them. Each cleared row's journey
    is kept (`jp_reject_history`) when `clearing` says by whom.
    """
    conditions = [rejected_rows.c.asset == asset, rejected_rows.c.partition == partition]
    if kept_chunks:
        conditions.append(rejected_rows.c.chunk_index.not_in(sorted(kept_chunks)))
    return _clear(connection, conditions, clearing)


def forget_chunk(
    connection: sa.Connection,
    asset: str,
    partition: str,
    chunk_index: int,
    clearing: Clearing | None = None,
) -> None:
    """Forget one chunk's rejects: it is being written again, and rejects its own."""
    conditions = [
        rejected_rows.c.asset == asset,
        rejected_rows.c.partition == partition,
        rejected_rows.c.chunk_index == chunk_index,
    ]
    _clear(connection, conditions, clearing)


def _clear(
    connection: sa.Connection,
    conditions: Sequence[sa.ColumnElement[bool]],
    clearing: Clearing | None,
) -> int:
    """Delete the rejects `conditions` select; first, in the same transaction, the journey
    of each that another code version than the one that rejected it reads again."""
    if clearing is not None:
        connection.execute(
            sa.insert(reject_history).from_select(
                [
                    "asset",
                    "partition",
                    "row_number",
                    "reason",
                    "rejected_version",
                    "rejected_at",
                    "cleared_version",
                    "cleared_at",
                ],
                sa.select(
                    rejected_rows.c.asset,
                    rejected_rows.c.partition,
                    rejected_rows.c.row_number,
                    rejected_rows.c.reason,
                    rejected_rows.c.code_version,
                    rejected_rows.c.rejected_at,
                    sa.literal(clearing.version or None, sa.String),
                    _stamp(clearing.at),
                ).where(
                    *conditions,
                    # Read again by the version that rejected it: the same verdict, no journey.
                    rejected_rows.c.code_version.is_distinct_from(clearing.version or None),
                ),
            )
        )
    deleted: int = connection.execute(sa.delete(rejected_rows).where(*conditions)).rowcount
    return deleted


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


def partitions_to_replay(
    connection: sa.Connection, asset: str, version: str, *, limit: int
) -> list[str]:
    """Done partitions of `asset` holding rows another code version rejected, first by key.

    What a new `code_version` replays (`rejects_replayed`): the rows its fixed rules may
    accept. A reject with no recorded version (kept before migration 0012, or by a backfill
    without `code_version`) is not judged by version, as the redrive does not judge an
    entry without one.
    """
    if not version:
        return []
    done = sa.exists().where(
        partitions.c.asset == rejected_rows.c.asset,
        partitions.c.partition == rejected_rows.c.partition,
        partitions.c.status == str(PartitionStatus.DONE),
    )
    query = (
        sa.select(rejected_rows.c.partition)
        .where(
            rejected_rows.c.asset == asset,
            rejected_rows.c.code_version.is_not(None),
            rejected_rows.c.code_version != version,
            done,
        )
        .group_by(rejected_rows.c.partition)
        .order_by(rejected_rows.c.partition)
        .limit(limit)
    )
    return list(connection.execute(query).scalars())


@dataclass(frozen=True)
class RejectReason:
    """The rows of a backfill still rejected for one reason."""

    reason: str
    column: str | None
    sqlstate: str | None
    rows: int
    partitions: int
    versions: tuple[str, ...]  # the code versions that rejected them

    def as_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "column": self.column,
            "sqlstate": self.sqlstate,
            "rows": self.rows,
            "partitions": self.partitions,
            "versions": list(self.versions),
        }


def rejects_by_reason(connection: sa.Connection, asset: str) -> list[RejectReason]:
    """The rows of `asset` still rejected, per reason, most rows first."""
    grouped = [rejected_rows.c.reason, rejected_rows.c.column_name, rejected_rows.c.sqlstate]
    rows = connection.execute(
        sa.select(
            *grouped,
            sa.func.count(),
            sa.func.count(sa.distinct(rejected_rows.c.partition)),
        )
        .where(rejected_rows.c.asset == asset)
        .group_by(*grouped)
        .order_by(sa.func.count().desc(), rejected_rows.c.reason)
    ).all()
    versions: dict[tuple[Any, ...], set[str]] = {}
    for row in connection.execute(
        sa.select(*grouped, rejected_rows.c.code_version)
        .where(rejected_rows.c.asset == asset)
        .distinct()
    ):
        versions.setdefault((row.reason, row.column_name, row.sqlstate), set()).add(
            row.code_version or ""
        )
    return [
        RejectReason(
            reason=row[0],
            column=row[1],
            sqlstate=row[2],
            rows=row[3],
            partitions=row[4],
            versions=tuple(sorted(versions.get((row[0], row[1], row[2]), ()))),
        )
        for row in rows
    ]


def reject_journeys(connection: sa.Connection, asset: str, partition: str) -> list[dict[str, Any]]:
    """Each row of the partition a later code version read again after rejecting it: the
    version that rejected it and why, the version that read it again, and whether it is
    rejected now (`still_rejected`), by row number then time."""
    still = {
        row
        for row in connection.execute(
            sa.select(rejected_rows.c.row_number).where(
                rejected_rows.c.asset == asset, rejected_rows.c.partition == partition
            )
        ).scalars()
    }
    history = connection.execute(
        sa.select(reject_history)
        .where(reject_history.c.asset == asset, reject_history.c.partition == partition)
        .order_by(reject_history.c.row_number, reject_history.c.id)
    )
    return [
        {
            "row": entry.row_number,
            "reason": entry.reason,
            "rejected_version": entry.rejected_version,
            "rejected_at": entry.rejected_at.isoformat(),
            "read_again_version": entry.cleared_version,
            "read_again_at": entry.cleared_at.isoformat(),
            "still_rejected": entry.row_number in still,
        }
        for entry in history
    ]


def _stamp(at: dt.datetime | sa.ColumnElement[dt.datetime]) -> sa.ColumnElement[dt.datetime]:
    return at if isinstance(at, sa.ColumnElement) else sa.literal(at, UtcDateTime)
