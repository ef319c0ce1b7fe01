"""The end of a gated attempt (`expect=`, `audits=`): diff the stage, publish or refuse.

Safety argument: the attempt's chunks went to the partition's stage (`gate.stage`), so
the table is untouched until here. ONE fenced transaction diffs the stage against the
table (`gate.diff.change_diff`), judges the diff by the contract and the staged rows by
the audits (`gate.audits`), and, if the contract holds (or a person approved exactly this
diff) and no blocking audit failed, merges the stage, sweeps the partition's unstaged
rows, marks it done, drops the stage and releases the lease. A worker that lost its
lease rolls all of it back. A refusal publishes nothing: the stage is dropped with the
partition's checkpoints (the next attempt stages it whole again), the diff is kept as
evidence (`gate.reviews`), and `ChangeRefused`, a terminal error, quarantines the
partition through the ordinary failure path.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from jobs_platform.engine.attempt import StartedAttempt, Workplace
from jobs_platform.engine.finalize import ChunkTally, Finished, mark_done, succeed
from jobs_platform.errors import TerminalError
from jobs_platform.gate.audits import AuditResult, evaluate_audits
from jobs_platform.gate.diff import ChangeDiff, change_diff
from jobs_platform.gate.publish import publish_stage
from jobs_platform.gate.stage import PartitionStage, partition_stage
from jobs_platform.store import checkpoints as checkpoint_store
from jobs_platform.writer.upsert import UpsertCounts

__all__ = ["ChangeRefused", "finalize_gated", "gate_stage", "prepare_stage"]


class ChangeRefused(TerminalError):
    """The gate refused a partition's change: its table is as it was before the attempt.

    Terminal, so the partition is quarantined at once and never retried as it is. A new
    input, a new code_version (redriven) or `dead-letter accept-change` moves it on.
    """

    def __init__(
        self, message: str, evidence: dict[str, Any], audits: tuple[AuditResult, ...] = ()
    ) -> None:
        super().__init__(message)
        self.evidence = evidence
        self.audits = audits  # every audit's result, reported as asset checks


def gate_stage(place: Workplace, partition: str) -> PartitionStage | None:
    """The stage a gated backfill's partition is written to; None for a direct one."""
    spec = place.spec
    if not spec.gated:
        return None
    return partition_stage(spec.table, spec.key, spec.asset, partition)


def prepare_stage(place: Workplace, stage: PartitionStage, partition: str) -> None:
    """Create the partition's stage unless an earlier attempt left it.

    A new stage holds no chunk, so the partition's checkpoints are forgotten with it: a
    checkpoint must never promise rows the stage does not hold.
    """
    with place.store.begin() as connection:
        if stage.prepare(connection):
            checkpoint_store.forget_chunks_from(connection, place.spec.asset, partition, 0)


def finalize_gated(
    place: Workplace,
    attempt: StartedAttempt,
    *,
    connection: sa.Connection,
    stage: PartitionStage,
    fingerprint: str,
    tally: ChunkTally,
    before_commit: Callable[[], None],
) -> Finished:
    """Publish the stage as the partition, or raise `ChangeRefused` having published nothing."""
    spec, partition = place.spec, attempt.partition
    duration = time.monotonic() - attempt.began
    reviews = place.store.change_reviews
    with connection.begin():
        stage.analyze(connection)
        diff = change_diff(connection, spec, partition, stage)
        broken = spec.expect.broken_bounds(diff) if spec.expect is not None else []
        audits = tuple(evaluate_audits(connection, spec.audits, stage))
        approval = (
            reviews.approval_of(connection, spec.asset, partition, diff.digest())
            if broken
            else None
        )
        # An approval is of the diff; a blocking audit's failure is fixed in the data.
        refused = any(audit.refuses for audit in audits)
        if not refused and (not broken or approval is not None):
            swept = publish_stage(connection, spec, partition, stage)
            if approval is not None:
                reviews.mark_published(connection, approval)
            # The stage goes with its checkpoints: a re-run stages the partition again.
            checkpoint_store.forget_chunks_from(connection, spec.asset, partition, 0)
            stage.drop(connection)
            mark_done(place, attempt, connection, fingerprint, tally, duration)
            succeed(place, attempt, connection, before_commit)
            counts = UpsertCounts(diff.inserted, diff.updated, diff.unchanged)
            tally = dataclasses.replace(tally, counts=counts)
            return Finished(tally, swept, duration, audits=audits)
    raise _refuse(place, attempt, connection, stage, diff, broken, audits)


def _refuse(
    place: Workplace,
    attempt: StartedAttempt,
    connection: sa.Connection,
    stage: PartitionStage,
    diff: ChangeDiff,
    broken: list[str],
    audits: tuple[AuditResult, ...],
) -> ChangeRefused:
    """Keep the evidence and drop the stage, fenced; the error that quarantines the partition."""
    spec, partition = place.spec, attempt.partition
    contract = spec.expect.describe() if spec.expect is not None else None
    failed = [audit for audit in audits if audit.refuses]
    broken = [
        *broken,
        *(f"audit {a.name} ({a.description}) found {a.offending} offending row(s)" for a in failed),
    ]
    evidence = {
        "contract": contract,
        "broken": broken,
        "diff": diff.as_json(),
        "audits": [audit.as_json() for audit in audits],
    }
    with connection.begin():
        place.store.change_reviews.record_refusal(
            connection,
            spec.asset,
            partition,
            attempt_id=attempt.history_id,
            diff_hash=diff.digest(),
            evidence=evidence,
        )
        checkpoint_store.forget_chunks_from(connection, spec.asset, partition, 0)
        stage.drop(connection)
        place.store.leases.fence(connection, attempt.lease, place.settings.lease_seconds)
    gate = contract or "the backfill's audits"
    return ChangeRefused(
        f"change refused by {gate}: {'; '.join(broken)}. Its diff: {diff.summary()}. "
        "The table is as it was; the diff, a sample of its keys and the audits' offending "
        "rows are in `dead-letter show`"
        + ("; `dead-letter accept-change` approves this diff once" if not failed else ""),
        evidence,
        audits,
    )
