"""What a failure is recorded as, and who may record what.

- The owner of the lease (its token is still the current one) records its attempt, then
  settles it (`settle.settle`: quarantine, or mark the partition failed) and releases
  the lease: one transaction, with the lease row locked so no takeover slips in between.
  A rule a person taught for the failure's cause (`dead_letter.rules`) decides its class
  before the table does, and the history names it.
- A worker that lost its lease records its own attempt and nothing else: the partition
  belongs to whoever holds the lease now (it may have finished it already).
- A failure before any attempt began is classified like any other, but nothing about the
  input is known: it is retried with backoff and stops the run at the ceiling.
"""

from __future__ import annotations

import random
import traceback

import sqlalchemy as sa

from jobs_platform.dead_letter.rules import taught_verdict
from jobs_platform.engine.attempt import StartedAttempt, Workplace
from jobs_platform.engine.decisions import RetryBudget
from jobs_platform.engine.outcomes import Failed
from jobs_platform.engine.settle import Record, settle, settle_unrecorded
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.errors import (
    AttemptTimedOut,
    Classification,
    LeaseLostError,
    Verdict,
    classify,
)
from jobs_platform.settings import Settings
from jobs_platform.store import attempts as history
from jobs_platform.store import leases as lease_store
from jobs_platform.store.database_errors import recorded_error
from jobs_platform.store.partitions import current_episode

_INTERRUPTED = Verdict(Classification.INTERRUPTED, None, "shutdown requested")
_LOST = Verdict(Classification.LEASE_LOST, None, "partition lease lost")


def record_failure(
    place: Workplace,
    attempt: StartedAttempt,
    exc: BaseException,
    *,
    interrupted: bool,
    past_deadline: bool,
) -> Failed:
    """Record a failed attempt (fenced) and settle what follows."""
    asset, partition = place.spec.asset, attempt.partition
    verdict = _INTERRUPTED if interrupted else classify(exc)
    exc = recorded_error(exc, verdict)  # a deployment error names its deploy step
    if verdict.classification is Classification.LEASE_LOST and past_deadline:
        exc = AttemptTimedOut(f"attempt passed its deadline and lost its lease: {exc}")
        verdict = classify(exc)
    try:
        with place.store.begin() as connection:
            owner = lease_store.owns_lease(connection, attempt.lease)
            if not owner and verdict.classification is not Classification.INTERRUPTED:
                exc = _error_of_a_lost_attempt(exc, past_deadline, attempt)
                verdict = classify(exc)
            rule = None
            if owner:
                # A rule a person taught for this cause decides before the table.
                taught = taught_verdict(
                    connection, asset, partition, verdict, type(exc).__name__, _message(exc)
                )
                verdict, rule = taught.verdict, taught.rule
            place.store.attempts.finish(
                connection, attempt.history_id, _failure(exc, verdict, rule)
            )
            settled = settle(
                connection,
                place.budget,
                asset,
                partition,
                attempt.episode,
                verdict if owner else _LOST,
                record=Record.OWNER if owner else Record.NOTHING,
                store=place.store,
                rng=place.rng,
            )
            if owner:
                lease_store.release_lease(connection, attempt.lease)
    except sa.exc.SQLAlchemyError as record_error:
        # The warehouse is unreachable: the attempt stays "running" and the next worker
        # records it as a crash, which still counts. Retry the whole attempt later.
        place.log.error("could not record the failed attempt: %s", record_error)
        settled = settle_unrecorded(place.budget, classify(record_error), attempt.number, place.rng)
    return Failed(
        asset,
        partition,
        exc,
        verdict=verdict,
        decision=settled.decision,
        attempt=attempt.number,
        failures=settled.failures,
        entry_id=settled.entry_id,
    )


def _error_of_a_lost_attempt(
    exc: BaseException, past_deadline: bool, attempt: StartedAttempt
) -> BaseException:
    """What a worker that no longer owns the lease records of its own failed attempt.

    Past its deadline it spent an attempt (a partition that hangs every worker must still
    reach its ceiling); otherwise it lost the partition, which says nothing of the input.
    """
    if past_deadline:
        return AttemptTimedOut(f"attempt passed its deadline and lost its lease: {exc}")
    lease = attempt.lease
    return LeaseLostError(
        f"lease on {lease.asset}/{lease.partition} (token {lease.token}) was taken over "
        f"before this attempt could record its failure: {type(exc).__name__}: {exc}"
    )


def record_error_before_attempt(
    budget: RetryBudget, asset: str, partition: str, exc: Exception, tries: int, rng: random.Random
) -> Failed:
    """A failure in the gate, the lease or the attempt's start: there is no attempt to fail.

    `tries` counts this step's consecutive tries (the warehouse may be what failed, so
    the count cannot live there); the ceiling stops the run, never a crash loop.
    """
    verdict = classify(exc)
    settled = settle_unrecorded(budget, verdict, tries, rng)
    return Failed(
        asset,
        partition,
        recorded_error(exc, verdict),
        verdict=verdict,
        decision=settled.decision,
        attempt=None,
        failures=settled.failures,
    )


def quarantine_if_spent(
    store: Warehouse, settings: Settings, asset: str, partition: str, *, holder: str
) -> int | None:
    """Quarantine a partition whose last failure was terminal or whose budget is spent.

    For reporters that did not see the failure themselves (the failure hook after Dagster
    gave up on a step). Fenced like a worker: it takes the lease first, so it never
    quarantines a partition that a live worker holds; an interrupted or lease-lost last
    attempt, or budget left, quarantines nothing.
    """
    try:
        grant = store.leases.acquire(
            asset, partition, holder=holder, run_id=None, ttl_seconds=settings.lease_seconds
        )
    except lease_store.LeaseBusy:
        return None
    with store.begin() as connection:
        episode = current_episode(connection, asset, partition)
        settled = settle(
            connection,
            RetryBudget.from_settings(settings),
            asset,
            partition,
            episode,
            None,  # the last recorded failure
            record=Record.QUARANTINE_ONLY,
            store=store,
        )
        lease_store.release_lease(connection, grant.lease)
    return settled.entry_id if settled is not None else None


def _failure(
    exc: BaseException, verdict: Verdict, rule: str | None = None
) -> history.AttemptFailure:
    return history.AttemptFailure(
        error_class=verdict.classification,
        error_type=type(exc).__name__,
        message=_message(exc),
        traceback="".join(traceback.format_exception(exc))[-16000:],
        rule=rule,
    )


def _message(exc: BaseException) -> str:
    """The message the history records (and the dead letter signs)."""
    return str(exc)[:4000] or type(exc).__name__
