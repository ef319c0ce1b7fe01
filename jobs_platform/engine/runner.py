"""One attempt at one partition: gate → lease → chunks → finalize, and what a failure means.

Safety argument, in order of the code below:
- the gate refuses a quarantined partition before any work, recording nothing;
- the lease gives this attempt a fencing token; each chunk's rows, its checkpoint and the
  fence check commit in ONE transaction, so a crash leaves both or neither;
- a retry recomputes each chunk and skips those whose checkpoint matches the input
  fingerprint and the chunk's content, so nothing committed is applied twice;
- finalize sweeps rows no longer in the input, marks the partition done and releases the
  lease in one fenced transaction.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
import traceback
from collections.abc import Iterator

import pandas as pd
import sqlalchemy as sa

from jobs_platform.engine.decisions import Decision, NextStep, decide_after_failure
from jobs_platform.engine.events import EventTrail, Lifecycle, LogFormat
from jobs_platform.engine.failpoints import Failpoint, Point, parse_failpoints, trigger_failpoints
from jobs_platform.engine.heartbeat import Heartbeat
from jobs_platform.engine.results import AttemptInfo, FailedAttempt, PartitionReport
from jobs_platform.engine.spec import DEFAULT_CHUNK_ROWS, BackfillSpec, PartitionInput
from jobs_platform.errors import (
    AttemptInterrupted,
    AttemptTimedOut,
    Classification,
    LeaseLostError,
    Verdict,
    classify,
)
from jobs_platform.settings import Settings
from jobs_platform.store import attempts as attempt_store
from jobs_platform.store import checkpoints as checkpoint_store
from jobs_platform.store import leases as lease_store
from jobs_platform.store import quarantine as quarantine_store
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.migrate import require_current_schema
from jobs_platform.store.partitions import (
    PartitionStatus,
    current_episode,
    done_record,
    set_partition_status,
)
from jobs_platform.store.sweep import sweep_partition
from jobs_platform.store.upsert import UpsertCounts, last_row_per_key, upsert_frame

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
    ):
        self.spec = spec
        self.settings = settings
        self.log = log or logging.getLogger("jobs_platform")
        self.interrupt_types = (KeyboardInterrupt, SystemExit, AttemptInterrupted, *interrupt_types)
        self.rng = rng or random.Random()
        self.failpoints: tuple[Failpoint, ...] = parse_failpoints(settings.failpoints)
        self.engine = warehouse_engine(settings.database_url)
        self._trail = EventTrail(self.log, spec.asset, "")
        require_current_schema(self.engine, embedded_tables=(spec.table,))

    def attempt(
        self, partition: str, info: AttemptInfo, chunk_rows: int = DEFAULT_CHUNK_ROWS
    ) -> PartitionReport | FailedAttempt:
        spec = self.spec
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be at least 1, got {chunk_rows}")
        self._trail = EventTrail(
            self.log,
            spec.asset,
            partition,
            run_id=info.run_id,
            correlation_id=info.correlation_id,
            log_format=LogFormat(self.settings.log_format),
        )
        with self.engine.connect() as connection:
            entry = quarantine_store.active_entry(connection, spec.asset, partition)
        if entry is not None:
            return self._refused_at_gate(partition, entry)
        try:
            grant = lease_store.acquire_lease(
                self.engine,
                spec.asset,
                partition,
                holder=info.holder or lease_store.this_holder(),
                run_id=info.run_id,
                ttl_seconds=self.settings.lease_seconds,
            )
        except lease_store.LeaseBusy as busy:
            return self._busy(partition, busy)
        lease = grant.lease
        started = self._start_attempt(lease, info)
        if isinstance(started, FailedAttempt):
            return started
        attempt_id, number, episode = started
        self._trail = self._trail.with_attempt(number)
        self._trail.emit(Lifecycle.STARTED, token=lease.token, step_retry=info.step_retry)
        deadline = time.monotonic() + self.settings.attempt_timeout_seconds
        began = time.monotonic()
        with Heartbeat(self.engine, lease, self.settings.lease_seconds, deadline) as heartbeat:
            try:
                return self._work(
                    partition, lease, attempt_id, number, info, chunk_rows, heartbeat, began
                )
            except BaseException as exc:
                failed = self._record_failure(
                    partition, lease, attempt_id, number, episode, exc, heartbeat
                )
                if isinstance(exc, self.interrupt_types):
                    raise
                return failed

    def _refused_at_gate(self, partition: str, entry: sa.Row) -> FailedAttempt:
        error = quarantine_store_error(self.spec.asset, partition, entry)
        self._trail.emit(
            Lifecycle.QUARANTINED, str(error), error_class=entry.error_class, entry_id=entry.id
        )
        return FailedAttempt(
            self.spec.asset,
            partition,
            Decision(NextStep.QUARANTINE),
            Verdict(Classification.TERMINAL, None, "quarantined"),
            attempt=None,
            failures=entry.attempts,
            entry_id=entry.id,
            error=error,
            gated=True,
        )

    def _busy(self, partition: str, busy: lease_store.LeaseBusy) -> FailedAttempt:
        # Being second is not a failure of the input: come back when the lease could
        # have expired, spread out so that waiters do not stampede.
        delay = min(busy.seconds_left(), self.settings.lease_seconds / 3)
        delay = max(0.5, delay) * (1 + self.rng.random() / 2)
        self._trail.emit(Lifecycle.RETRYING, str(busy), delay_seconds=round(delay, 3), snooze=True)
        return FailedAttempt(
            self.spec.asset, partition, Decision(NextStep.SNOOZE, delay), None, None, 0, None, busy
        )

    def _start_attempt(
        self, lease: lease_store.Lease, info: AttemptInfo
    ) -> tuple[int, int, int] | FailedAttempt:
        spec, partition = self.spec, lease.partition
        with self.engine.begin() as connection:
            crashed = attempt_store.record_abandoned_attempts(
                connection, spec.asset, partition, lease.token
            )
            episode = current_episode(connection, spec.asset, partition)
            failures = attempt_store.counted_failures(connection, spec.asset, partition, episode)
            if crashed:
                self.log.warning(
                    "%s/%s: previous attempt recorded as a crash", spec.asset, partition
                )
            if failures >= self.settings.max_attempts:
                # A worker that dies every time never reports; the next one quarantines.
                entry_id = quarantine_store.quarantine_partition(
                    connection, spec.asset, partition, episode
                )
                lease_store.release_lease(connection, lease)
                self._trail.emit(
                    Lifecycle.QUARANTINED,
                    f"attempt budget spent: {failures} attempt(s), the last ones crashed",
                    error_class=str(Classification.CRASH),
                    entry_id=entry_id,
                )
                return FailedAttempt(
                    spec.asset,
                    partition,
                    Decision(NextStep.QUARANTINE),
                    Verdict(Classification.CRASH, None, "attempt budget spent by crashes"),
                    attempt=None,
                    failures=failures,
                    entry_id=entry_id,
                    error=RuntimeError(
                        f"{spec.asset}/{partition} quarantined after {failures} attempts"
                    ),
                )
            attempt_id, number = attempt_store.start_attempt(
                connection,
                asset=spec.asset,
                partition=partition,
                episode=episode,
                run_id=info.run_id,
                step_retry=info.step_retry,
                token=lease.token,
                holder=lease.holder,
                correlation_id=info.correlation_id,
            )
            lease_store.attach_attempt(connection, lease, attempt_id)
        return attempt_id, number, episode

    def _work(
        self,
        partition: str,
        lease: lease_store.Lease,
        attempt_id: int,
        number: int,
        info: AttemptInfo,
        chunk_rows: int,
        heartbeat: Heartbeat,
        began: float,
    ) -> PartitionReport:
        spec, ttl = self.spec, self.settings.lease_seconds
        source = PartitionInput(
            spec.asset, partition, chunk_rows, self.settings, self.engine, self.log
        )
        fingerprint = spec.fingerprint(source) if spec.fingerprint else CONTENT_ONLY_FINGERPRINT
        if spec.version:
            fingerprint = f"{fingerprint}@{spec.version}"
        if spec.fingerprint is not None:
            unchanged = self._finish_if_unchanged(
                partition, lease, attempt_id, number, info, fingerprint
            )
            if unchanged is not None:
                return unchanged
        with self.engine.begin() as connection:
            checkpoint_store.forget_other_inputs(connection, spec.asset, partition, fingerprint)
            committed = checkpoint_store.committed_chunks(
                connection, spec.asset, partition, fingerprint
            )
        counts, written, resumed, input_rows, seen_keys = UpsertCounts(), 0, 0, 0, set()
        chunk_count = 0
        for index, chunk in enumerate(self._chunks(source, partition, info)):
            chunk_count = index + 1
            self._check_still_owner(heartbeat, lease)
            chunk = last_row_per_key(chunk, spec.key)
            input_rows += len(chunk)
            seen_keys.update(_keys(chunk, spec.key))
            chunk_hash = content_hash(chunk)
            if committed.get(index) == chunk_hash:
                resumed += 1
                continue
            with self.engine.begin() as connection:
                counts += upsert_frame(connection, spec.table, spec.key, chunk)
                checkpoint_store.record_chunk(
                    connection,
                    asset=spec.asset,
                    partition=partition,
                    fingerprint=fingerprint,
                    chunk_index=index,
                    chunk_hash=chunk_hash,
                    row_count=len(chunk),
                    token=lease.token,
                )
                self._failpoint(Point.BEFORE_COMMIT, partition, info, index)
                lease_store.fence(connection, lease, ttl)
            written += 1
            self._trail.emit(Lifecycle.CHUNK_COMMITTED, chunk=index, rows=len(chunk))
            self._failpoint(Point.AFTER_COMMIT, partition, info, index)
        self._check_still_owner(heartbeat, lease)
        duration = time.monotonic() - began
        with self.engine.begin() as connection:
            swept = sweep_partition(
                connection,
                spec.table,
                spec.key,
                spec.partition_scope(spec.table, partition),
                seen_keys,
            )
            checkpoint_store.forget_chunks_from(connection, spec.asset, partition, chunk_count)
            set_partition_status(
                connection,
                spec.asset,
                partition,
                PartitionStatus.DONE,
                fingerprint=fingerprint,
                row_count=input_rows,
                duration_seconds=duration,
                run_id=info.run_id,
            )
            quarantine_store.resolve_requeued(connection, spec.asset, partition)
            attempt_store.finish_attempt(connection, attempt_id)
            self._failpoint(Point.FINALIZE, partition, info, None)
            lease_store.fence(connection, lease, ttl)
            lease_store.release_lease(connection, lease)
        report = PartitionReport(
            spec.asset,
            partition,
            number,
            input_rows,
            counts,
            swept,
            written,
            resumed,
            round(duration, 3),
            fingerprint,
        )
        self._trail.emit(
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

    def _finish_if_unchanged(
        self,
        partition: str,
        lease: lease_store.Lease,
        attempt_id: int,
        number: int,
        info: AttemptInfo,
        fingerprint: str,
    ) -> PartitionReport | None:
        """A done partition whose input fingerprint is unchanged: finish without reading it.

        Safe because its rows were derived from exactly this input (by this `version` of
        the reader) and committed with the done record; reading it again would skip every
        chunk anyway. Bump `version` to recompute after changing the reader.
        """
        spec, began = self.spec, time.monotonic()
        with self.engine.begin() as connection:
            done = done_record(connection, spec.asset, partition)
            if done is None or done.fingerprint != fingerprint:
                return None
            chunks = len(
                checkpoint_store.committed_chunks(connection, spec.asset, partition, fingerprint)
            )
            set_partition_status(
                connection, spec.asset, partition, PartitionStatus.DONE, run_id=info.run_id
            )
            attempt_store.finish_attempt(connection, attempt_id)
            self._failpoint(Point.FINALIZE, partition, info, None)
            lease_store.fence(connection, lease, self.settings.lease_seconds)
            lease_store.release_lease(connection, lease)
        rows = done.row_count or 0
        duration = round(time.monotonic() - began, 3)
        self._trail.emit(
            Lifecycle.SUCCEEDED,
            "input unchanged since the partition was done; nothing to read or write",
            input_rows=rows,
            chunks_resumed=chunks,
            duration_seconds=duration,
        )
        return PartitionReport(
            spec.asset, partition, number, rows, UpsertCounts(unchanged=rows), 0, 0, chunks,
            duration, fingerprint,
        )  # fmt: skip

    def _chunks(
        self, source: PartitionInput, partition: str, info: AttemptInfo
    ) -> Iterator[pd.DataFrame]:
        iterator = iter(self.spec.read_chunks(source))
        index = 0
        while True:
            self._failpoint(Point.READ, partition, info, index)
            try:
                chunk = next(iterator)
            except StopIteration:
                return
            yield chunk
            index += 1

    def _failpoint(
        self, point: Point, partition: str, info: AttemptInfo, chunk: int | None
    ) -> None:
        if self.failpoints:
            trigger_failpoints(
                self.failpoints,
                point,
                asset=self.spec.asset,
                partition=partition,
                chunk=chunk,
                retry_number=info.step_retry,
            )

    @staticmethod
    def _check_still_owner(heartbeat: Heartbeat, lease: lease_store.Lease) -> None:
        if heartbeat.past_deadline:
            raise AttemptTimedOut(f"attempt on {lease.asset}/{lease.partition} passed its deadline")
        if heartbeat.lost.is_set():
            raise LeaseLostError(f"lease on {lease.asset}/{lease.partition} was taken over")

    def _record_failure(
        self,
        partition: str,
        lease: lease_store.Lease,
        attempt_id: int,
        number: int,
        episode: int,
        exc: BaseException,
        heartbeat: Heartbeat,
    ) -> FailedAttempt:
        spec = self.spec
        if isinstance(exc, self.interrupt_types):
            verdict = Verdict(Classification.INTERRUPTED, None, "shutdown requested")
        else:
            verdict = classify(exc)
        if verdict.classification is Classification.LEASE_LOST and heartbeat.past_deadline:
            exc = AttemptTimedOut(f"attempt passed its deadline and lost its lease: {exc}")
            verdict = classify(exc)
        failure = attempt_store.AttemptFailure(
            error_class=verdict.classification,
            error_type=type(exc).__name__,
            message=str(exc)[:4000] or type(exc).__name__,
            traceback="".join(traceback.format_exception(exc))[-16000:],
        )
        entry_id = None
        try:
            with self.engine.begin() as connection:
                attempt_store.finish_attempt(connection, attempt_id, failure)
                failures = attempt_store.counted_failures(
                    connection, spec.asset, partition, episode
                )
                decision = decide_after_failure(
                    verdict,
                    failures,
                    self.settings.max_attempts,
                    self.settings.retry_delay_seconds,
                    self.rng,
                )
                if decision.next_step is NextStep.QUARANTINE:
                    entry_id = quarantine_store.quarantine_partition(
                        connection, spec.asset, partition, episode
                    )
                elif verdict.classification is not Classification.LEASE_LOST:
                    set_partition_status(connection, spec.asset, partition, PartitionStatus.FAILED)
                lease_store.release_lease(connection, lease)
        except sa.exc.SQLAlchemyError as record_error:
            # The warehouse is unreachable: the attempt stays "running" and the next worker
            # records it as a crash, which still counts. Retry the whole attempt later.
            self.log.error("could not record the failed attempt: %s", record_error)
            failures = number
            decision = decide_after_failure(
                classify(record_error),
                0,
                self.settings.max_attempts,
                self.settings.retry_delay_seconds,
                self.rng,
            )
        self._trail.emit(
            Lifecycle.FAILED,
            failure.message.splitlines()[0][:500],
            error_class=str(verdict.classification),
            error_type=failure.error_type,
            failures=failures,
        )
        if decision.next_step is NextStep.QUARANTINE:
            self._trail.emit(
                Lifecycle.QUARANTINED,
                f"after {failures} attempt(s)",
                error_class=str(verdict.classification),
                entry_id=entry_id,
            )
        else:
            self._trail.emit(
                Lifecycle.RETRYING,
                error_class=str(verdict.classification),
                delay_seconds=round(decision.delay_seconds, 3),
                snooze=decision.next_step is NextStep.SNOOZE,
            )
        return FailedAttempt(
            spec.asset, partition, decision, verdict, number, failures, entry_id, exc
        )


def quarantine_store_error(asset: str, partition: str, entry: sa.Row) -> Exception:
    from jobs_platform.errors import TerminalError

    return TerminalError(
        f"{asset}/{partition} is quarantined (entry {entry.id}, {entry.attempts} attempts, "
        f"last error: {entry.last_error}); requeue it with: "
        f"jobs-platform dead-letter requeue {asset} {partition}"
    )


def content_hash(frame: pd.DataFrame) -> str:
    """A stable hash of a chunk's columns and values."""
    digest = hashlib.sha256("\x1f".join(map(str, frame.columns)).encode())
    digest.update(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def _keys(frame: pd.DataFrame, key: tuple[str, ...]) -> list:
    if len(key) == 1:
        return frame[key[0]].tolist()
    return list(frame[list(key)].itertuples(index=False, name=None))
