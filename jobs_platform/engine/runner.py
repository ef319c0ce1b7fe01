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
  lease in one fenced transaction (`finalize`);
- a failure is recorded fenced: only the lease's owner marks the partition failed or
  quarantines it; a worker that lost its lease records its own attempt and nothing else
  (`failure`);
- a failure before the attempt exists is classified too and bounded by the ceiling;
- every delay and the quarantine rule come from one function (`decisions.decide`).
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Iterator

import pandas as pd

from jobs_platform.engine.attempt import Attempt, Workplace, begin_attempt
from jobs_platform.engine.events import EventTrail, Lifecycle, LogFormat
from jobs_platform.engine.failpoints import Failpoint, Point, parse_failpoints, trigger_failpoints
from jobs_platform.engine.failure import record_error_before_attempt, record_failure
from jobs_platform.engine.finalize import finalize, finish_if_unchanged
from jobs_platform.engine.heartbeat import Heartbeat
from jobs_platform.engine.results import AttemptInfo, FailedAttempt, PartitionReport
from jobs_platform.engine.spec import DEFAULT_CHUNK_ROWS, BackfillSpec, PartitionInput
from jobs_platform.engine.tracing import traced_attempt
from jobs_platform.errors import AttemptInterrupted, AttemptTimedOut, LeaseLostError
from jobs_platform.settings import Settings
from jobs_platform.store import checkpoints as checkpoint_store
from jobs_platform.store import leases as lease_store
from jobs_platform.store.clock import DATABASE_CLOCK, LeaseClock
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.migrate import require_current_schema
from jobs_platform.store.sweep import seen_keys_on
from jobs_platform.store.upsert import UpsertCounts, last_row_per_key, upsert_frame

__all__ = ["AttemptInfo", "FailedAttempt", "PartitionReport", "PartitionRunner", "content_hash"]

# Without a fingerprint, checkpoints are matched on chunk content alone.
CONTENT_ONLY_FINGERPRINT = "content"


class PartitionRunner:
    """Runs attempts of one backfill; knows nothing of Dagster."""

    def __init__(
        self,
        spec: BackfillSpec,
        settings: Settings,
        *,
        log: logging.Logger | logging.LoggerAdapter | None = None,
        interrupt_types: tuple[type[BaseException], ...] = (),
        rng: random.Random | None = None,
        clock: LeaseClock = DATABASE_CLOCK,
        upstream: tuple[str, ...] = (),
    ):
        self.spec = spec
        self.settings = settings
        self.log = log or logging.getLogger("jobs_platform")
        self.interrupt_types = (KeyboardInterrupt, SystemExit, AttemptInterrupted, *interrupt_types)
        self.failpoints: tuple[Failpoint, ...] = parse_failpoints(settings.failpoints)
        self.engine = warehouse_engine(settings.database_url)  # connects lazily
        self.place = Workplace(
            spec, settings, self.engine, clock, rng or random.Random(), self.log, upstream
        )

    @traced_attempt  # a span per attempt when OpenTelemetry is on (engine/tracing.py)
    def attempt(
        self, partition: str, info: AttemptInfo, chunk_rows: int = DEFAULT_CHUNK_ROWS
    ) -> PartitionReport | FailedAttempt:
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be at least 1, got {chunk_rows}")
        trail = EventTrail(
            self.log,
            self.spec.asset,
            partition,
            run_id=info.run_id,
            correlation_id=info.correlation_id,
            log_format=LogFormat(self.settings.log_format),
        )
        try:
            # Checked once per process; the embedded default upgrades itself instead.
            require_current_schema(self.engine, embedded_tables=(self.spec.table,))
            started = begin_attempt(self.place, partition, info, trail)
        except Exception as exc:
            # Dagster's step retry number counts this step's consecutive tries.
            return record_error_before_attempt(
                self.place.budget, trail, exc, info.step_retry + 1, self.place.rng
            )
        if isinstance(started, FailedAttempt):
            return started
        return self._run(started, chunk_rows)

    def _run(self, attempt: Attempt, chunk_rows: int) -> PartitionReport | FailedAttempt:
        lease = attempt.lease
        attempt.trail.emit(Lifecycle.STARTED, token=lease.token, step_retry=attempt.info.step_retry)
        with Heartbeat(
            self.engine,
            lease,
            self.settings.lease_seconds,
            attempt.deadline,
            clock=self.place.clock,
        ) as heartbeat:
            try:
                return self._work(attempt, chunk_rows, heartbeat)
            except BaseException as exc:
                interrupted = isinstance(exc, self.interrupt_types)
                failed = record_failure(
                    self.place,
                    attempt,
                    exc,
                    interrupted=interrupted,
                    past_deadline=heartbeat.past_deadline,
                )
                if interrupted:
                    raise
                return failed

    def _work(self, attempt: Attempt, chunk_rows: int, heartbeat: Heartbeat) -> PartitionReport:
        spec, partition, place = self.spec, attempt.partition, self.place
        source = PartitionInput(
            spec.asset, partition, chunk_rows, self.settings, self.engine, self.log
        )
        fingerprint = spec.fingerprint(source) if spec.fingerprint else CONTENT_ONLY_FINGERPRINT
        if spec.version:
            fingerprint = f"{fingerprint}@{spec.version}"
        at_finalize = lambda: self._failpoint(Point.FINALIZE, attempt, None)  # noqa: E731
        if spec.fingerprint is not None:
            unchanged = finish_if_unchanged(place, attempt, fingerprint, at_finalize)
            if unchanged is not None:
                return unchanged
        with self.engine.begin() as connection:
            checkpoint_store.forget_other_inputs(connection, spec.asset, partition, fingerprint)
            committed = checkpoint_store.committed_chunks(
                connection, spec.asset, partition, fingerprint
            )
        counts, written, resumed, input_rows = UpsertCounts(), 0, 0, 0
        chunk_count = 0
        # One connection for the chunks and the finalize: the seen keys are a temporary
        # table of it, so the worker holds one chunk at a time, never the partition's keys.
        with (
            self.engine.connect() as connection,
            seen_keys_on(connection, spec.table, spec.key) as seen_keys,
        ):
            for index, chunk in enumerate(self._chunks(source, attempt)):
                chunk_count = index + 1
                _check_still_owner(heartbeat, lease=attempt.lease)
                chunk = last_row_per_key(chunk, spec.key)
                input_rows += len(chunk)
                chunk_hash = content_hash(chunk)
                # Skip only while every chunk so far was skipped: once one is written, a
                # later chunk must be written again too, or an unchanged later line that
                # repeats a key of a changed earlier one would lose to it ("the last line
                # wins").
                if written == 0 and committed.get(index) == chunk_hash:
                    with connection.begin():
                        seen_keys.add(chunk)
                    resumed += 1
                    continue
                with connection.begin():
                    seen_keys.add(chunk)
                    counts += upsert_frame(connection, spec.table, spec.key, chunk)
                    checkpoint_store.record_chunk(
                        connection,
                        asset=spec.asset,
                        partition=partition,
                        fingerprint=fingerprint,
                        chunk_index=index,
                        chunk_hash=chunk_hash,
                        row_count=len(chunk),
                        token=attempt.lease.token,
                    )
                    self._failpoint(Point.BEFORE_COMMIT, attempt, index)
                    lease_store.fence(
                        connection, attempt.lease, self.settings.lease_seconds, place.clock
                    )
                written += 1
                attempt.trail.emit(Lifecycle.CHUNK_COMMITTED, chunk=index, rows=len(chunk))
                self._failpoint(Point.AFTER_COMMIT, attempt, index)
            _check_still_owner(heartbeat, lease=attempt.lease)
            swept, duration = finalize(
                place,
                attempt,
                fingerprint=fingerprint,
                seen_keys=seen_keys,
                chunk_count=chunk_count,
                input_rows=input_rows,
                before_commit=at_finalize,
            )
        report = PartitionReport(
            spec.asset,
            partition,
            attempt.number,
            input_rows,
            counts,
            swept,
            written,
            resumed,
            round(duration, 3),
            fingerprint,
        )
        attempt.trail.emit(
            Lifecycle.SUCCEEDED,
            input_rows=input_rows,
            inserted=counts.inserted,
            updated=counts.updated,
            unchanged=counts.unchanged,
            swept=swept,
            chunks_written=written,
            chunks_resumed=resumed,
            duration_seconds=round(duration, 3),
        )
        return report

    def _chunks(self, source: PartitionInput, attempt: Attempt) -> Iterator[pd.DataFrame]:
        iterator = iter(self.spec.read_chunks(source))
        index = 0
        while True:
            self._failpoint(Point.READ, attempt, index)
            try:
                chunk = next(iterator)
            except StopIteration:
                return
            yield chunk
            index += 1

    def _failpoint(self, point: Point, attempt: Attempt, chunk: int | None) -> None:
        if self.failpoints:
            trigger_failpoints(
                self.failpoints,
                point,
                asset=self.spec.asset,
                partition=attempt.partition,
                chunk=chunk,
                attempts_before=attempt.attempts_before,
            )


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
