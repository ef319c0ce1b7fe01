"""Turn the core's verdict on an attempt into what Dagster understands.

This is the taxonomy's custom retry policy: the core decides retry, snooze or quarantine
from the cross-run attempt count; here that becomes `RetryRequested` with the computed
wait or `Failure(allow_retries=False)`. The static `RetryPolicy` below only covers what
our code never sees: a step process killed outright, which Dagster retries on its own.
"""

from __future__ import annotations

from collections.abc import Iterator

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


def finish_step(
    context: dg.AssetExecutionContext,
    assets: list[str],
    results: list[PartitionReport | FailedAttempt],
) -> Iterator[dg.MaterializeResult]:
    """End a backfill step: every (asset, partition) was attempted on its own; now decide.

    All done: one result per asset, and Dagster records each of its partitions. Otherwise
    the partitions that committed are reported one by one, so the UI shows them
    materialized and only the others failed, and the step retries (some partition will
    be tried again after a delay) or fails for good. A poison partition is quarantined
    alone, the other partitions of the range commit, and a downstream partition of the
    same step runs unless it reads the poison one (then it is blocked, not attempted).
    """
    reports = [result for result in results if isinstance(result, PartitionReport)]
    failed = [result for result in results if isinstance(result, FailedAttempt)]
    if not failed:
        for asset in assets:
            own = [report for report in reports if report.asset == asset]
            yield dg.MaterializeResult(
                asset_key=dg.AssetKey.from_user_string(asset), metadata=_step_metadata(own)
            )
        return
    causes = [f for f in failed if f.decision.next_step is not NextStep.BLOCKED]
    if len(causes) == 1 and not reports and len({f.partition for f in failed}) == 1:
        # One partition, failed on its own account (its downstream only blocked by it).
        raise_for_dagster(causes[0], context.retry_number)
    for report in reports:
        context.log_event(
            dg.AssetMaterialization(
                asset_key=dg.AssetKey.from_user_string(report.asset),
                partition=report.partition,
                metadata=report_metadata(report),
            )
        )
    again = [f for f in failed if f.decision.next_step in (NextStep.RETRY, NextStep.SNOOZE)]
    if again:
        raise dg.RetryRequested(
            max_retries=context.retry_number + 1,
            seconds_to_wait=round(min(f.decision.delay_seconds for f in again), 3),
        ) from again[0].error
    quarantined = _named(failed, NextStep.QUARANTINE)
    stopped = _named(failed, NextStep.GIVE_UP)
    blocked = _named(failed, NextStep.BLOCKED)
    committed = [f"{report.asset}/{report.partition}" for report in reports]
    raise dg.Failure(
        description=(
            f"{len(quarantined)} of {len(results)} partitions quarantined "
            f"({', '.join(quarantined) or 'none'}), {len(blocked)} not attempted because a "
            f"partition they read is not done ({', '.join(blocked) or 'none'}), "
            f"{len(stopped)} failed before their attempt started; {len(committed)} committed"
        ),
        metadata={
            "committed": ", ".join(committed) or "none",
            "quarantined": ", ".join(quarantined) or "none",
            "blocked_by_upstream": ", ".join(blocked) or "none",
            "failed_before_attempt": ", ".join(stopped) or "none",
            "errors": "\n".join(f"{f.asset}/{f.partition}: {f.message}" for f in failed)[:4000],
        },
        allow_retries=False,
    )


def _named(failed: list[FailedAttempt], next_step: NextStep) -> list[str]:
    return [f"{f.asset}/{f.partition}" for f in failed if f.decision.next_step is next_step]


def _step_metadata(reports: list[PartitionReport]) -> dict:
    if len(reports) == 1:
        return report_metadata(reports[0])
    return {
        "partitions": len(reports),
        "input_rows": sum(report.input_rows for report in reports),
        "rows_written": sum(report.counts.written for report in reports),
        "rows_swept": sum(report.rows_swept for report in reports),
        "chunks_written": sum(report.chunks_written for report in reports),
        "chunks_resumed": sum(report.chunks_resumed for report in reports),
    }
