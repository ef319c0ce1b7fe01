"""The start of an attempt: gates → lease → attempt record, and the `StartedAttempt` it yields.

Three gates come first, and none records an attempt: a quarantined partition is refused
(terminal, until requeued), a partition whose upstream partitions are not all done is
blocked (it would be computed from partial input; it runs again with its upstream), and a
partition of a paused backfill, or whose input is not ready, is held (`engine.holding`).
Once the lease is held, an open circuit of the backfill (`steering.circuits`) snoozes every
partition but its one probe, for free.

Everything later in the attempt path (chunks, finalize, failure bookkeeping) works from
one `StartedAttempt`: which partition, under which lease token, as which numbered attempt
of which episode, until which deadline. What did not start is an outcome saying why
(`outcomes.Refused`, `Blocked`, `Held`, `Busy`, `BudgetSpent`).
"""

from __future__ import annotations

import enum
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.dead_letter.entries import active_entry
from jobs_platform.engine.decisions import Decision, NextStep, RetryBudget
from jobs_platform.engine.events import EventTrail
from jobs_platform.engine.holding import hold_back
from jobs_platform.engine.outcomes import Blocked, BudgetSpent, Busy, Held, Refused
from jobs_platform.engine.settle import Record, settle, snooze
from jobs_platform.engine.spec import BackfillSpec, UpstreamReads, reads_nothing
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.errors import Classification, JobsPlatformError, TerminalError, Verdict
from jobs_platform.settings import Settings
from jobs_platform.steering.circuit_rule import CircuitRule
from jobs_platform.steering.circuits import CircuitOpen, Probe
from jobs_platform.steering.pauses import Pause, pause_of
from jobs_platform.store import leases as lease_store
from jobs_platform.store.partitions import current_episode, unfinished
from jobs_platform.store.rows import TableRow

# What the attempts that never reported were, as far as anyone can tell.
_SPENT_BY_CRASHES = Verdict(Classification.CRASH, None, "attempt budget spent by crashes")


class UpstreamNotDone(JobsPlatformError):
    """A partition this one reads is not done: computing it now would use partial input."""


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
class Workplace:
    """What every attempt of one backfill shares: its spec, settings and store (the
    warehouse and the clock every stamp reads).

    `upstream(partition)` names the (backfill, partition) pairs that partition reads: the
    orchestrator knows them from its partition mappings (the same key for backfills
    partitioned alike, the day's 24 hours for a daily one reading an hourly one, ...); each
    must be done before an attempt.
    """

    spec: BackfillSpec
    settings: Settings
    store: Warehouse
    rng: random.Random
    log: logging.Logger | logging.LoggerAdapter[logging.Logger]
    upstream: UpstreamReads = reads_nothing

    @property
    def budget(self) -> RetryBudget:
        return RetryBudget.from_settings(self.settings)


@dataclass(frozen=True)
class StartedAttempt:
    """One started attempt at one partition, holding the lease whose token fences its commits."""

    partition: str
    lease: lease_store.Lease
    history_id: int  # its row in the attempt history (`jp_attempts.id`)
    number: int  # 1-based within the episode
    episode: int
    trail: EventTrail  # the events' shared fields, this attempt's number included
    deadline: float  # time.monotonic() past which the heartbeat stops renewing
    began: float  # time.monotonic() at the start
    attempter: Attempter
    probe: bool = False  # admitted as the probe of its backfill's open circuits

    @property
    def attempts_before(self) -> int:
        """Attempts of this episode recorded before this one (what failpoints count)."""
        return self.number - 1


def begin_attempt(
    place: Workplace, partition: str, attempter: Attempter, trail: EventTrail
) -> StartedAttempt | Refused | Blocked | Held | Busy | BudgetSpent:
    """Pass the gates, take the lease and record the attempt, or say why not.

    The gates' reads, the lease and the attempt row are ONE transaction: the lease is never
    held without its attempt row, and a rollback gives the partition back by itself. A
    backfill declared with `ready=` asks its reader between the gates and the lease, so
    the lease is taken in a second transaction there (the reader does no work under it).
    """
    try:
        with place.store.begin() as connection:
            gated = _gates(connection, place.spec.asset, partition, place.upstream)
            if gated is None and place.spec.ready is None:
                return _start(place, connection, partition, attempter, trail)
        if isinstance(gated, Refused | Blocked):
            return gated
        held = hold_back(
            place.spec, place.store, place.log, partition, run_id=attempter.run_id, paused=gated
        )
        if held is not None:
            return held
        with place.store.begin() as connection:
            return _start(place, connection, partition, attempter, trail)
    except lease_store.LeaseBusy as busy:
        decision = snooze(place.budget, busy.seconds_left, place.rng)
        return Busy(place.spec.asset, partition, busy, decision=decision)


def _gates(
    connection: sa.Connection, asset: str, partition: str, upstream: UpstreamReads
) -> Refused | Blocked | Pause | None:
    """The quarantine and upstream gates' verdict, or the backfill's pause, or None: go on."""
    entry = active_entry(connection, asset, partition)
    waiting_on = unfinished(connection, list(upstream(partition)))
    paused = pause_of(connection, asset)
    closed = gate(quarantined=entry is not None, waiting_on=waiting_on)
    if closed is Gate.QUARANTINED and entry is not None:
        return Refused(
            asset,
            partition,
            _quarantined(asset, partition, entry),
            entry_id=entry.id,
            entry_class=entry.error_class,
            failures=entry.attempts,
        )
    if closed is Gate.BLOCKED:
        return blocked_by(asset, partition, waiting_on)
    return paused


def _start(
    place: Workplace,
    connection: sa.Connection,
    partition: str,
    attempter: Attempter,
    trail: EventTrail,
) -> StartedAttempt | Busy | BudgetSpent:
    """The lease, the circuit's admission and the attempt row, in the caller's transaction."""
    grant = place.store.leases.acquire_on(
        connection,
        place.spec.asset,
        partition,
        holder=attempter.holder or lease_store.this_holder(),
        run_id=attempter.run_id,
        ttl_seconds=place.settings.lease_seconds,
    )
    lease = grant.lease
    admitted = _admit(place, connection, lease, trail)
    if isinstance(admitted, Busy):
        return admitted
    return _record_start(
        place, connection, lease, attempter, trail, probe=admitted, first=grant.first
    )


def _admit(
    place: Workplace, connection: sa.Connection, lease: lease_store.Lease, trail: EventTrail
) -> Busy | bool:
    """The backfill's circuit for a cause is open and this is not its probe: a snooze,
    nothing recorded or spent (`steering.circuits`). Else whether it is the probe."""
    asset, partition = place.spec.asset, lease.partition
    rule = CircuitRule.from_settings(place.settings)
    admitted = place.store.circuits.admit(connection, rule, asset, partition, lease.token)
    if isinstance(admitted, CircuitOpen):
        lease_store.release_lease(connection, lease)
        decision = Decision(NextStep.SNOOZE, admitted.snooze_seconds)
        return Busy(asset, partition, admitted, decision=decision)
    if isinstance(admitted, Probe):
        trail.log.warning(
            "%s/%s: probing the open circuit(s) %s",
            asset,
            partition,
            ", ".join(admitted.signatures),
        )
        return True
    return False


def _record_start(
    place: Workplace,
    connection: sa.Connection,
    lease: lease_store.Lease,
    attempter: Attempter,
    trail: EventTrail,
    *,
    probe: bool,
    first: bool,
) -> StartedAttempt | BudgetSpent:
    """The attempt row; first, a crashed attempt before it recorded, and the budget it may
    have spent settled. The partition's first lease (`first`) has no attempt before it."""
    asset, partition = place.spec.asset, lease.partition
    episode = current_episode(connection, asset, partition)
    # With no attempt before, nothing crashed and no budget is spent (unless it is zero).
    nothing_to_settle = first and place.budget.max_attempts > 0
    spent = None if nothing_to_settle else _settle_crashes(place, connection, lease, trail, episode)
    if spent is not None:
        return spent
    history_id, number = place.store.attempts.start(
        connection,
        asset=asset,
        partition=partition,
        episode=episode,
        run_id=attempter.run_id,
        step_retry=attempter.step_retry,
        token=lease.token,
        holder=lease.holder,
        correlation_id=attempter.correlation_id,
        code_version=place.spec.version,
        first=first,
    )
    lease_store.attach_attempt(connection, lease, history_id)
    began = time.monotonic()
    return StartedAttempt(
        partition=partition,
        lease=lease,
        history_id=history_id,
        number=number,
        episode=episode,
        trail=trail.with_attempt(number),
        deadline=began + place.settings.attempt_timeout_seconds,
        began=began,
        attempter=attempter,
        probe=probe,
    )


def _settle_crashes(
    place: Workplace,
    connection: sa.Connection,
    lease: lease_store.Lease,
    trail: EventTrail,
    episode: int,
) -> BudgetSpent | None:
    """Attempts that never reported recorded as crashes; the budget spent, quarantined."""
    asset, partition = place.spec.asset, lease.partition
    crashed = place.store.attempts.record_abandoned(connection, asset, partition, lease.token)
    if crashed:
        trail.log.warning("%s/%s: previous attempt recorded as a crash", asset, partition)
    # A worker that dies every time never reports; the next one quarantines.
    spent = settle(
        connection,
        place.budget,
        asset,
        partition,
        episode,
        _SPENT_BY_CRASHES,
        record=Record.QUARANTINE_ONLY,
        store=place.store,
    )
    if spent.decision.next_step is NextStep.QUARANTINE:
        lease_store.release_lease(connection, lease)
        return BudgetSpent(
            asset,
            partition,
            RuntimeError(f"{asset}/{partition} quarantined after {spent.failures} attempts"),
            verdict=_SPENT_BY_CRASHES,
            failures=spent.failures,
            entry_id=spent.entry_id,
        )
    return None


class Gate(enum.StrEnum):
    """Why the gate holds a partition back before any attempt; nothing is recorded."""

    QUARANTINED = "quarantined"  # an open dead-letter entry: it waits for a requeue
    BLOCKED = "blocked"  # a partition it reads is not done: it runs again with its upstream


def gate(*, quarantined: bool, waiting_on: Mapping[tuple[str, str], str]) -> Gate | None:
    """The gate's verdict on a partition (pure), or None when it may be attempted.

    `quarantined` is whether the partition has an open dead-letter entry; `waiting_on` are
    the upstream partitions it reads that are not done. The first that holds wins, in this
    order: `begin_attempt` decides with it, and `jobs-platform plan` says what it will decide.
    """
    if quarantined:
        return Gate.QUARANTINED
    if waiting_on:
        return Gate.BLOCKED
    return None


def blocked_by(asset: str, partition: str, waiting_on: dict[tuple[str, str], str]) -> Blocked:
    """Not attempted: the upstream partitions in `waiting_on` ((name, key) → status) are
    not done. Nothing is recorded; it runs again with its upstream."""
    return Blocked(asset, partition, _upstream_not_done(asset, partition, waiting_on))


def _quarantined(asset: str, partition: str, entry: TableRow) -> TerminalError:
    return TerminalError(
        f"{asset}/{partition} is quarantined (entry {entry.id}, {entry.attempts} attempts, "
        f"last error: {entry.last_error}); it runs again once requeued"
    )


def _upstream_not_done(
    asset: str, partition: str, waiting_on: dict[tuple[str, str], str]
) -> UpstreamNotDone:
    # A day reading 24 hours names the first few, and how many more: the message goes into
    # logs and the UI, where a month of hourly keys would bury it.
    named = [f"{name}/{key} ({status})" for (name, key), status in waiting_on.items()]
    shown = ", ".join(named[:_NAMED_UPSTREAM])
    if len(named) > _NAMED_UPSTREAM:
        shown += f" and {len(named) - _NAMED_UPSTREAM} more"
    return UpstreamNotDone(
        f"{asset}/{partition} not attempted: it reads {shown}, not done; it runs again "
        "with its upstream (a requeue of an upstream partition relaunches it too)"
    )


_NAMED_UPSTREAM = 5
