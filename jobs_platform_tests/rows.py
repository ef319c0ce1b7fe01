"""What a warehouse holds, read for exact comparisons: rows, row versions, attempts."""

from __future__ import annotations

import sqlalchemy as sa


def table_snapshot(engine: sa.Engine, table_name: str) -> list[tuple]:
    """Every row of a table, ordered, for exact comparisons."""
    table = sa.Table(table_name, sa.MetaData(), autoload_with=engine)
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(sa.select(table).order_by(*table.c))]


def row_versions(engine: sa.Engine, table_name: str) -> list[str]:
    """PostgreSQL's xmin of every row: unchanged when no row was rewritten."""
    with engine.connect() as connection:
        xmin = sa.literal_column("xmin::text")
        query = sa.select(xmin).select_from(sa.table(table_name)).order_by(xmin)
        return list(connection.execute(query).scalars())


def declared_rows(
    engine: sa.Engine, table: sa.Table, where: sa.ColumnElement[bool] | None = None
) -> list[tuple]:
    """Rows read through the declared table (so timestamps are UTC-aware on every backend)."""
    query = sa.select(table).order_by(*table.primary_key.columns)
    if where is not None:
        query = query.where(where)
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(query)]


def attempts_of(engine: sa.Engine, asset: str, partition: str) -> list[sa.Row]:
    """The attempt history of one partition, oldest first."""
    from jobs_platform.store.schema import attempts

    with engine.connect() as connection:
        return list(
            connection.execute(
                sa.select(attempts)
                .where(attempts.c.asset == asset, attempts.c.partition == partition)
                .order_by(attempts.c.id)
            )
        )
