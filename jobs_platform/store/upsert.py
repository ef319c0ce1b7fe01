"""Upsert a DataFrame chunk into a target table, writing only the rows that changed.

Idempotency argument: every row is keyed on the table's natural key and merged with
`INSERT … ON CONFLICT (key) DO UPDATE … WHERE the row differs`. Writing the same chunk
twice leaves the same rows and, the second time, touches none of them (no new row
versions on PostgreSQL). Nothing is appended blindly and nothing is incremented.

Both backends stage the chunk in a temporary table first and merge from it in one
statement: PostgreSQL fills the stage with COPY (the bulk path), SQLite with an
executemany. Callers only ever hand over a DataFrame.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite


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

    One merge statement may not touch the same key twice (PostgreSQL refuses), and the
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
    columns = [column.name for column in table.columns if column.name in frame.columns]
    stage = _stage_table(table, columns)
    dialect = connection.dialect.name
    stage.create(connection)
    try:
        if dialect == "postgresql":
            _copy_into(connection, stage, columns, frame)
        else:
            connection.execute(stage.insert(), _records(frame, columns))
        return _merge_from_stage(connection, table, stage, key, columns, len(frame))
    finally:
        if dialect != "postgresql":  # PostgreSQL drops it at commit (ON COMMIT DROP)
            stage.drop(connection)


def _check_columns(table: sa.Table, key: Sequence[str], frame: pd.DataFrame) -> None:
    missing_key = [name for name in key if name not in frame.columns]
    if missing_key:
        raise ValueError(f"chunk for {table.name} lacks key column(s) {missing_key}")
    unknown = [name for name in frame.columns if name not in table.columns]
    if unknown:
        raise ValueError(f"chunk for {table.name} has columns not in the table: {unknown}")


def _stage_table(table: sa.Table, columns: Sequence[str]) -> sa.Table:
    return sa.Table(
        f"jp_stage_{table.name}",
        sa.MetaData(),
        *[sa.Column(name, table.c[name].type) for name in columns],
        prefixes=["TEMPORARY"],
        postgresql_on_commit="DROP",
    )


def _records(frame: pd.DataFrame, columns: Sequence[str]) -> list[dict]:
    values = _python_values(frame[list(columns)])
    return [dict(zip(columns, row, strict=True)) for row in values]


def _python_values(frame: pd.DataFrame) -> list[tuple]:
    """Rows as tuples of plain Python values, missing values as None."""
    if frame.isna().to_numpy().any():
        frame = frame.astype(object).where(frame.notna(), None)
    return list(frame.itertuples(index=False, name=None))


def _copy_into(
    connection: sa.Connection, stage: sa.Table, columns: Sequence[str], frame: pd.DataFrame
) -> None:
    from psycopg import sql

    copy_statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(stage.name), sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    )
    driver_connection = connection.connection.driver_connection
    with driver_connection.cursor() as cursor, cursor.copy(copy_statement) as copy:
        for row in _python_values(frame[list(columns)]):
            copy.write_row(row)


def _merge_from_stage(
    connection: sa.Connection,
    table: sa.Table,
    stage: sa.Table,
    key: Sequence[str],
    columns: Sequence[str],
    row_count: int,
) -> UpsertCounts:
    join_on = sa.and_(*[table.c[name] == stage.c[name] for name in key])
    existing = connection.execute(
        sa.select(sa.func.count()).select_from(stage.join(table, join_on))
    ).scalar_one()

    insert = (postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert)(
        table
    )
    # `WHERE true` keeps SQLite from reading ON CONFLICT as part of the SELECT.
    source = sa.select(*[stage.c[name] for name in columns]).where(sa.true())
    value_columns = [name for name in columns if name not in key]
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
    # SQLAlchemy 2.1 drops an INSERT's rowcount on PostgreSQL (-1) unless asked to keep it.
    written = connection.execute(statement, execution_options={"preserve_rowcount": True}).rowcount
    inserted = row_count - existing
    updated = written - inserted
    return UpsertCounts(inserted=inserted, updated=updated, unchanged=existing - updated)
