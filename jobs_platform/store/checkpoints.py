"""Chunk checkpoints: which chunks of which input a partition has committed.

A checkpoint is written in the same transaction as its chunk's rows, so it exists if and
only if those rows committed. A retry skips a chunk whose checkpoint matches both the
input fingerprint and the chunk's content hash.
"""

from __future__ import annotations

import sqlalchemy as sa

from jobs_platform.store.clock import Clock, now_in_statement
from jobs_platform.store.rows import upsert_row
from jobs_platform.store.schema import checkpoints


def committed_chunks(
    connection: sa.Connection, asset: str, partition: str, fingerprint: str
) -> dict[int, str]:
    """Chunk index → content hash, for the chunks of this input already committed."""
    rows = connection.execute(
        sa.select(checkpoints.c.chunk_index, checkpoints.c.chunk_hash).where(
            checkpoints.c.asset == asset,
            checkpoints.c.partition == partition,
            checkpoints.c.fingerprint == fingerprint,
        )
    )
    return {index: chunk_hash for index, chunk_hash in rows}


class Checkpoints:
    """The chunk checkpoints, stamped on one clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def record_chunk(
        self,
        connection: sa.Connection,
        *,
        asset: str,
        partition: str,
        fingerprint: str,
        chunk_index: int,
        chunk_hash: str,
        row_count: int,
        token: int,
    ) -> None:
        """Upsert the checkpoint of one chunk (inside the chunk's transaction)."""
        upsert_row(
            connection,
            checkpoints,
            {
                "asset": asset,
                "partition": partition,
                "fingerprint": fingerprint,
                "chunk_index": chunk_index,
                "chunk_hash": chunk_hash,
                "row_count": row_count,
                "token": token,
                "committed_at": now_in_statement(self.clock, connection),
            },
            update=("chunk_hash", "row_count", "token", "committed_at"),
        )


def forget_other_inputs(
    connection: sa.Connection, asset: str, partition: str, fingerprint: str
) -> int:
    """Drop checkpoints of any other input: a changed input invalidates them."""
    return _forget(connection, asset, partition, checkpoints.c.fingerprint != fingerprint)


def forget_chunks_from(
    connection: sa.Connection, asset: str, partition: str, first_stale_index: int
) -> int:
    """Drop checkpoints past the input's last chunk (the input got shorter)."""
    return _forget(connection, asset, partition, checkpoints.c.chunk_index >= first_stale_index)


def _forget(
    connection: sa.Connection, asset: str, partition: str, which: sa.ColumnElement[bool]
) -> int:
    """Drop the partition's checkpoints that `which` selects; returns how many."""
    return connection.execute(
        sa.delete(checkpoints).where(
            checkpoints.c.asset == asset, checkpoints.c.partition == partition, which
        )
    ).rowcount
