"""Delete a partition's rows that are no longer in its input."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import sqlalchemy as sa

SWEEP_BATCH = 1000  # keys per DELETE: small enough for any backend's parameter limit


def sweep_partition(
    connection: sa.Connection,
    table: sa.Table,
    key: Sequence[str],
    scope: sa.ColumnElement[bool],
    seen_keys: set,
) -> int:
    """Delete rows in `scope` whose key is not in `seen_keys`; returns how many.

    Idempotency argument: the result depends only on the input's keys, so running it
    again deletes nothing more. It runs in the finalize transaction, after the last
    chunk, so a partition converges to exactly its input.
    """
    key_columns = [table.c[name] for name in key]
    present = connection.execute(sa.select(*key_columns).where(scope))
    if len(key) == 1:
        stale = [row[0] for row in present if row[0] not in seen_keys]
    else:
        stale = [tuple(row) for row in present if tuple(row) not in seen_keys]
    swept = 0
    for batch in _batches(stale, SWEEP_BATCH):
        target = key_columns[0] if len(key) == 1 else sa.tuple_(*key_columns)
        swept += connection.execute(sa.delete(table).where(target.in_(batch))).rowcount
    return swept


def _batches(items: list, size: int) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
