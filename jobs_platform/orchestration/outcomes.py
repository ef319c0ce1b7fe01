"""Turn the core's verdict on an attempt into what Dagster understands.

This is the taxonomy's custom retry policy: the core decides retry, snooze or quarantine
from the cross-run attempt count; here that becomes `RetryRequested` with the computed
wait or `Failure(allow_retries=False)`. The static `RetryPolicy` below only covers what
our code never sees: a step process killed outright, which Dagster retries on its own.
"""

from __future__ import annotations

import dagster as dg

from jobs_platform.engine.decisions import NextStep
from jobs_platform.engine.runner import FailedAttempt, PartitionReport

# Dagster's own budget for step processes that die (SIGKILL, OOM): larger than any
# sensible JOBS_PLATFORM_MAX_ATTEMPTS, because the cross-run ceiling in the warehouse
# is what stops a crash loop (the next attempt finds the budget spent and quarantines).
# A constant short delay: the dead process's lease is taken over at once on the same host,
# and an exponential delay over 25 retries would grow to hours.
CRASH_RETRY_POLICY = dg.RetryPolicy(max_retries=25, delay=1, jitter=dg.Jitter.PLUS_MINUS)


def report_metadata(report: PartitionReport) -> dict:
    return {
        "attempt": report.attempt,
        "input_rows": report.input_rows,
        "rows_inserted": report.counts.inserted,
        "rows_updated": report.counts.updated,
        "rows_unchanged": report.counts.unchanged,
        "rows_swept": report.rows_swept,
        "chunks_written": report.chunks_written,
        "chunks_resumed": report.chunks_resumed,
        "duration_seconds": report.duration_seconds,
        "input_fingerprint": report.fingerprint,
    }


def raise_for_dagster(failed: FailedAttempt, retry_number: int) -> None:
    """Raise RetryRequested or a non-retryable Failure for a failed attempt."""
    decision = failed.decision
    if decision.next_step in (NextStep.RETRY, NextStep.SNOOZE):
        # Our ceiling, not Dagster's counter, bounds retries: always allow one more.
        raise dg.RetryRequested(
            max_retries=retry_number + 1, seconds_to_wait=round(decision.delay_seconds, 3)
        ) from failed.error
    verdict = failed.verdict
    raise dg.Failure(
        description=_failure_description(failed),
        metadata={
            "asset": failed.asset,
            "partition": failed.partition,
            "error_class": str(verdict.classification) if verdict else "unknown",
            "error_type": type(failed.error).__name__ if failed.error else "",
            "attempts": failed.failures,
            "quarantine_entry": failed.entry_id if failed.entry_id is not None else -1,
            "requeue": f"jobs-platform dead-letter requeue {failed.asset} {failed.partition}",
        },
        allow_retries=False,
    )


def _failure_description(failed: FailedAttempt) -> str:
    where = f"{failed.asset}/{failed.partition}"
    if failed.gated:
        return failed.message
    if failed.decision.next_step is NextStep.GIVE_UP:
        return (
            f"{where} failed before the attempt started, {failed.failures} time(s): "
            f"{failed.message}; not quarantined (nothing is known about its input), "
            "a re-run tries again"
        )
    return f"{where} quarantined: {failed.message}"


def finish_range(
    context: dg.AssetExecutionContext,
    asset: str,
    results: list[PartitionReport | FailedAttempt],
) -> dg.MaterializeResult:
    """End a ranged step: every partition was attempted on its own; now decide the step.

    A poison partition is quarantined alone and the others of the range commit. When the
    step as a whole fails or retries, the partitions that did commit are reported one by
    one, so the UI shows them materialized and only the others failed.
    """
    reports = [result for result in results if isinstance(result, PartitionReport)]
    failed = [result for result in results if isinstance(result, FailedAttempt)]
    committed = [report.partition for report in reports]
    if not failed:
        return dg.MaterializeResult(
            metadata={
                "partitions": len(reports),
                "input_rows": sum(report.input_rows for report in reports),
                "rows_written": sum(report.counts.written for report in reports),
                "rows_swept": sum(report.rows_swept for report in reports),
                "chunks_written": sum(report.chunks_written for report in reports),
                "chunks_resumed": sum(report.chunks_resumed for report in reports),
            }
        )
    for report in reports:
        context.log_event(
            dg.AssetMaterialization(
                asset_key=asset, partition=report.partition, metadata=report_metadata(report)
            )
        )
    again = [f for f in failed if f.decision.next_step in (NextStep.RETRY, NextStep.SNOOZE)]
    if again:
        raise dg.RetryRequested(
            max_retries=context.retry_number + 1,
            seconds_to_wait=round(min(f.decision.delay_seconds for f in again), 3),
        ) from again[0].error
    quarantined = [f.partition for f in failed if f.decision.next_step is NextStep.QUARANTINE]
    stopped = [f.partition for f in failed if f.decision.next_step is NextStep.GIVE_UP]
    raise dg.Failure(
        description=(
            f"{asset}: {len(quarantined)} of {len(results)} partitions quarantined "
            f"({', '.join(quarantined) or 'none'}), {len(stopped)} failed before their "
            f"attempt started; {len(committed)} committed"
        ),
        metadata={
            "committed": ", ".join(committed) or "none",
            "quarantined": ", ".join(quarantined) or "none",
            "failed_before_attempt": ", ".join(stopped) or "none",
            "errors": "\n".join(f"{f.partition}: {f.message}" for f in failed)[:4000],
        },
        allow_retries=False,
    )
