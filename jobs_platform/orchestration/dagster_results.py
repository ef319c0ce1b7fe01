"""Turn the outcomes of a step's attempts into what Dagster understands.

This is the taxonomy's custom retry policy: the core decides retry, snooze or quarantine
from the cross-run attempt count (`engine.outcomes`); here that becomes a
`MaterializeResult`, `RetryRequested` with the computed wait (or none, when the next try
sleeps it: `step_retries`), or `Failure(allow_retries=False)`. The static `RetryPolicy`
below only covers what our code never sees: a step process killed outright, which Dagster
retries on its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, assert_never

import dagster as dg

from jobs_platform.engine.decisions import NextStep
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
    Unfinished,
    waits,
)
from jobs_platform.errors import Classification
from jobs_platform.orchestration.origins import location_of_run
from jobs_platform.suggested_commands import requeue_command

if TYPE_CHECKING:
    from jobs_platform.orchestration.step_retries import StepTry

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
        "rows_rejected": report.rows_rejected,
        **_rejected_rows_table(report),
    }


def _rejected_rows_table(report: PartitionReport) -> dict:
    """The first rows the partition rejected, as a table the UI shows (all: the CLI)."""
    if not report.rejected_sample:
        return {}
    columns = [
        dg.TableColumn("row", "int"),
        dg.TableColumn("column", "string"),
        dg.TableColumn("sqlstate", "string"),
        dg.TableColumn("reason", "string"),
        dg.TableColumn("values", "string"),
    ]
    records = [
        dg.TableRecord(
            {
                "row": reject.row,
                "column": reject.column or "",
                "sqlstate": reject.sqlstate or "",
                "reason": reject.reason,
                "values": json.dumps(reject.values) if reject.values is not None else "",
            }
        )
        for reject in report.rejected_sample
    ]
    return {
        "rejected_rows": dg.MetadataValue.table(records, schema=dg.TableSchema(columns=columns))
    }


def _failure(stopped: Refused | BudgetSpent | Failed, requeue: str) -> dg.Failure:
    where = f"{stopped.asset}/{stopped.partition}"
    match stopped:
        case Refused():
            # "… it runs again once requeued: <command>"; the refusal is a TerminalError.
            description = f"{stopped.message}: {requeue}"
            error_class = Classification.TERMINAL
        case Failed(decision=decision) if decision.next_step is NextStep.GIVE_UP:
            description = (
                f"{where} failed before the attempt started, {stopped.failures} time(s): "
                f"{stopped.message}; not quarantined (nothing is known about its input), "
                "a re-run tries again"
            )
            error_class = stopped.verdict.classification
        case BudgetSpent() | Failed():
            description = f"{where} quarantined: {stopped.message}"
            error_class = stopped.verdict.classification
        case _:
            assert_never(stopped)
    return dg.Failure(
        description=description,
        metadata={
            "asset": stopped.asset,
            "partition": stopped.partition,
            "error_class": str(error_class),
            "error_type": type(stopped.error).__name__,
            "attempts": stopped.failures,
            "quarantine_entry": stopped.entry_id if stopped.entry_id is not None else -1,
            "requeue": requeue,
        },
        allow_retries=False,
    )


def finish_step(
    context: dg.AssetExecutionContext,
    assets: list[str],
    results: list[Outcome],
    step: StepTry,
) -> Iterator[dg.MaterializeResult]:
    """End a backfill step: every (asset, partition) was attempted on its own; now decide.

    All done: one result per asset, and Dagster records each of its partitions. Otherwise
    the partitions that committed are reported one by one, so the UI shows them
    materialized and only the others failed, and the step retries or fails for good. It
    retries when some partition will be tried again: when the first of them is due, each
    after its own delay (`step_retries`). A poison partition is quarantined alone, the
    other partitions of the range commit, and a downstream partition of the same step
    runs unless it reads the poison one (then it is blocked, not attempted). Partitions
    an earlier try finished (`step.done_before`) count as committed.
    """
    reports = [result for result in results if isinstance(result, PartitionReport)]
    unfinished = [result for result in results if not isinstance(result, PartitionReport)]
    if not unfinished:
        for asset in assets:
            own = [report for report in reports if report.asset == asset]
            metadata = _step_metadata(own)
            earlier = sum(1 for done_asset, _ in step.done_before if done_asset == asset)
            if earlier:
                metadata["partitions_done_in_earlier_tries"] = earlier
            yield dg.MaterializeResult(
                asset_key=dg.AssetKey.from_user_string(asset), metadata=metadata
            )
        return
    causes = [f for f in unfinished if not isinstance(f, Blocked)]
    again = [f for f in unfinished if waits(f)]
    alone = not reports and not step.done_before and len({f.partition for f in unfinished}) == 1
    if len(causes) == 1 and alone and not again:
        # One partition, failed for good on its own account (its downstream only blocked
        # by it): its own failure, with the command that requeues it.
        match causes[0]:
            case Refused() | BudgetSpent() | Failed() as cause:
                location = location_of_run(context.run)
                raise _failure(cause, requeue_command(cause.asset, cause.partition, location))
            case Held() as cause:
                raise _held_failure([cause])
    for report in reports:
        context.log_event(
            dg.AssetMaterialization(
                asset_key=dg.AssetKey.from_user_string(report.asset),
                partition=report.partition,
                metadata=report_metadata(report),
            )
        )
    if again:
        # Until the first partition is due; each is attempted once its own delay is. Our
        # ceiling, not Dagster's counter, bounds retries: always allow one more.
        schedule = step.ask_to_retry(unfinished)
        raise dg.RetryRequested(
            max_retries=context.retry_number + 1, seconds_to_wait=schedule.dagster_wait_seconds
        ) from again[0].error
    quarantined = _named(f for f in unfinished if _quarantined(f))
    stopped = _named(f for f in unfinished if _gave_up(f))
    blocked = _named(f for f in unfinished if isinstance(f, Blocked))
    held = [f for f in unfinished if isinstance(f, Held)]
    if held and len(held) == len(causes) and not reports and not step.done_before:
        # Nothing failed: the backfill's steering held every partition the step had.
        raise _held_failure(held)
    committed = [f"{report.asset}/{report.partition}" for report in reports]
    committed += [f"{asset}/{partition}" for asset, partition in sorted(step.done_before)]
    raise dg.Failure(
        description=(
            f"{len(quarantined)} of {len(results)} partitions quarantined "
            f"({', '.join(quarantined) or 'none'}), {len(blocked)} not attempted because a "
            f"partition they read is not done ({', '.join(blocked) or 'none'}), "
            f"{len(stopped)} failed before their attempt started, {len(held)} held back "
            f"({_held_reasons(held)}); {len(committed)} committed"
        ),
        metadata={
            "committed": ", ".join(committed) or "none",
            "quarantined": ", ".join(quarantined) or "none",
            "blocked_by_upstream": ", ".join(blocked) or "none",
            "held": ", ".join(_named(held)) or "none",
            "failed_before_attempt": ", ".join(stopped) or "none",
            "errors": "\n".join(f"{f.asset}/{f.partition}: {f.message}" for f in unfinished)[:4000],
        },
        allow_retries=False,
    )


def _quarantined(outcome: Unfinished) -> bool:
    match outcome:
        case Refused() | BudgetSpent():
            return True
        case Failed(decision=decision):
            return decision.next_step is NextStep.QUARANTINE
        case Blocked() | Held() | Busy() | NotDue():
            return False
        case _:
            assert_never(outcome)


def _held_failure(held: list[Held]) -> dg.Failure:
    """The step's failure when the backfill's steering held back all it did not finish: not
    a failure of any input, and nothing to retry here; the holds sensor launches each held
    partition again once the backfill is resumed or its input is ready."""
    first = held[0]
    others = f" (and {len(held) - 1} more partitions held back)" if len(held) > 1 else ""
    return dg.Failure(
        description=f"{first.message}{others}",
        metadata={
            "held": ", ".join(_named(held)),
            "hold_reason": _held_reasons(held),
            "held_since": min(f.since for f in held).isoformat(),
        },
        allow_retries=False,
    )


def _held_reasons(held: list[Held]) -> str:
    return ", ".join(sorted({str(f.reason) for f in held})) or "none"


def _gave_up(outcome: Unfinished) -> bool:
    """Failed before its attempt started, for good: this run stops, nothing quarantined."""
    return isinstance(outcome, Failed) and outcome.decision.next_step is NextStep.GIVE_UP


def _named(unfinished: Iterable[Unfinished]) -> list[str]:
    return [f"{f.asset}/{f.partition}" for f in unfinished]


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
        "rows_rejected": sum(report.rows_rejected for report in reports),
    }
