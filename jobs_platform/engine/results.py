"""What an attempt at a partition returns: a report of its work, or why it stopped.

One value per attempt, built once by the step of the path that knows the facts, and
reported once (`engine.report.report_outcome`) — never a positional tuple.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from jobs_platform.engine.decisions import Decision, NextStep
from jobs_platform.errors import Classification, Verdict
from jobs_platform.store.rejects import RejectedRow
from jobs_platform.store.rows import TableRow
from jobs_platform.store.upsert import UpsertCounts


@dataclass(frozen=True)
class Attempter:
    """Who is attempting: the run, the step retry, and this process as a lease holder.

    `tries_before` is how many times this step already tried this partition (what bounds
    failures nothing could record); None means every try of the step (`step_retry`).
    """

    run_id: str | None = None
    step_retry: int = 0
    correlation_id: str | None = None
    holder: str = ""
    tries_before: int | None = None

    @property
    def tries(self) -> int:
        """This try's number among the step's tries of the partition (1 for the first)."""
        return (self.step_retry if self.tries_before is None else self.tries_before) + 1


@dataclass(frozen=True)
class PartitionReport:
    """What a successful attempt did (becomes the materialization's metadata)."""

    asset: str
    partition: str
    attempt: int  # the attempt's number within its episode (1 for the first)
    input_rows: int
    counts: UpsertCounts
    rows_swept: int
    chunks_written: int
    chunks_resumed: int
    duration_seconds: float
    fingerprint: str
    unchanged_input: bool = False  # done before with this input: nothing read or written
    rows_rejected: int = 0  # input rows set aside under `bad_rows=RejectRows(...)`
    rejected_sample: tuple[RejectedRow, ...] = ()  # the first of them, in input order


@dataclass(frozen=True)
class ChunkTally:
    """What the chunks of an attempt came to (unchanged input: every chunk resumed)."""

    input_rows: int = 0
    counts: UpsertCounts = field(default_factory=UpsertCounts)
    written: int = 0  # chunks committed by this attempt
    resumed: int = 0  # chunks skipped: committed before with the same content
    chunks: int = 0  # chunks read


class Stop(enum.StrEnum):
    """Why an attempt did not finish its partition (what its lifecycle events say)."""

    GATED = "gated"  # already quarantined: refused at the gate, nothing recorded
    BLOCKED = "blocked"  # a partition it reads is not done: not attempted, nothing recorded
    BUSY = "busy"  # another live worker holds the lease: snoozed, nothing recorded
    NOT_DUE = "not_due"  # its retry delay has not passed: skipped this try, nothing recorded
    SPENT = "spent"  # earlier attempts (crashes) spent the budget: quarantined before starting
    FAILED = "failed"  # the attempt raised; it is in the history
    FAILED_BEFORE = "failed_before"  # gate, lease or start raised: there is no attempt


@dataclass(frozen=True)
class FailedAttempt:
    """An attempt that did not finish the partition, and what to do next.

    Built through the named constructors below, one per `Stop`.
    """

    asset: str
    partition: str
    stop: Stop
    decision: Decision
    error: BaseException  # why it stopped (for BUSY the `LeaseBusy`)
    verdict: Verdict | None = None  # None when nothing failed: gated, blocked or busy
    attempt: int | None = None  # the attempt's number in its episode; None when none started
    failures: int = 0  # the episode's counted failures (the budget spent)
    entry_id: int | None = None  # its quarantine entry, when quarantined
    entry_class: str | None = None  # GATED: the error class its quarantine entry records

    @property
    def gated(self) -> bool:
        return self.stop is Stop.GATED

    @property
    def message(self) -> str:
        return str(self.error)

    @classmethod
    def refused(
        cls, asset: str, partition: str, error: BaseException, entry: TableRow
    ) -> FailedAttempt:
        """Quarantined already (`entry`, its open quarantine row): terminal until requeued."""
        return cls(
            asset,
            partition,
            Stop.GATED,
            Decision(NextStep.QUARANTINE),
            error,
            Verdict(Classification.TERMINAL, None, "quarantined"),
            failures=entry.attempts,
            entry_id=entry.id,
            entry_class=entry.error_class,
        )

    @classmethod
    def blocked(cls, asset: str, partition: str, error: BaseException) -> FailedAttempt:
        return cls(asset, partition, Stop.BLOCKED, Decision(NextStep.BLOCKED), error)

    @classmethod
    def busy(
        cls, asset: str, partition: str, decision: Decision, error: BaseException
    ) -> FailedAttempt:
        return cls(asset, partition, Stop.BUSY, decision, error)

    @classmethod
    def not_due(cls, asset: str, partition: str, decision: Decision, tries: int) -> FailedAttempt:
        """Its delay has not passed (`retry_schedule`): not attempted, nothing spent."""
        error = RuntimeError(
            f"{asset}/{partition} is due again in {decision.delay_seconds:.3f}s; "
            "not attempted in this step try"
        )
        return cls(asset, partition, Stop.NOT_DUE, decision, error, failures=tries)

    @classmethod
    def spent(
        cls, asset: str, partition: str, verdict: Verdict, failures: int, entry_id: int | None
    ) -> FailedAttempt:
        error = RuntimeError(f"{asset}/{partition} quarantined after {failures} attempts")
        return cls(
            asset,
            partition,
            Stop.SPENT,
            Decision(NextStep.QUARANTINE),
            error,
            verdict,
            failures=failures,
            entry_id=entry_id,
        )

    @classmethod
    def failed(
        cls,
        asset: str,
        partition: str,
        decision: Decision,
        error: BaseException,
        verdict: Verdict,
        *,
        attempt: int | None,
        failures: int,
        entry_id: int | None = None,
    ) -> FailedAttempt:
        stop = Stop.FAILED if attempt is not None else Stop.FAILED_BEFORE
        return cls(asset, partition, stop, decision, error, verdict, attempt, failures, entry_id)
