"""The closing lifecycle events of an attempt, from its outcome: how it ended, logged once.

The attempt path builds one `Outcome` and never logs how it ended; `emit_outcome` turns
that value into the events (`events.Lifecycle`). Progress on the way (started, each chunk
committed) is emitted where it happens.
"""

from __future__ import annotations

from typing import assert_never

from jobs_platform.engine.decisions import NextStep
from jobs_platform.engine.events import EventTrail, Lifecycle
from jobs_platform.engine.outcomes import (
    Blocked,
    BudgetSpent,
    Busy,
    Failed,
    Held,
    NotDue,
    Outcome,
    PartitionReport,
    Refused,
)


def emit_outcome(trail: EventTrail, outcome: Outcome) -> None:
    """Emit how the attempt ended, on `trail` (numbered when an attempt was started)."""
    match outcome:
        case PartitionReport():
            _succeeded(trail.with_attempt(outcome.attempt), outcome)
        case Refused():
            trail.emit(
                Lifecycle.QUARANTINED,
                outcome.message,
                error_class=outcome.entry_class,
                entry_id=outcome.entry_id,
            )
        case Blocked():
            trail.emit(Lifecycle.BLOCKED, outcome.message)
        case Held():
            trail.emit(Lifecycle.HELD, outcome.message, reason=str(outcome.reason))
        case Busy():
            trail.emit(
                Lifecycle.RETRYING,
                outcome.message,
                delay_seconds=round(outcome.decision.delay_seconds, 3),
                snooze=True,
            )
        case NotDue():
            trail.emit(
                Lifecycle.RETRYING,
                "not due yet: not attempted in this step try, nothing recorded",
                delay_seconds=round(outcome.decision.delay_seconds, 3),
                snooze=outcome.decision.next_step is NextStep.SNOOZE,
            )
        case BudgetSpent():
            trail.emit(
                Lifecycle.QUARANTINED,
                f"attempt budget spent: {outcome.failures} attempt(s), the last ones crashed",
                error_class=str(outcome.verdict.classification),
                entry_id=outcome.entry_id,
            )
        case Failed():
            if outcome.attempt is not None:
                trail = trail.with_attempt(outcome.attempt)
            _failed(trail, outcome)
        case _:
            assert_never(outcome)


def _succeeded(trail: EventTrail, report: PartitionReport) -> None:
    if report.unchanged_input:
        trail.emit(
            Lifecycle.SUCCEEDED,
            "input unchanged since the partition was done; nothing to read or write",
            input_rows=report.input_rows,
            chunks_resumed=report.chunks_resumed,
            duration_seconds=report.duration_seconds,
        )
        return
    trail.emit(
        Lifecycle.SUCCEEDED,
        input_rows=report.input_rows,
        inserted=report.counts.inserted,
        updated=report.counts.updated,
        unchanged=report.counts.unchanged,
        swept=report.rows_swept,
        chunks_written=report.chunks_written,
        chunks_resumed=report.chunks_resumed,
        duration_seconds=report.duration_seconds,
    )


def _failed(trail: EventTrail, failed: Failed) -> None:
    error, error_class = failed.error, str(failed.verdict.classification)
    message = (str(error) or type(error).__name__).splitlines()[0][:500]
    if failed.attempt is None:
        message = f"before the attempt started: {message}"
    trail.emit(
        Lifecycle.FAILED,
        message,
        error_class=error_class,
        error_type=type(error).__name__,
        failures=failed.failures,
    )
    match failed.decision.next_step:
        case NextStep.QUARANTINE:
            trail.emit(
                Lifecycle.QUARANTINED,
                f"after {failed.failures} attempt(s)",
                error_class=error_class,
                entry_id=failed.entry_id,
            )
        case NextStep.GIVE_UP:
            trail.emit(
                Lifecycle.FAILED,
                f"giving up after {failed.failures} tries; the partition is not quarantined",
                error_class=error_class,
            )
        case NextStep.RETRY | NextStep.SNOOZE as next_step:
            trail.emit(
                Lifecycle.RETRYING,
                error_class=error_class,
                delay_seconds=round(failed.decision.delay_seconds, 3),
                snooze=next_step is NextStep.SNOOZE,
            )
        case _:
            assert_never(failed.decision.next_step)
