"""One attempt at one partition: gate → lease → chunks → finalize, and what a failure means.

Safety argument, in the order an attempt runs:
- the gates refuse a quarantined partition, and hold back one whose upstream partitions
  are not all done, before any work, recording nothing (`attempt.begin_attempt`);
- the lease gives the attempt a fencing token, judged on the database's clock so that
  hosts with skewed clocks agree; a holder is taken over early only when provably dead
  on this kernel and in this PID namespace (`store.leases`, `store.holders`);
- each chunk's rows, its checkpoint and the fence check commit in ONE transaction, so a
  crash leaves both or neither; a retry skips the chunks of an unchanged prefix of the
  input, so nothing committed is applied twice and the last line still wins;
- finalize sweeps rows no longer in the input, marks the partition done and releases the
  lease in one fenced transaction (`finalize`). A last chunk shorter than `chunk_rows`
  (no stage, no rows rejected) commits in that same transaction: a one-chunk partition
  is one commit, done with its rows or not at all;
- a failure is recorded fenced: only the lease's owner marks the partition failed or
  quarantines it; a worker that lost its lease records its own attempt and nothing else
  (`failure`);
- a failure before the attempt exists is classified too and bounded by the ceiling;
- what follows a failure is decided and recorded in one place (`settle.settle`, on the
  one budget query `store.attempts.budget_state`, with the pure rule `decisions.decide`);
- the attempt returns one value (`outcomes.Outcome`), and one place emits how it ended
  (`outcome_events`).

The path, the layers and a glossary (episode, gate, lease, trail, snooze, blocked,
chain): docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import random
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

import pandas as pd
import sqlalchemy as sa

from jobs_platform.engine.attempt import (
    Attempter,
    StartedAttempt,
    Workplace,
    begin_attempt,
    blocked_by,
)
from jobs_platform.engine.chunk_commit import ChunkWrite, bad_rows_for, commit_chunk
from jobs_platform.engine.decisions import Decision
from jobs_platform.engine.events import EventTrail, Lifecycle, LogFormat
from jobs_platform.engine.failpoints import Failpoint, Point, parse_failpoints, trigger_failpoints
from jobs_platform.engine.failure import record_error_before_attempt, record_failure
from jobs_platform.engine.finalize import (
    ChunkTally,
    Finished,
    finalize,
    finalize_in_transaction,
    finish_if_unchanged,
)
from jobs_platform.engine.gated_finalize import finalize_gated, gate_stage, prepare_stage
from jobs_platform.engine.heartbeat import Heartbeat
from jobs_platform.engine.interrupts import InterruptShield
from jobs_platform.engine.outcome_events import emit_outcome
from jobs_platform.engine.outcomes import Blocked, NotDue, Outcome, PartitionReport
from jobs_platform.engine.read_ahead import read_ahead
from jobs_platform.engine.spec import (
    DEFAULT_CHUNK_ROWS,
    BackfillSpec,
    PartitionInput,
    RejectCollector,
    UpstreamReads,
    reads_nothing,
)
from jobs_platform.engine.tracing import traced_attempt
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.errors import AttemptInterrupted, AttemptTimedOut, LeaseLostError
from jobs_platform.gate.stage import PartitionStage
from jobs_platform.settings import Settings
from jobs_platform.store import attempts as history
from jobs_platform.store import checkpoints as checkpoint_store
from jobs_platform.store import leases as lease_store
from jobs_platform.store.clock import DATABASE_CLOCK, Clock
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.migrate import check_schema, ensure_embedded_schema
from jobs_platform.writer import rejects as reject_store
from jobs_platform.writer.bad_rows import FAIL_ON_BAD_ROW, BadRows
from jobs_platform.writer.rejected_value import RejectedValue
from jobs_platform.writer.sweep import SeenKeys, seen_keys_on
from jobs_platform.writer.upsert import UpsertCounts, last_row_per_key

__all__ = ["Attempter", "Outcome", "PartitionReport", "PartitionRunner", "content_hash"]

# Where the progress lines the run's log does not keep go (`events.EventTrail`).
_PROGRESS_LOG = logging.getLogger("jobs_platform.progress")

# Without a fingerprint, checkpoints are matched on chunk content alone.
CONTENT_ONLY_FINGERPRINT = "content"


@dataclass(frozen=True)
class _Ended:
    """How `_attempt` came out: the outcome, and a shutdown to raise once it is reported."""

    outcome: Outcome
    interruption: BaseException | None = None


class PartitionRunner:
    """Runs attempts of one backfill; knows nothing of Dagster."""

    def __init__(
        self,
        spec: BackfillSpec,
        settings: Settings,
        *,
        log: logging.Logger | logging.LoggerAdapter[logging.Logger] | None = None,
        interrupt_types: tuple[type[BaseException], ...] = (),
        rng: random.Random | None = None,
        clock: Clock = DATABASE_CLOCK,
        upstream: UpstreamReads = reads_nothing,
    ):
        self.spec = spec
        self.settings = settings
        self.log = log or logging.getLogger("jobs_platform")
        self.interrupt_types: tuple[type[BaseException], ...] = (
            KeyboardInterrupt,
            SystemExit,
            AttemptInterrupted,
            *interrupt_types,
        )
        self.failpoints: tuple[Failpoint, ...] = parse_failpoints(settings.failpoints)
        self.engine = warehouse_engine(settings.database_url)  # connects lazily
        # The one store every attempt of this runner writes through: `clock` (a test's, or
        # the database's) is the only clock its stamps and leases read.
        self.store = Warehouse(self.engine, clock)
        # The zero-set-up SQLite default makes itself ready here, once; any other
        # warehouse is only checked, by each attempt (`check_schema`).
        ensure_embedded_schema(self.engine, (spec.table,))
        self.place = Workplace(
            spec, settings, self.store, rng or random.Random(), self.log, upstream
        )

    @traced_attempt  # a span per attempt when OpenTelemetry is on (engine/tracing.py)
    def attempt(
        self, partition: str, attempter: Attempter, chunk_rows: int = DEFAULT_CHUNK_ROWS
    ) -> Outcome:
        """One attempt at `partition`, its end logged once (`outcome_events.emit_outcome`).

        An interruption (shutdown) is recorded and reported, then raised again. A signal
        interrupts only the work; one arriving while the attempt starts, finalizes or
        records its end waits for that to be written (`interrupts.InterruptShield`).
        """
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be at least 1, got {chunk_rows}")
        trail = self._trail(partition, attempter)
        with InterruptShield() as shield:
            ended = self._attempt(partition, attempter, trail, chunk_rows, shield)
            emit_outcome(trail, ended.outcome)
            if ended.interruption is not None:
                shield.drop_held()  # a second signal of the same shutdown changes nothing
        if ended.interruption is not None:
            raise ended.interruption
        return ended.outcome

    def blocked(
        self, partition: str, attempter: Attempter, waiting_on: dict[tuple[str, str], str]
    ) -> Blocked:
        """Not attempted, nothing recorded: the caller saw an upstream partition not finish
        (`waiting_on`: (name, key) → why), so the warehouse need not be asked."""
        skipped = blocked_by(self.spec.asset, partition, waiting_on)
        emit_outcome(self._trail(partition, attempter), skipped)
        return skipped

    def not_due(self, partition: str, attempter: Attempter, decision: Decision) -> NotDue:
        """A partition whose retry is not due yet: reported, not attempted, nothing spent.

        `decision` is when it is due (`decision.delay_seconds` from now) and what it waits
        for (a retry or a snooze); the step's schedule decides (`retry_schedule`).
        """
        asset = self.spec.asset
        waiting = RuntimeError(
            f"{asset}/{partition} is due again in {decision.delay_seconds:.3f}s; "
            "not attempted in this step try"
        )
        skipped = NotDue(asset, partition, waiting, decision=decision)
        emit_outcome(self._trail(partition, attempter), skipped)
        return skipped

    def _trail(self, partition: str, attempter: Attempter) -> EventTrail:
        return EventTrail(
            self.log,
            self.spec.asset,
            partition,
            run_id=attempter.run_id,
            correlation_id=attempter.correlation_id,
            log_format=LogFormat(self.settings.log_format),
            progress_log=_PROGRESS_LOG,
        )

    def _attempt(
        self,
        partition: str,
        attempter: Attempter,
        trail: EventTrail,
        chunk_rows: int,
        shield: InterruptShield,
    ) -> _Ended:
        """Gates, lease and start (`attempt`), then the work under a heartbeat (`failure`)."""
        try:
            check_schema(self.engine)  # no DDL: a warehouse behind fails before any attempt
            started = begin_attempt(self.place, partition, attempter, trail)
        except Exception as exc:
            # This step's tries of the partition (the warehouse may be what failed).
            tries = attempter.tries
            failed = record_error_before_attempt(
                self.place.budget, self.spec.asset, partition, exc, tries, self.place.rng
            )
            return _Ended(failed)
        if not isinstance(started, StartedAttempt):
            return _Ended(started)
        # A first start is no news once the attempt's end is logged; a retry's start is.
        started.trail.emit(
            Lifecycle.STARTED,
            token=started.lease.token,
            step_retry=attempter.step_retry,
            kept=started.number > 1,
        )
        with Heartbeat(
            self.store, started.lease, self.settings.lease_seconds, started.deadline
        ) as heartbeat:
            try:
                return _Ended(self._work(started, chunk_rows, heartbeat, shield))
            except BaseException as exc:
                # Signals are held from here on (`shield`): the record below is written whole.
                interrupted = isinstance(exc, self.interrupt_types)
                failed = record_failure(
                    self.place,
                    started,
                    exc,
                    interrupted=interrupted,
                    past_deadline=heartbeat.past_deadline,
                )
                return _Ended(failed, exc if interrupted else None)

    def _work(
        self,
        attempt: StartedAttempt,
        chunk_rows: int,
        heartbeat: Heartbeat,
        shield: InterruptShield,
    ) -> PartitionReport:
        """Chunks → finalize (`finalize`); a done partition with unchanged input skips both.

        A signal interrupts the reads and the chunks (`shield.delivering()`); the finalize
        transaction is short and is let finish, with the short last chunk it may commit.
        """
        source = PartitionInput(
            asset=self.spec.asset,
            partition_key=attempt.partition,
            chunk_rows=chunk_rows,
            warehouse=self.engine,
            log=self.log,
            bad_rows=self.spec.bad_rows,
        )
        bad_rows = bad_rows_for(self.place, source)
        with shield.delivering():
            fingerprint = self._fingerprint(source)
        at_finalize = lambda: self._failpoint(Point.FINALIZE, attempt, None)  # noqa: E731
        # Under `expect=` or `audits=` the chunks are staged; finalize publishes or refuses.
        stage = gate_stage(self.place, attempt.partition)
        committed = self._resume_point(attempt, fingerprint, stage, at_finalize)
        if isinstance(committed, Finished):  # a done partition whose input is unchanged
            return self._report(attempt, fingerprint, committed, bad_rows)
        # One connection for the chunks and the finalize: the seen keys are a temporary
        # table of it, so the worker holds one chunk at a time, never the partition's keys.
        with (
            self.engine.connect() as connection,
            seen_keys_on(connection, self.spec.table, self.spec.key) as seen_keys,
        ):
            with shield.delivering():
                tally = self._write_chunks(
                    source,
                    attempt,
                    fingerprint,
                    committed,
                    seen_keys,
                    heartbeat,
                    bad_rows,
                    stage,
                    shield,
                )
            if isinstance(tally, Finished):  # finalized with its last chunk
                return self._report(attempt, fingerprint, tally, bad_rows)
            _check_still_owner(heartbeat, lease=attempt.lease)
            if stage is not None:
                finished = finalize_gated(
                    self.place,
                    attempt,
                    connection=connection,
                    stage=stage,
                    fingerprint=fingerprint,
                    tally=tally,
                    before_commit=at_finalize,
                )
                return self._report(attempt, fingerprint, finished, bad_rows)
            finished = finalize(
                self.place,
                attempt,
                fingerprint=fingerprint,
                seen_keys=seen_keys,
                tally=tally,
                before_commit=at_finalize,
            )
        return self._report(attempt, fingerprint, finished, bad_rows)

    def _fingerprint(self, source: PartitionInput) -> str:
        spec = self.spec
        fingerprint = spec.fingerprint(source) if spec.fingerprint else CONTENT_ONLY_FINGERPRINT
        return spec.stored_fingerprint(fingerprint)

    def _resume_point(
        self,
        attempt: StartedAttempt,
        fingerprint: str,
        stage: PartitionStage | None,
        at_finalize: Callable[[], None],
    ) -> Finished | dict[int, str]:
        """A done partition with unchanged input finished (`finish_if_unchanged`), or the
        chunks already committed for this input: one transaction, unless a stage must be
        made ready in between (`prepare_stage`)."""
        with self.engine.begin() as connection:
            if self.spec.fingerprint is not None:
                unchanged = finish_if_unchanged(
                    self.place, attempt, connection, fingerprint, at_finalize
                )
                if unchanged is not None:
                    return unchanged
            if stage is None:
                return self._committed_chunks(connection, attempt, fingerprint)
        prepare_stage(self.place, stage, attempt.partition)
        with self.engine.begin() as connection:
            return self._committed_chunks(connection, attempt, fingerprint)

    def _committed_chunks(
        self, connection: sa.Connection, attempt: StartedAttempt, fingerprint: str
    ) -> dict[int, str]:
        """Chunk hashes already committed for this input (checkpoints of others are dropped).

        The attempt records the input it reads here too: a redrive compares it later.
        """
        asset, partition = self.spec.asset, attempt.partition
        history.record_fingerprint(connection, attempt.history_id, fingerprint)
        checkpoint_store.forget_other_inputs(connection, asset, partition, fingerprint)
        committed = checkpoint_store.committed_chunks(connection, asset, partition, fingerprint)
        # The chunks this attempt writes reject their rows again (or none, fixed).
        clearing = reject_store.Clearing(self.spec.version, self.store.now_in_statement(connection))
        reject_store.forget_unkept(connection, asset, partition, committed.keys(), clearing)
        return committed

    def _write_chunks(
        self,
        source: PartitionInput,
        attempt: StartedAttempt,
        fingerprint: str,
        committed: dict[int, str],
        seen_keys: SeenKeys,
        heartbeat: Heartbeat,
        bad_rows: BadRows,
        stage: PartitionStage | None,
        shield: InterruptShield,
    ) -> ChunkTally | Finished:
        """Each chunk's rows, checkpoint and fence in ONE transaction; resumed ones skipped.

        `bad_rows` (`chunk_commit.bad_rows_for`) numbers the rows and keeps the rows a chunk
        rejects; by default it keeps none, and a bad row fails the chunk.

        A chunk shorter than `chunk_rows` is likely the last: the next is read before its
        commit, and when there is none, finalize commits in the chunk's transaction
        (`Finished` is returned). Only for the plain path: no stage, no rows rejected.
        That commit holds a signal back, as finalize does: it is short.
        """
        spec, connection = self.spec, seen_keys.connection
        reads = self._chunks(source, attempt)  # closed at the end: a reading thread stops
        reader = _Lookahead(reads)
        finished: list[Finished] = []
        counts, written, resumed, input_rows, chunks = UpsertCounts(), 0, 0, 0, 0
        # The first chunk's line waits for a second chunk, to be kept in the run's log: for
        # a partition of one chunk, the end line says it all (`events`).
        first_line: tuple[int, int] | None = None  # (chunk, rows)
        try:
            for index, chunk in enumerate(reader):
                chunks = index + 1
                if first_line is not None:
                    self._chunk_line(attempt, first_line)
                    first_line = None
                _check_still_owner(heartbeat, lease=attempt.lease)
                short = len(chunk) < source.chunk_rows
                chunk = last_row_per_key(bad_rows.numbered(chunk), spec.key)
                input_rows += len(chunk)
                chunk_hash = content_hash(chunk)
                # Skip only while every chunk so far was skipped: once one is written, a later
                # chunk must be written again too, or an unchanged later line that repeats a
                # key of a changed earlier one would lose to it ("the last line wins").
                if written == 0 and committed.get(index) == chunk_hash:
                    with connection.begin():  # its rejects, committed with it, still stand
                        seen_keys.add(bad_rows.resumed(connection, index, chunk))
                    resumed += 1
                    continue
                write = ChunkWrite(attempt, fingerprint, index, chunk, chunk_hash, seen_keys, stage)
                before_commit = functools.partial(
                    self._failpoint, Point.BEFORE_COMMIT, attempt, index
                )
                again = index in committed
                finish = None
                if short and stage is None and bad_rows is FAIL_ON_BAD_ROW:
                    so_far = ChunkTally(input_rows, counts, written + 1, resumed, chunks)
                    finish = self._finish_with(
                        reader, attempt, fingerprint, seen_keys, heartbeat, so_far, finished
                    )
                try:
                    with shield.holding() if finish else contextlib.nullcontext():
                        counts += commit_chunk(
                            self.place,
                            write,
                            bad_rows,
                            written_before=again,
                            before_commit=before_commit,
                            finish_partition=finish,
                        )
                except RejectedValue as rejected:
                    if not bad_rows.rejects(rejected):
                        raise
                    # Rolled back whole: written again, in parts, without the rejected rows.
                    counts += commit_chunk(
                        self.place,
                        write,
                        bad_rows,
                        written_before=again,
                        before_commit=before_commit,
                        rejected=rejected,
                    )
                written += 1
                if index == 0:
                    first_line = (index, len(chunk))
                else:
                    self._chunk_line(attempt, (index, len(chunk)))
                if finished:  # a signal held meanwhile waits for the attempt's end
                    self._failpoint(Point.AFTER_COMMIT, attempt, index)
                    break
                shield.deliver_held()  # the chunk committed: a signal held meanwhile, now
                self._failpoint(Point.AFTER_COMMIT, attempt, index)
        except BaseException:
            if first_line is not None:  # what the failure's line does not say
                self._chunk_line(attempt, first_line)
            raise
        finally:
            reads.close()
        if first_line is not None:
            self._chunk_line(attempt, first_line, kept=False)
        if finished:
            return finished[0]
        lease_seconds = self.settings.lease_seconds
        bad_rows.finish(
            connection,
            chunks,
            lambda fenced: self.store.leases.fence(fenced, attempt.lease, lease_seconds),
        )
        return ChunkTally(input_rows, counts, written=written, resumed=resumed, chunks=chunks)

    def _chunk_line(
        self, attempt: StartedAttempt, line: tuple[int, int], *, kept: bool = True
    ) -> None:
        chunk, rows = line
        attempt.trail.emit(Lifecycle.CHUNK_COMMITTED, chunk=chunk, rows=rows, kept=kept)

    def _finish_with(
        self,
        reader: _Lookahead,
        attempt: StartedAttempt,
        fingerprint: str,
        seen_keys: SeenKeys,
        heartbeat: Heartbeat,
        so_far: ChunkTally,
        finished: list[Finished],
    ) -> Callable[[UpsertCounts], bool]:
        """`commit_chunk`'s `finish_partition` for a chunk that may be the last: reads the
        next chunk ahead; with none, finalizes in the chunk's transaction (into `finished`).
        """

        def finish(chunk_counts: UpsertCounts) -> bool:
            if not reader.ends_here():
                return False
            _check_still_owner(heartbeat, lease=attempt.lease)
            tally = dataclasses.replace(so_far, counts=so_far.counts + chunk_counts)
            at_finalize = functools.partial(self._failpoint, Point.FINALIZE, attempt, None)
            finished.append(
                finalize_in_transaction(
                    self.place,
                    attempt,
                    fingerprint=fingerprint,
                    seen_keys=seen_keys,
                    tally=tally,
                    before_commit=at_finalize,
                )
            )
            return True

        return finish

    def _report(
        self,
        attempt: StartedAttempt,
        fingerprint: str,
        finished: Finished,
        bad_rows: BadRows,
    ) -> PartitionReport:
        rows_rejected, rejected = bad_rows.summary()
        tally = finished.tally
        return PartitionReport(
            asset=self.spec.asset,
            partition=attempt.partition,
            attempt=attempt.number,
            input_rows=tally.input_rows,
            counts=tally.counts,
            rows_swept=finished.swept,
            chunks_written=tally.written,
            chunks_resumed=tally.resumed,
            duration_seconds=round(finished.duration_seconds, 3),
            fingerprint=fingerprint,
            unchanged_input=finished.unchanged_input,
            rows_rejected=rows_rejected,
            rejected_sample=tuple(rejected),
            audits=finished.audits,
        )

    def _chunks(self, source: PartitionInput, attempt: StartedAttempt) -> Generator[pd.DataFrame]:
        """The reader's chunks, the next one read while the engine commits this one
        (`read_ahead`). Read in turn with the setting off, and on SQLite: its one writer
        would lock out a reader that queries the warehouse as it goes."""
        iterator: Iterator[pd.DataFrame]
        if not self.settings.read_ahead or self.engine.dialect.name == "sqlite":
            iterator = iter(self.spec.read_chunks(source))
        else:
            # The reader rejects into a collector of its own; read_ahead moves each
            # chunk's rejects to `source` with the chunk, where `bad_rows` drains them.
            reading = dataclasses.replace(source, rejects=RejectCollector())
            iterator = read_ahead(
                iter(self.spec.read_chunks(reading)), reading.rejects, source.rejects
            )
        try:
            index = 0
            while True:
                self._failpoint(Point.READ, attempt, index)
                try:
                    chunk = next(iterator)
                except StopIteration:
                    return
                yield chunk
                index += 1
        finally:
            if isinstance(iterator, Generator):
                iterator.close()  # read_ahead's thread ends; so does a reader's open file

    def _failpoint(self, point: Point, attempt: StartedAttempt, chunk: int | None) -> None:
        if self.failpoints:
            trigger_failpoints(
                self.failpoints,
                point,
                asset=self.spec.asset,
                partition=attempt.partition,
                chunk=chunk,
                attempts_before=attempt.attempts_before,
            )


class _Lookahead(Iterator[pd.DataFrame]):
    """The input's chunks, and whether another follows the one given last (`ends_here`).

    A read ahead that fails is raised by the next `next`: the chunk before it commits
    first, as it did when it was read after that commit.
    """

    def __init__(self, chunks: Iterator[pd.DataFrame]) -> None:
        self._chunks = chunks
        self._ahead: pd.DataFrame | None = None
        self._failed: BaseException | None = None

    def __next__(self) -> pd.DataFrame:
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        if self._ahead is not None:
            ahead, self._ahead = self._ahead, None
            return ahead
        return next(self._chunks)

    def ends_here(self) -> bool:
        try:
            self._ahead = next(self._chunks)
        except StopIteration:
            return True
        except BaseException as failed:  # an interrupt too: the chunk commits, then it
            self._failed = failed
        return False


def _check_still_owner(heartbeat: Heartbeat, *, lease: lease_store.Lease) -> None:
    if heartbeat.past_deadline:
        raise AttemptTimedOut(f"attempt on {lease.asset}/{lease.partition} passed its deadline")
    if heartbeat.lost.is_set():
        raise LeaseLostError(f"lease on {lease.asset}/{lease.partition} was taken over")


def content_hash(frame: pd.DataFrame) -> str:
    """A stable hash of a chunk's columns and values."""
    digest = hashlib.sha256("\x1f".join(map(str, frame.columns)).encode())
    digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return digest.hexdigest()
