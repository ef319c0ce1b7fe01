"""Delete a partition's rows that are no longer in its input.

The keys an attempt has read are kept in the warehouse, not in the worker: a temporary
table on the attempt's own connection (`SeenKeys`), filled chunk by chunk. A worker's
memory is then bounded by the chunk, not by the partition (a Python set of 20 million
keys alone is over 1 GiB), and the sweep is one set-based DELETE that returns no keys.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pandas as pd
import sqlalchemy as sa

from jobs_platform.store.schema import STAGE_PREFIX
from jobs_platform.writer.rejected_value import RejectedValue
from jobs_platform.writer.upsert import insert_frame

SWEEP_BATCH = 1000  # keys per INSERT when seen keys are handed over as a collection
# A stage table by name: like the upsert's stages it is TEMPORARY, per connection, and no
# part of the warehouse's schema (no migration, no DDL on the schema).
SEEN_KEYS_TABLE = f"{STAGE_PREFIX}seen_keys"
# A connection's table is kept for its next attempt, which empties it with a DELETE,
# until this many keys went through it; then it is dropped (DROP frees its space at once,
# and a temporary table is never vacuumed). Creating and dropping it per attempt were two
# transactions writing the catalog, each waiting for a WAL flush: for partitions of a few
# rows they cost as much as the rows. A DELETE of a temporary table writes no WAL, so its
# commit waits for no flush.
RECYCLE_MAX_KEYS = 100_000
# In the DBAPI connection's `info` (it lives as long as the connection, and so does the
# table): the columns of the table this connection holds, and the keys it took so far.
_KEPT = "jp_seen_keys_kept"


class SeenKeys:
    """The keys of the input read so far, in a TEMPORARY table on one connection.

    A temporary table lives as long as its connection, across transactions: every chunk
    transaction and the finalize transaction of the attempt must use `connection`. A
    crashed worker's table goes with its connection; the next attempt reads the whole
    input again (committed chunks included), so it fills its own table from scratch.
    """

    def __init__(self, connection: sa.Connection, table: sa.Table, key: Sequence[str]):
        self.connection = connection
        self.key = tuple(key)
        self.chunks_added = 0  # the attempt's chunks so far, written or resumed
        self.keys_added = 0
        # Keys repeat across chunks (the last line wins); duplicates are harmless here,
        # so there is no unique constraint to trip over, and no index: PostgreSQL
        # anti-joins by hash (none to maintain on 20 million inserts) and SQLite builds an
        # automatic index for the DELETE's subquery.
        self.table = sa.Table(
            SEEN_KEYS_TABLE,
            sa.MetaData(),
            *[sa.Column(name, table.c[name].type) for name in self.key],
            prefixes=["TEMPORARY"],
        )

        # What a kept table must match to be reused: its columns and their types.
        self._columns = tuple((column.name, repr(column.type)) for column in self.table.columns)

    def create(self) -> None:
        """An empty table: the connection's kept one emptied, else a new one."""
        kept = self.connection.info.get(_KEPT)
        if kept is not None and kept[0] == self._columns:
            try:
                with self.connection.begin():
                    self.connection.execute(sa.delete(self.table))
                return
            except sa.exc.DBAPIError:
                # Gone with the session's temporary tables (DISCARD TEMP): made again.
                self.connection.info.pop(_KEPT, None)
        self.connection.info.pop(_KEPT, None)
        with self.connection.begin():
            self.table.drop(self.connection, checkfirst=True)
            self.table.create(self.connection)
        self.connection.info[_KEPT] = (self._columns, 0)

    def release(self) -> None:
        """After a successful attempt: kept for the connection's next attempt (which
        empties it), or dropped once RECYCLE_MAX_KEYS keys went through it."""
        kept = self.connection.info.get(_KEPT)
        through = (kept[1] if kept is not None else 0) + self.keys_added
        if kept is None or kept[0] != self._columns or through > RECYCLE_MAX_KEYS:
            self.drop()
            return
        self.connection.info[_KEPT] = (self._columns, through)

    def add(self, frame: pd.DataFrame) -> None:
        """Record the next chunk's keys (inside the caller's transaction on `connection`)."""
        self.chunks_added += 1
        self.keys_added += len(frame)
        try:
            insert_frame(self.connection, self.table, frame[list(self.key)])
        except RejectedValue as rejected:
            raise rejected.in_chunk(self.chunks_added - 1) from rejected.__cause__

    def add_values(self, keys: Iterable[Any]) -> None:
        """Record keys as values: each one column's value, or a tuple of them for a compound key."""
        values = list(keys)
        self.keys_added += len(values)
        for start in range(0, len(values), SWEEP_BATCH):
            batch = values[start : start + SWEEP_BATCH]
            if len(self.key) == 1:
                rows = [{self.key[0]: value} for value in batch]
            else:
                rows = [dict(zip(self.key, value, strict=True)) for value in batch]
            self.connection.execute(sa.insert(self.table), rows)

    def drop(self) -> None:
        """Drop the table now; a connection that cannot is discarded, and the table with it."""
        self.connection.info.pop(_KEPT, None)
        try:
            if self.connection.in_transaction():
                self.connection.rollback()
            with self.connection.begin():
                self.table.drop(self.connection, checkfirst=True)
        except sa.exc.SQLAlchemyError:
            self.connection.invalidate()


@contextmanager
def seen_keys_on(
    connection: sa.Connection, table: sa.Table, key: Sequence[str]
) -> Iterator[SeenKeys]:
    """A fresh, empty `SeenKeys` on `connection`; on the way out dropped, or, when the
    block ended without an error, kept for the connection's next attempt (`release`).

    Every chunk's keys are added before the chunk is written, so a value rejected inside
    the block belongs to the last chunk added: the rejection is raised naming it.
    """
    seen = SeenKeys(connection, table, key)
    seen.create()
    try:
        yield seen
    except RejectedValue as rejected:
        seen.drop()
        if rejected.chunk is not None or not seen.chunks_added:
            raise
        raise rejected.in_chunk(seen.chunks_added - 1) from rejected.__cause__
    except BaseException:
        seen.drop()
        raise
    seen.release()


def sweep_partition(
    connection: sa.Connection,
    table: sa.Table,
    key: Sequence[str],
    scope: sa.ColumnElement[bool],
    seen_keys: SeenKeys | Collection[Any],
) -> int:
    """Delete rows in `scope` whose key is not in `seen_keys`; returns how many.

    Idempotency argument: the result depends only on the input's keys, so running it
    again deletes nothing more. It runs in the finalize transaction, after the last
    chunk, so a partition converges to exactly its input. Given a plain collection, the
    keys are put in a temporary table of this connection first, and the same DELETE runs.
    """
    if isinstance(seen_keys, SeenKeys):
        return _delete_unseen(connection, table, scope, seen_keys)
    connection.info.pop(_KEPT, None)  # the connection's kept table is replaced, then dropped
    seen = SeenKeys(connection, table, key)
    seen.table.drop(connection, checkfirst=True)
    seen.table.create(connection)
    try:
        seen.add_values(seen_keys)
        return _delete_unseen(connection, table, scope, seen)
    finally:
        seen.table.drop(connection)


def _delete_unseen(
    connection: sa.Connection,
    table: sa.Table,
    scope: sa.ColumnElement[bool],
    seen: SeenKeys,
) -> int:
    """One DELETE of the rows in `scope` with no match among the seen keys."""
    if connection.dialect.name == "postgresql":
        # Temporary tables are never analysed automatically; without statistics the
        # planner may probe the whole table once per row instead of one hash anti-join.
        connection.execute(sa.text(f"ANALYZE {SEEN_KEYS_TABLE}"))
    match = sa.and_(*[seen.table.c[name] == table.c[name] for name in seen.key])
    unseen = ~sa.exists().where(match)
    return connection.execute(
        sa.delete(table).where(scope, unseen), execution_options={"preserve_rowcount": True}
    ).rowcount
