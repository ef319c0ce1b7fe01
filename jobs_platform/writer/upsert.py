"""Upsert a DataFrame chunk into a target table, writing only the rows that changed.

Idempotency argument: every row is keyed on the table's natural key and merged with
`INSERT … ON CONFLICT (key) DO UPDATE … WHERE the row differs`. Writing the same chunk
twice leaves the same rows and, the second time, touches none of them (no new row
versions on PostgreSQL). Nothing is appended blindly and nothing is incremented.

Both backends stage the chunk in a temporary table first and merge from it in one
statement: PostgreSQL fills the stage with COPY (the bulk path), SQLite with an
executemany. Callers only ever hand over a DataFrame.

PostgreSQL paths, fastest first (figures and how they were measured: docs/BENCHMARKS.md):
- a chunk of integer keys whose range holds no row yet (a first backfill) is copied
  straight into the table, as fast as a plain COPY (no key exists: none is duplicated);
- otherwise the merge skips rows equal to the stored ones without locking them when a
  sample of the chunk says most are unchanged (a re-run), merges every row when most
  changed, and reports its inserted/updated split itself, without a second pass over the stage;
- the COPY goes binary, column-wise text or row by row, whichever the chunk allows
  (`writer.copy`).

A value the warehouse rejects raises `RejectedValue` (`writer.rejected_value`), naming
its row in the caller's frame, its column and the value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from jobs_platform.store.schema import STAGE_PREFIX
from jobs_platform.writer.copy import copied_as_new_rows, copy_into, python_values
from jobs_platform.writer.rejected_value import naming_rejected_values

__all__ = ["UpsertCounts", "insert_frame", "last_row_per_key", "upsert_frame"]

# Staged rows probed to decide whether filtering out unchanged rows pays (`_mostly_unchanged`).
SAMPLE_ROWS = 200


@dataclass(frozen=True)
class UpsertCounts:
    """What one upsert did to the target table."""

    inserted: int = 0
    updated: int = 0
    unchanged: int = 0

    def __add__(self, other: UpsertCounts) -> UpsertCounts:
        return UpsertCounts(
            self.inserted + other.inserted,
            self.updated + other.updated,
            self.unchanged + other.unchanged,
        )

    @property
    def written(self) -> int:
        return self.inserted + self.updated


def last_row_per_key(frame: pd.DataFrame, key: Sequence[str]) -> pd.DataFrame:
    """Keep the last row of each key: a later line of the input overrides an earlier one.

    One merge statement may not touch the same key twice (PostgreSQL rejects), and the
    contract is that the last occurrence wins.
    """
    return frame.drop_duplicates(subset=list(key), keep="last")


def upsert_frame(
    connection: sa.Connection, table: sa.Table, key: Sequence[str], frame: pd.DataFrame
) -> UpsertCounts:
    """Merge `frame` into `table` inside the caller's transaction."""
    _check_columns(table, key, frame)
    frame = last_row_per_key(frame, key)
    if frame.empty:
        return UpsertCounts()
    frame = _whole_numbers_as_integers(table, frame)
    with naming_rejected_values(connection, table, frame):
        return _upsert(connection, table, key, frame)


def _upsert(
    connection: sa.Connection, table: sa.Table, key: Sequence[str], frame: pd.DataFrame
) -> UpsertCounts:
    columns = [column.name for column in table.columns if column.name in frame.columns]
    dialect = connection.dialect.name
    if dialect == "postgresql" and copied_as_new_rows(connection, table, key, columns, frame):
        return UpsertCounts(inserted=len(frame))
    stage = _stage_table(table, columns)
    stage.create(connection)
    try:
        if dialect == "postgresql":
            copy_into(connection, stage, columns, frame)
        else:
            connection.execute(stage.insert(), _records(frame, columns))
        counts = _merge_from_stage(connection, table, stage, key, columns, len(frame))
    except BaseException:
        if dialect != "postgresql":  # PostgreSQL's failed transaction drops it on rollback
            stage.drop(connection)
        raise
    # Dropped now, not at commit (ON COMMIT DROP), so that one transaction may upsert
    # into the same table again.
    stage.drop(connection)
    return counts


def insert_frame(connection: sa.Connection, table: sa.Table, frame: pd.DataFrame) -> None:
    """Append `frame` to `table` as it is (COPY on PostgreSQL), in the caller's transaction.

    Not an upsert: only for tables that take duplicates, such as an attempt's own
    temporary table of seen keys.
    """
    if frame.empty:
        return
    frame = _whole_numbers_as_integers(table, frame)
    columns = list(frame.columns)
    with naming_rejected_values(connection, table, frame):
        if connection.dialect.name == "postgresql":
            copy_into(connection, table, columns, frame)
        else:
            connection.execute(table.insert(), _records(frame, columns))


def _check_columns(table: sa.Table, key: Sequence[str], frame: pd.DataFrame) -> None:
    missing_key = [name for name in key if name not in frame.columns]
    if missing_key:
        raise ValueError(f"chunk for {table.name} lacks key column(s) {missing_key}")
    unknown = [name for name in frame.columns if name not in table.columns]
    if unknown:
        raise ValueError(f"chunk for {table.name} has columns not in the table: {unknown}")


def _stage_table(table: sa.Table, columns: Sequence[str]) -> sa.Table:
    return sa.Table(
        f"{STAGE_PREFIX}{table.name}",
        sa.MetaData(),
        *[sa.Column(name, table.c[name].type) for name in columns],
        prefixes=["TEMPORARY"],
        postgresql_on_commit="DROP",
    )


def _records(frame: pd.DataFrame, columns: Sequence[str]) -> list[dict[str, object]]:
    values = python_values(frame[list(columns)])
    return [dict(zip(columns, row, strict=True)) for row in values]


def _whole_numbers_as_integers(table: sa.Table, frame: pd.DataFrame) -> pd.DataFrame:
    """Integer columns with a missing value arrive from pandas as floats (7.0, NaN).

    SQLite stores 7.0 as 7, but COPY rejects "7.0" for an integer column: send integers.
    Values that are not whole numbers are left for the database to reject.
    """
    whole = {}
    for name in frame.columns:
        if isinstance(table.c[name].type, sa.Integer) and pd.api.types.is_float_dtype(
            frame[name].dtype
        ):
            try:
                whole[name] = frame[name].astype("Int64")
            except (TypeError, ValueError, OverflowError):
                continue
    return frame.assign(**whole) if whole else frame


def _merge_from_stage(
    connection: sa.Connection,
    table: sa.Table,
    stage: sa.Table,
    key: Sequence[str],
    columns: Sequence[str],
    row_count: int,
) -> UpsertCounts:
    postgres = connection.dialect.name == "postgresql"
    insert = (postgresql.insert if postgres else sqlite.insert)(table)
    # `WHERE true` keeps SQLite from reading ON CONFLICT as part of the SELECT.
    source = sa.select(*[stage.c[name] for name in columns]).where(sa.true())
    value_columns = [name for name in columns if name not in key]
    if postgres:
        # A merge of a chunk is short work over indexes: compiling it (JIT, on by default
        # from PostgreSQL 12 above a plan cost a 50,000-row chunk reaches) costs ~20 ms a
        # chunk and saves nothing here.
        connection.execute(sa.text("SET LOCAL jit = off"))
    if (
        postgres
        and value_columns
        and _mostly_unchanged(connection, table, stage, key, value_columns)
    ):
        source = source.where(_differs_from_stored(table, stage, key, value_columns))
    statement = insert.from_select(list(columns), source)
    if value_columns:
        statement = statement.on_conflict_do_update(
            index_elements=list(key),
            set_={name: statement.excluded[name] for name in value_columns},
            # Only rows whose values differ are rewritten: an unchanged re-run
            # creates no new row versions.
            where=sa.or_(
                *[
                    table.c[name].is_distinct_from(statement.excluded[name])
                    for name in value_columns
                ]
            ),
        )
    else:
        statement = statement.on_conflict_do_nothing(index_elements=list(key))
    if postgres:
        inserted, written = _merge_counting_inserts(connection, statement)
    else:
        # Counted before the merge writes: the staged keys already in the table.
        join_on = sa.and_(*[table.c[name] == stage.c[name] for name in key])
        existing: int = connection.execute(
            sa.select(sa.func.count()).select_from(stage.join(table, join_on))
        ).scalar_one()
        written = connection.execute(
            statement, execution_options={"preserve_rowcount": True}
        ).rowcount
        inserted = row_count - existing
    updated = written - inserted
    return UpsertCounts(inserted=inserted, updated=updated, unchanged=row_count - written)


def _mostly_unchanged(
    connection: sa.Connection,
    table: sa.Table,
    stage: sa.Table,
    key: Sequence[str],
    value_columns: Sequence[str],
) -> bool:
    """Whether the staged rows look mostly equal to the stored ones, judged on a sample.

    The filter of unchanged rows (`_differs_from_stored`) costs a probe per staged row
    (about a third of the merge when every row changed) and pays only for the rows it
    filters out. The first `SAMPLE_ROWS` staged rows decide: with at least half of them
    unchanged, filter; else merge every row (ON CONFLICT's own WHERE still leaves an
    unchanged row without a new version). A wrong guess costs time, never correctness.
    """
    sample = sa.select(stage).limit(SAMPLE_ROWS).subquery("sample")
    sampled, changed = connection.execute(
        sa.select(
            sa.func.count(),
            sa.func.count().filter(_differs_from_stored(table, sample, key, value_columns)),
        ).select_from(sample)
    ).one()
    return bool(changed * 2 <= sampled)


def _differs_from_stored(
    table: sa.Table,
    stage: sa.FromClause,
    key: Sequence[str],
    value_columns: Sequence[str],
) -> sa.ColumnElement[bool]:
    """Staged rows that are new or changed, found by one index probe each.

    ON CONFLICT alone would reach the same rows, but it locks every existing row it
    meets, changed or not: an unchanged re-run then writes a WAL record per row (about
    55 MB per 400,000 rows here) and dirties every page. Rows filtered out here are
    only read. A correlated scalar subquery, not a join, so that the plan stays one
    probe per staged row whatever the table's size or statistics.
    """
    stored = table.alias("stored")
    # The leading `true` tells "no stored row" (the subquery is NULL) from a stored row
    # whose values are all NULL.
    stored_values = (
        sa.select(sa.tuple_(sa.true(), *[stored.c[name] for name in value_columns]))
        .where(*[stored.c[name] == stage.c[name] for name in key])
        .scalar_subquery()
    )
    staged_values = sa.tuple_(sa.true(), *[stage.c[name] for name in value_columns])
    return stored_values.is_distinct_from(staged_values)


def _merge_counting_inserts(connection: sa.Connection, statement: sa.Insert) -> tuple[int, int]:
    """Run the merge; (rows inserted, rows written) as PostgreSQL saw them.

    A row the merge inserted has no xmax; a row it updated carries the lock ON CONFLICT
    took on it. Reading that from RETURNING replaces a join of the stage against the
    table that cost a third of the merge (and could turn into a scan of the whole table).
    """
    merged = statement.returning(sa.literal_column("xmax = 0").label("inserted")).cte("merged")
    inserted, written = connection.execute(
        sa.select(
            sa.func.count().filter(merged.c.inserted),
            sa.func.count(),
        ).select_from(merged)
    ).one()
    return inserted, written
