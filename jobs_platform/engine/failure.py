"""What a failure is recorded as, and who may record what.

- The owner of the lease (its token is still the current one) records its attempt, then
  marks the partition failed or quarantines it, and releases the lease: one transaction,
  with the lease row locked so that no takeover slips in between.
- A worker that lost its lease records its own attempt and nothing else: the partition
  belongs to whoever holds the lease now (it may have finished it already).
- A failure before any attempt began is classified like any other, but nothing about the
  input is known: it is retried with backoff and stops the run at the ceiling.
"""

from __future__ import annotations

import traceback

import sqlalchemy as sa

from jobs_platform.engine.attempt import Attempt, Workplace
from jobs_platform.engine.decisions import Decision, NextStep, RetryBudget, decide
from jobs_platform.engine.events import EventTrail, Lifecycle
from jobs_platform.engine.results import FailedAttempt
from jobs_platform.errors import (
    AttemptTimedOut,
    Classification,
    LeaseLostError,
    Verdict,
    as_recorded,
    classify,
)
from jobs_platform.settings import Settings
from jobs_platform.store import attempts as attempt_store
from jobs_platform.store import leases as lease_store
from jobs_platform.store import quarantine as quarantine_store
from jobs_platform.store.clock import DATABASE_CLOCK, LeaseClock
from jobs_platform.store.partitions import PartitionStatus, current_episode, set_partition_status

_INTERRUPTED = Verdict(Classification.INTERRUPTED, None, "shutdown requested")


def record_failure(
    place: Workplace,
    attempt: Attempt,
    exc: BaseException,
    *,
    interrupted: bool,
    past_deadline: bool,
) -> FailedAttempt:
    """Record a failed attempt (fenced) and decide what follows."""
    spec, partition = place.spec, attempt.partition
    verdict = _INTERRUPTED if interrupted else classify(exc)
    exc = as_recorded(exc, verdict)  # a deployment error names its deploy step
    if verdict.classification is Classification.LEASE_LOST and past_deadline:
        exc = AttemptTimedOut(f"attempt passed its deadline and lost its lease: {exc}")
        verdict = classify(exc)
    entry_id = None
    try:
        with place.engine.begin() as connection:
            if lease_store.owns_lease(connection, attempt.lease):
                attempt_store.finish_attempt(connection, attempt.attempt_id, _failure(exc, verdict))
                failures = attempt_store.counted_failures(
                    connection, spec.asset, partition, attempt.episode
                )
                decision = decide(verdict, failures, place.budget, place.rng)
                if decision.next_step is NextStep.QUARANTINE:
                    entry_id = quarantine_store.quarantine_partition(
                        connection, spec.asset, partition, attempt.episode
                    )
                elif verdict.classification is not Classification.LEASE_LOST:
                    set_partition_status(connection, spec.asset, partition, PartitionStatus.FAILED)
                lease_store.release_lease(connection, attempt.lease)
            else:
                exc, verdict = _as_lost(exc, verdict, past_deadline, attempt)
                attempt_store.finish_attempt(connection, attempt.attempt_id, _failure(exc, verdict))
                failures = attempt_store.counted_failures(
                    connection, spec.asset, partition, attempt.episode
                )
                decision = decide(_LOST, failures, place.budget, place.rng)
    except sa.exc.SQLAlchemyError as record_error:
        # The warehouse is unreachable: the attempt stays "running" and the next worker
        # records it as a crash, which still counts. Retry the whole attempt later.
        place.log.error("could not record the failed attempt: %s", record_error)
        failures = attempt.number
        decision = decide(
            classify(record_error), failures, place.budget, place.rng, attempt_started=False
        )
    _report(attempt.trail, exc, verdict, failures, decision, entry_id)
    return FailedAttempt(
        spec.asset, partition, decision, verdict, attempt.number, failures, entry_id, exc
    )


_LOST = Verdict(Classification.LEASE_LOST, None, "partition lease lost")


def _as_lost(
    exc: BaseException, verdict: Verdict, past_deadline: bool, attempt: Attempt
) -> tuple[BaseException, Verdict]:
    """What a worker that no longer owns the lease records of its own attempt.

    Past its deadline it spent an attempt (a partition that hangs every worker must still
    reach its ceiling); otherwise it lost the partition, which says nothing of the input.
    """
    lease = attempt.lease
    if verdict.classification is Classification.INTERRUPTED:
        return exc, verdict
    if past_deadline:
        timed_out = AttemptTimedOut(f"attempt passed its deadline and lost its lease: {exc}")
        return timed_out, classify(timed_out)
    lost = LeaseLostError(
        f"lease on {lease.asset}/{lease.partition} (token {lease.token}) was taken over "
        f"before this attempt could record its failure: {type(exc).__name__}: {exc}"
    )
    return lost, _LOST


def record_error_before_attempt(
    budget: RetryBudget, trail: EventTrail, exc: Exception, failures: int, rng
) -> FailedAttempt:
    """A failure in the gate, the lease or the attempt's start: there is no attempt to fail.

    `failures` counts this step's consecutive tries (the warehouse may be what failed, so
    the count cannot live there); the ceiling stops the run, never a crash loop.
    """
    verdict = classify(exc)
    exc = as_recorded(exc, verdict)
    decision = decide(verdict, failures, budget, rng, attempt_started=False)
    _report(trail, exc, verdict, failures, decision, None, before_attempt=True)
    return FailedAttempt(trail.asset, trail.partition, decision, verdict, None, failures, None, exc)


def quarantine_if_spent(
    engine: sa.Engine,
    settings: Settings,
    asset: str,
    partition: str,
    *,
    holder: str,
    clock: LeaseClock = DATABASE_CLOCK,
) -> int | None:
    """Quarantine a partition whose last failure was terminal or whose budget is spent.

    For reporters that did not see the failure themselves (the failure hook after Dagster
    gave up on a step). Fenced like a worker: it takes the lease first, so it never
    quarantines a partition that a live worker holds; an interrupted or lease-lost last
    attempt, or budget left, quarantines nothing.
    """
    try:
        grant = lease_store.acquire_lease(
            engine,
            asset,
            partition,
            holder=holder,
            run_id=None,
            ttl_seconds=settings.lease_seconds,
            clock=clock,
        )
    except lease_store.LeaseBusy:
        return None
    entry_id = None
    with engine.begin() as connection:
        episode = current_episode(connection, asset, partition)
        streak = attempt_store.failing_streak(connection, asset, partition, episode)
        if streak:
            last = Verdict(Classification(streak[-1].error_class), None, "the last attempt")
            failures = sum(1 for row in streak if row.error_class in attempt_store.COUNTED_CLASSES)
            budget = RetryBudget.from_settings(settings)
            if decide(last, failures, budget).next_step is NextStep.QUARANTINE:
                entry_id = quarantine_store.quarantine_partition(
                    connection, asset, partition, episode
                )
        lease_store.release_lease(connection, grant.lease)
    return entry_id


def _failure(exc: BaseException, verdict: Verdict) -> attempt_store.AttemptFailure:
    return attempt_store.AttemptFailure(
        error_class=verdict.classification,
        error_type=type(exc).__name__,
        message=str(exc)[:4000] or type(exc).__name__,
        traceback="".join(traceback.format_exception(exc))[-16000:],
    )


def _report(
    trail: EventTrail,
    exc: BaseException,
    verdict: Verdict,
    failures: int,
    decision: Decision,
    entry_id: int | None,
    *,
    before_attempt: bool = False,
) -> None:
    message = (str(exc) or type(exc).__name__).splitlines()[0][:500]
    if before_attempt:
        message = f"before the attempt started: {message}"
    trail.emit(
        Lifecycle.FAILED,
        message,
        error_class=str(verdict.classification),
        error_type=type(exc).__name__,
        failures=failures,
    )
    if decision.next_step is NextStep.QUARANTINE:
        trail.emit(
            Lifecycle.QUARANTINED,
            f"after {failures} attempt(s)",
            error_class=str(verdict.classification),
            entry_id=entry_id,
        )
    elif decision.next_step is NextStep.GIVE_UP:
        trail.emit(
            Lifecycle.FAILED,
            f"giving up after {failures} tries; the partition is not quarantined",
            error_class=str(verdict.classification),
        )
    else:
        trail.emit(
            Lifecycle.RETRYING,
            error_class=str(verdict.classification),
            delay_seconds=round(decision.delay_seconds, 3),
            snooze=decision.next_step is NextStep.SNOOZE,
        )
