"""One chunk's commit: its rows, its rejects, its checkpoint and the fence, ONE transaction.

Safety argument: the rows of a chunk, the rows it rejected (`bad_rows=RejectRows(...)`),
its checkpoint and the lease check commit together or not at all, so a crash leaves both
or neither, and a retry that skips the chunk (same content) finds its rejects standing.
A chunk the warehouse rejected is rolled back whole by the caller; if the bad rows
strategy takes it (`BadRows.rejects`), it is written here again, in a new transaction,
without the rows the warehouse rejects: a chunk with no bad row is written exactly as
without the policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from jobs_platform.engine.attempt import StartedAttempt, Workplace
from jobs_platform.engine.spec import PartitionInput
from jobs_platform.errors import TerminalError
from jobs_platform.gate.stage import PartitionStage
from jobs_platform.writer.bad_rows import FAIL_ON_BAD_ROW, BadRows
from jobs_platform.writer.rejected_value import RejectedValue
from jobs_platform.writer.rejecting import RejectingRows
from jobs_platform.writer.sweep import SeenKeys
from jobs_platform.writer.upsert import UpsertCounts, upsert_frame

__all__ = ["ChunkWrite", "bad_rows_for", "commit_chunk"]


@dataclass(frozen=True)
class ChunkWrite:
    """One chunk to commit, and what its checkpoint records."""

    attempt: StartedAttempt
    fingerprint: str
    index: int
    chunk: pd.DataFrame
    chunk_hash: str
    seen_keys: SeenKeys
    stage: PartitionStage | None = None  # a gated backfill's: the chunk goes there


def bad_rows_for(place: Workplace, source: PartitionInput) -> BadRows:
    """The bad rows strategy an attempt's chunks are written with: the backfill's policy."""
    spec, policy = place.spec, place.spec.bad_rows
    if policy is None:
        return FAIL_ON_BAD_ROW
    dialect = place.store.engine.dialect.name
    if dialect != "postgresql":
        raise TerminalError(
            f"bad_rows=RejectRows(...) on {spec.asset!r} needs a PostgreSQL warehouse "
            "(JOBS_PLATFORM_DATABASE_URL=postgresql://...): it rejects rows "
            f"by SQLSTATE, which {dialect} does not report"
        )
    return RejectingRows(
        max_rows=policy.max_rows,
        max_fraction=policy.max_fraction,
        drain=source.rejects.drain,
        store=place.store,
        asset=spec.asset,
        partition=source.partition_key,
        log=place.log,
        version=spec.version,
    )


def commit_chunk(
    place: Workplace,
    write: ChunkWrite,
    bad_rows: BadRows,
    *,
    written_before: bool,
    before_commit: Callable[[], None],
    rejected: RejectedValue | None = None,
    finish_partition: Callable[[UpsertCounts], bool] | None = None,
) -> UpsertCounts:
    """ONE transaction: the chunk's rows, its rejects, its checkpoint, the fence.

    `rejected`: how the warehouse rejected the plain upsert of this chunk (rolled back); the
    chunk is then written without the rows it rejects (`bad_rows.upsert_rejecting`).
    `finish_partition(counts)`: asked before the fence; True when it finalized the
    partition in this same transaction (its own fence last), False to fence the chunk alone.
    """
    spec, connection, attempt = place.spec, write.seen_keys.connection, write.attempt
    chunk, stage = write.chunk, write.stage
    with connection.begin():
        if rejected is None:
            write.seen_keys.add(chunk)
            if stage is None:
                counts = upsert_frame(connection, spec.table, spec.key, chunk)
            else:
                # Staged, not published (`expect=`, `audits=`): the gate's finalize publishes.
                counts = UpsertCounts(inserted=stage.write(connection, chunk, write.index))
        else:
            table, key = spec.table, spec.key
            if stage is not None:
                stage.clear_from(connection, write.index)
                table, key = stage.table, stage.write_key
                chunk = stage.rows_of(chunk, write.index)
            counts = bad_rows.upsert_rejecting(
                connection,
                table,
                key,
                chunk,
                chunk_index=write.index,
                rejected=rejected,
                seen_keys=write.seen_keys,
            )
        bad_rows.record(connection, write.index, written_before=written_before)
        place.store.checkpoints.record_chunk(
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
        if finish_partition is None or not finish_partition(counts):
            place.store.leases.fence(connection, attempt.lease, place.settings.lease_seconds)
    return counts
