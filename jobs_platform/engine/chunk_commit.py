"""One chunk's commit: its rows, its rejects, its checkpoint and the fence, ONE transaction.

Safety argument: the rows of a chunk, the rows it set aside (`bad_rows=RejectRows(...)`),
its checkpoint and the lease check commit together or not at all, so a crash leaves both
or neither, and a retry that skips the chunk (same content) finds its rejects standing.
Under the policy a chunk the warehouse refused is rolled back whole by the caller and
written here again, in a new transaction, without the rows it refuses
(`writer.set_aside`): a chunk with no bad row is written exactly as without the policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import sqlalchemy as sa

from jobs_platform.engine.attempt import StartedAttempt, Workplace
from jobs_platform.engine.bad_rows import RowsSetAside
from jobs_platform.writer.refused_value import RefusedValue
from jobs_platform.writer.set_aside import upsert_setting_aside
from jobs_platform.writer.sweep import SeenKeys
from jobs_platform.writer.upsert import UpsertCounts, upsert_frame

__all__ = ["ChunkWrite", "commit_chunk", "commit_trailing_rejects"]


@dataclass(frozen=True)
class ChunkWrite:
    """One chunk to commit, and what its checkpoint records."""

    attempt: StartedAttempt
    fingerprint: str
    index: int
    chunk: pd.DataFrame
    chunk_hash: str
    seen_keys: SeenKeys


def commit_chunk(
    place: Workplace,
    write: ChunkWrite,
    aside: RowsSetAside | None,
    *,
    written_before: bool,
    before_commit: Callable[[], None],
    refused: RefusedValue | None = None,
) -> UpsertCounts:
    """ONE transaction: the chunk's rows, its rejects, its checkpoint, the fence.

    `refused`: how the warehouse refused the plain upsert of this chunk (rolled back); the
    chunk is then written without the rows it refuses, which `aside` keeps.
    """
    spec, connection, attempt = place.spec, write.seen_keys.connection, write.attempt
    chunk = write.chunk
    with connection.begin():
        if refused is not None and aside is not None:
            result = upsert_setting_aside(
                connection, spec.table, spec.key, chunk, most=aside.room(), refused_whole=refused
            )
            aside.refused_by_warehouse(chunk, result.refused)  # past max_rows: raises
            set_aside = [row.label for row in result.refused]
            # Rows set aside were not written: their keys are not seen (a stale stored
            # version of one is swept at finalize: the partition converges to its input).
            write.seen_keys.add(chunk.drop(index=set_aside))
            counts = result.counts
            attempt.trail.log.info(
                "%s/%s chunk %d: %d rows set aside, found in %d statements",
                spec.asset,
                attempt.partition,
                write.index,
                len(set_aside),
                result.statements,
            )
        else:
            write.seen_keys.add(chunk)
            counts = upsert_frame(connection, spec.table, spec.key, chunk)
        if aside is not None and (aside.pending or written_before):
            now = place.store.now(connection)
            aside.write(connection, write.index, written_before=written_before, at=now)
        place.store.record_chunk(
            connection,
            asset=spec.asset,
            partition=attempt.partition,
            fingerprint=write.fingerprint,
            chunk_index=write.index,
            chunk_hash=write.chunk_hash,
            row_count=len(chunk),
            token=attempt.lease.token,
        )
        before_commit()
        place.store.fence(connection, attempt.lease, place.settings.lease_seconds)
    if aside is not None:
        aside.committed()
    return counts


def commit_trailing_rejects(
    place: Workplace,
    aside: RowsSetAside,
    attempt: StartedAttempt,
    connection: sa.Connection,
    chunks: int,
) -> None:
    """Rows the reader refused after its last chunk: kept as a chunk of their own, fenced."""
    if not aside.trailing():
        return
    with connection.begin():
        now = place.store.now(connection)
        aside.write(connection, chunks, written_before=False, at=now)
        place.store.fence(connection, attempt.lease, place.settings.lease_seconds)
    aside.committed()
