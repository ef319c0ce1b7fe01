"""Writing one of the framework's own rows by its key: `INSERT … ON CONFLICT`.

Checkpoints, partition states, leases, quarantine entries and alert deliveries are each
one row per key that any worker, hook or sensor may write first. One statement that
inserts or, on a conflict, updates (or leaves alone) the row needs no read before the
write and cannot lose a race to a concurrent insert, on either backend. A user's rows are
written by `writer.upsert` (staged, in bulk) instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

# A row read through SQLAlchemy Core from the framework's tables: the tables are plain
# `sa.Table`s, so a row's columns (by name or position) are untyped.
TableRow: TypeAlias = "sa.Row[*tuple[Any, ...]]"

_INSERTS: dict[str, Callable[[sa.Table], Any]] = {
    "postgresql": postgresql.insert,
    "sqlite": sqlite.insert,
}


def upsert_row(
    connection: sa.Connection,
    table: sa.Table,
    row: Mapping[str, Any],
    *,
    update: Sequence[str] = (),
    key: Sequence[str] | None = None,
    returning: Sequence[sa.ColumnElement[Any]] = (),
) -> TableRow | None:
    """Insert `row`; when a row with its `key` exists, set only its `update` columns.

    `key` is the primary key unless named (a unique constraint's columns); without
    `update` an existing row is left as it is. Returns the `returning` columns (the key's
    by default) of the row inserted or updated, or None when an existing row was left alone.
    """
    try:
        insert = _INSERTS[connection.dialect.name]
    except KeyError:
        raise NotImplementedError(
            f"the framework's tables live in PostgreSQL or SQLite, not {connection.dialect.name}"
        ) from None
    conflict = list(key) if key is not None else [column.name for column in table.primary_key]
    statement = insert(table).values(dict(row))
    if update:
        statement = statement.on_conflict_do_update(
            index_elements=conflict,
            set_={name: statement.excluded[name] for name in update},
        )
    else:
        statement = statement.on_conflict_do_nothing(index_elements=conflict)
    returned = list(returning) or [table.c[name] for name in conflict]
    return connection.execute(statement.returning(*returned)).first()
