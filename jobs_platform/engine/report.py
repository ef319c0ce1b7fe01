"""The one reporter of an attempt's outcome: its closing lifecycle events, from its result.

The attempt path builds one value (`PartitionReport` or `FailedAttempt`) and never logs
how it ended; `report_outcome` turns that value into the events (`events.Lifecycle`).
Progress on the way (started, each chunk committed) is emitted where it happens.
"""

from __future__ import annotations

from jobs_platform.engine.decisions import NextStep
from jobs_platform.engine.events import EventTrail, Lifecycle
from jobs_platform.engine.results import FailedAttempt, PartitionReport, Stop
from jobs_platform.errors import Classification


def report_outcome(trail: EventTrail, result: PartitionReport | FailedAttempt) -> None:
    """Emit how the attempt ended, on `trail` (numbered when an attempt was started)."""
    if result.attempt is not None:
        trail = trail.with_attempt(result.attempt)
    if isinstance(result, PartitionReport):
        _succeeded(trail, result)
    elif result.stop is Stop.GATED:
        trail.emit(
            Lifecycle.QUARANTINED,
            result.message,
            error_class=result.entry_class,
            entry_id=result.entry_id,
        )
    elif result.stop is Stop.BLOCKED:
        trail.emit(Lifecycle.BLOCKED, result.message)
    elif result.stop is Stop.BUSY:
        trail.emit(
            Lifecycle.RETRYING,
            result.message,
            delay_seconds=round(result.decision.delay_seconds, 3),
            snooze=True,
        )
    elif result.stop is Stop.NOT_DUE:
        trail.emit(
            Lifecycle.RETRYING,
            "not due yet: not attempted in this step try, nothing recorded",
            delay_seconds=round(result.decision.delay_seconds, 3),
            snooze=result.decision.next_step is NextStep.SNOOZE,
        )
    elif result.stop is Stop.SPENT:
        trail.emit(
            Lifecycle.QUARANTINED,
            f"attempt budget spent: {result.failures} attempt(s), the last ones crashed",
            error_class=str(Classification.CRASH),
            entry_id=result.entry_id,
        )
    else:
        _failed(trail, result)


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


def _failed(trail: EventTrail, failed: FailedAttempt) -> None:
    # FAILED and FAILED_BEFORE, the stops that come here, are built with their verdict.
    assert failed.verdict is not None
    error, error_class = failed.error, str(failed.verdict.classification)
    message = (str(error) or type(error).__name__).splitlines()[0][:500]
    if failed.stop is Stop.FAILED_BEFORE:
        message = f"before the attempt started: {message}"
    trail.emit(
        Lifecycle.FAILED,
        message,
        error_class=error_class,
        error_type=type(error).__name__,
        failures=failed.failures,
    )
    next_step = failed.decision.next_step
    if next_step is NextStep.QUARANTINE:
        trail.emit(
            Lifecycle.QUARANTINED,
            f"after {failed.failures} attempt(s)",
            error_class=error_class,
            entry_id=failed.entry_id,
        )
    elif next_step is NextStep.GIVE_UP:
        trail.emit(
            Lifecycle.FAILED,
            f"giving up after {failed.failures} tries; the partition is not quarantined",
            error_class=error_class,
        )
    else:
        trail.emit(
            Lifecycle.RETRYING,
            error_class=error_class,
            delay_seconds=round(failed.decision.delay_seconds, 3),
            snooze=next_step is NextStep.SNOOZE,
        )
