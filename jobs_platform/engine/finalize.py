"""The end of a successful attempt: one fenced transaction makes the partition done.

It sweeps the partition's rows that are no longer in the input, drops checkpoints past the
input's last chunk, marks the partition done (with the input's fingerprint), resolves a
requeued entry, records the attempt as succeeded and releases the lease. The fence runs
last, so a worker that lost its lease rolls all of it back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import sqlalchemy as sa

from jobs_platform.engine.attempt import StartedAttempt, Workplace
from jobs_platform.gate.audits import AuditResult
from jobs_platform.store import checkpoints as checkpoint_store
from jobs_platform.store.partitions import PartitionStatus, done_record
from jobs_platform.writer.sweep import SeenKeys, sweep_partition
from jobs_platform.writer.upsert import UpsertCounts


@dataclass(frozen=True)
class ChunkTally:
    """What the chunks of an attempt came to (unchanged input: every chunk resumed)."""

    input_rows: int = 0
    counts: UpsertCounts = field(default_factory=UpsertCounts)
    written: int = 0  # chunks committed by this attempt
    resumed: int = 0  # chunks skipped: committed before with the same content
    chunks: int = 0  # chunks read


@dataclass(frozen=True)
class Finished:
    """A partition made done by an attempt: what its chunks came to, the rows it swept
    (input lines gone since the last run), and how long the attempt took."""

    tally: ChunkTally
    swept: int
    duration_seconds: float
    unchanged_input: bool = False  # finished without reading: the input's fingerprint held
    audits: tuple[AuditResult, ...] = ()  # a gated partition's audits, all passed or warnings


def finalize(
    place: Workplace,
    attempt: StartedAttempt,
    *,
    fingerprint: str,
    seen_keys: SeenKeys,
    tally: ChunkTally,
    before_commit: Callable[[], None],
) -> Finished:
    """Commit the partition as done, after its chunks came to `tally`.

    Runs on the connection that holds `seen_keys` (a temporary table of it).
    """
    with seen_keys.connection.begin():
        return finalize_in_transaction(
            place,
            attempt,
            fingerprint=fingerprint,
            seen_keys=seen_keys,
            tally=tally,
            before_commit=before_commit,
        )


def finalize_in_transaction(
    place: Workplace,
    attempt: StartedAttempt,
    *,
    fingerprint: str,
    seen_keys: SeenKeys,
    tally: ChunkTally,
    before_commit: Callable[[], None],
) -> Finished:
    """`finalize`'s statements, in the transaction open on `seen_keys`'s connection.

    A partition whose last chunk is its first commits that chunk and this in one
    transaction (`runner`); the fence runs last either way.
    """
    spec, partition = place.spec, attempt.partition
    duration = time.monotonic() - attempt.began
    connection = seen_keys.connection
    swept = sweep_partition(
        connection,
        spec.table,
        spec.key,
        spec.partition_scope(spec.table, partition),
        seen_keys,
    )
    checkpoint_store.forget_chunks_from(connection, spec.asset, partition, tally.chunks)
    mark_done(place, attempt, connection, fingerprint, tally, duration)
    succeed(place, attempt, connection, before_commit)
    return Finished(tally, swept, duration)


def finish_if_unchanged(
    place: Workplace,
    attempt: StartedAttempt,
    connection: sa.Connection,
    fingerprint: str,
    before_commit: Callable[[], None],
) -> Finished | None:
    """A done partition whose input fingerprint is unchanged: finish without reading it.

    Returns what it came to (every chunk resumed, nothing swept), or None to read the
    input. Safe because its rows were derived from exactly this input (by this `version` of
    the reader) and committed with the done record; reading it again would skip every
    chunk anyway. Bump `version` to recompute after changing the reader. Runs in the
    caller's transaction, which reads the committed chunks next when it returns None.
    """
    spec, partition, began = place.spec, attempt.partition, time.monotonic()
    done = done_record(connection, spec.asset, partition)
    if done is None or not unchanged_since_done(done.fingerprint, fingerprint):
        return None
    chunks = len(checkpoint_store.committed_chunks(connection, spec.asset, partition, fingerprint))
    place.store.partitions.set_status(
        connection,
        spec.asset,
        partition,
        PartitionStatus.DONE,
        run_id=attempt.attempter.run_id,
    )
    succeed(place, attempt, connection, before_commit)
    rows = done.row_count or 0
    tally = ChunkTally(input_rows=rows, counts=UpsertCounts(unchanged=rows), resumed=chunks)
    return Finished(tally, 0, time.monotonic() - began, unchanged_input=True)


def unchanged_since_done(done_fingerprint: str | None, fingerprint: str) -> bool:
    """Whether a done partition was made from the input `fingerprint` names (pure).

    Both are in the form attempts keep (`BackfillSpec.stored_fingerprint`, the code version
    included). `finish_if_unchanged` finishes without reading when it holds, and
    `jobs-platform plan` skips the partition (`done_unchanged`).
    """
    return done_fingerprint is not None and done_fingerprint == fingerprint


def mark_done(
    place: Workplace,
    attempt: StartedAttempt,
    connection: sa.Connection,
    fingerprint: str,
    tally: ChunkTally,
    duration: float,
) -> None:
    """The partition done, in the caller's finalize transaction, with the fingerprint of
    the input it was made from, its input rows and the attempt's time."""
    place.store.partitions.set_status(
        connection,
        place.spec.asset,
        attempt.partition,
        PartitionStatus.DONE,
        fingerprint=fingerprint,
        row_count=tally.input_rows,
        duration_seconds=duration,
        run_id=attempt.attempter.run_id,
    )


def succeed(
    place: Workplace,
    attempt: StartedAttempt,
    connection: sa.Connection,
    before_commit: Callable[[], None],
) -> None:
    """The attempt's end, in the caller's finalize transaction: its requeued entry
    resolved, the attempt succeeded, then the fence and the lease released."""
    place.store.dead_letter.resolve_requeued(connection, place.spec.asset, attempt.partition)
    if attempt.probe:
        # A probe's success: the cause is gone, its circuit closes (`steering.circuits`).
        # Only the probe's token can close one, so no other attempt asks.
        place.store.circuits.probe_succeeded(
            connection, place.spec.asset, attempt.partition, attempt.lease.token
        )
    place.store.attempts.finish(connection, attempt.history_id)
    before_commit()
    place.store.leases.fence_and_release(connection, attempt.lease)
