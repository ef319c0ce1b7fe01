"""The start of an attempt: gates → lease → attempt record, and the `Attempt` value it yields.

Two gates come first, and neither records an attempt: a quarantined partition is refused
(terminal, until requeued), and a partition whose upstream partitions are not all done is
blocked (it would be computed from partial input; it runs again with its upstream).

Everything later in the attempt path (chunks, finalize, failure bookkeeping) works from
one `Attempt`: which partition, under which lease token, as which numbered attempt of
which episode, until which deadline.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.engine.decisions import Decision, NextStep, RetryBudget, decide
from jobs_platform.engine.events import EventTrail, Lifecycle
from jobs_platform.engine.results import AttemptInfo, FailedAttempt
from jobs_platform.engine.spec import BackfillSpec
from jobs_platform.errors import Classification, JobsPlatformError, TerminalError, Verdict
from jobs_platform.settings import Settings
from jobs_platform.store import attempts as attempt_store
from jobs_platform.store import leases as lease_store
from jobs_platform.store import quarantine as quarantine_store
from jobs_platform.store.clock import LeaseClock
from jobs_platform.store.partitions import current_episode, unfinished

# What the attempts that never reported were, as far as anyone can tell.
_SPENT_BY_CRASHES = Verdict(Classification.CRASH, None, "attempt budget spent by crashes")


class UpstreamNotDone(JobsPlatformError):
    """A partition this one reads is not done: computing it now would use partial input."""


@dataclass(frozen=True)
class Workplace:
    """What every attempt of one backfill shares: its spec, settings, warehouse and clock.

    `upstream` names the backfills whose partition of the same key this one reads (the
    orchestrator knows which are partitioned alike); each must be done before an attempt.
    """

    spec: BackfillSpec
    settings: Settings
    engine: sa.Engine
    clock: LeaseClock
    rng: random.Random
    log: logging.Logger | logging.LoggerAdapter
    upstream: tuple[str, ...] = ()

    @property
    def budget(self) -> RetryBudget:
        return RetryBudget.from_settings(self.settings)


@dataclass(frozen=True)
class Attempt:
    """One started attempt at one partition, holding the lease whose token fences its commits."""

    partition: str
    lease: lease_store.Lease
    attempt_id: int
    number: int  # 1-based within the episode
    episode: int
    trail: EventTrail
    deadline: float  # time.monotonic() past which the heartbeat stops renewing
    began: float  # time.monotonic() at the start
    info: AttemptInfo

    @property
    def attempts_before(self) -> int:
        """Attempts of this episode recorded before this one (what failpoints count)."""
        return self.number - 1


def begin_attempt(
    place: Workplace, partition: str, info: AttemptInfo, trail: EventTrail
) -> Attempt | FailedAttempt:
    """Pass the gate, take the lease and record the attempt, or say why not."""
    spec = place.spec
    with place.engine.connect() as connection:
        entry = quarantine_store.active_entry(connection, spec.asset, partition)
        waiting_on = unfinished(connection, [(name, partition) for name in place.upstream])
    if entry is not None:
        return _refused_at_gate(spec.asset, partition, entry, trail)
    if waiting_on:
        return _blocked_by_upstream(spec.asset, partition, waiting_on, trail)
    try:
        grant = lease_store.acquire_lease(
            place.engine,
            spec.asset,
            partition,
            holder=info.holder or lease_store.this_holder(),
            run_id=info.run_id,
            ttl_seconds=place.settings.lease_seconds,
            clock=place.clock,
        )
    except lease_store.LeaseBusy as busy:
        decision = decide(None, 0, place.budget, place.rng, busy_for=busy.seconds_left)
        trail.emit(
            Lifecycle.RETRYING,
            str(busy),
            delay_seconds=round(decision.delay_seconds, 3),
            snooze=True,
        )
        return FailedAttempt(spec.asset, partition, decision, None, None, 0, None, busy)
    lease = grant.lease
    try:
        return _record_start(place, lease, info, trail)
    except BaseException:
        # No attempt exists to fail, so nothing else would give the partition back.
        with place.engine.begin() as connection:
            lease_store.release_lease(connection, lease)
        raise


def _record_start(
    place: Workplace, lease: lease_store.Lease, info: AttemptInfo, trail: EventTrail
) -> Attempt | FailedAttempt:
    spec, partition = place.spec, lease.partition
    with place.engine.begin() as connection:
        crashed = attempt_store.record_abandoned_attempts(
            connection, spec.asset, partition, lease.token, place.clock.now(connection)
        )
        if crashed:
            trail.log.warning("%s/%s: previous attempt recorded as a crash", spec.asset, partition)
        episode = current_episode(connection, spec.asset, partition)
        failures = attempt_store.counted_failures(connection, spec.asset, partition, episode)
        # A worker that dies every time never reports; the next one quarantines.
        if decide(_SPENT_BY_CRASHES, failures, place.budget).next_step is NextStep.QUARANTINE:
            entry_id = quarantine_store.quarantine_partition(
                connection, spec.asset, partition, episode
            )
            lease_store.release_lease(connection, lease)
            trail.emit(
                Lifecycle.QUARANTINED,
                f"attempt budget spent: {failures} attempt(s), the last ones crashed",
                error_class=str(Classification.CRASH),
                entry_id=entry_id,
            )
            return FailedAttempt(
                spec.asset,
                partition,
                Decision(NextStep.QUARANTINE),
                _SPENT_BY_CRASHES,
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
    began = time.monotonic()
    return Attempt(
        partition=partition,
        lease=lease,
        attempt_id=attempt_id,
        number=number,
        episode=episode,
        trail=trail.with_attempt(number),
        deadline=began + place.settings.attempt_timeout_seconds,
        began=began,
        info=info,
    )


def _refused_at_gate(asset: str, partition: str, entry: sa.Row, trail: EventTrail) -> FailedAttempt:
    error = TerminalError(
        f"{asset}/{partition} is quarantined (entry {entry.id}, {entry.attempts} attempts, "
        f"last error: {entry.last_error}); requeue it with: "
        f"jobs-platform dead-letter requeue {asset} {partition}"
    )
    trail.emit(Lifecycle.QUARANTINED, str(error), error_class=entry.error_class, entry_id=entry.id)
    return FailedAttempt(
        asset,
        partition,
        Decision(NextStep.QUARANTINE),
        Verdict(Classification.TERMINAL, None, "quarantined"),
        attempt=None,
        failures=entry.attempts,
        entry_id=entry.id,
        error=error,
        gated=True,
    )


def _blocked_by_upstream(
    asset: str, partition: str, waiting_on: dict[tuple[str, str], str], trail: EventTrail
) -> FailedAttempt:
    upstream = ", ".join(f"{name}/{key} ({status})" for (name, key), status in waiting_on.items())
    error = UpstreamNotDone(
        f"{asset}/{partition} not attempted: it reads {upstream}, which is not done; it "
        "runs with its upstream (a requeue of an upstream partition relaunches it too)"
    )
    trail.emit(Lifecycle.BLOCKED, str(error))
    return FailedAttempt(
        asset,
        partition,
        Decision(NextStep.BLOCKED),
        verdict=None,
        attempt=None,
        failures=0,
        entry_id=None,
        error=error,
    )
