"""What follows an attempt that did not finish its partition: decided and recorded here.

`settle` is the one place that turns a failure into a next step: it reads the episode's
budget (`store.attempts.budget_state`, the only count of it), asks the pure rule
(`decisions.decide`) and records what was decided (a quarantine entry, or the partition
marked failed) in the caller's transaction. The stops that record nothing are decided
here too: a busy lease (`snooze`) and a failure before any attempt or while the warehouse
cannot be written (`settle_unrecorded`). The gate decides nothing: quarantined stays
quarantined (`outcomes.Refused`), blocked waits for its upstream (`outcomes.Blocked`).
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import overload

import sqlalchemy as sa

from jobs_platform.engine.decisions import Decision, NextStep, RetryBudget, decide
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.errors import Classification, Verdict
from jobs_platform.store import attempts as history
from jobs_platform.store.partitions import PartitionStatus


class Record(enum.Enum):
    """What `settle` may write besides deciding."""

    OWNER = "owner"  # the lease's owner: quarantine, or mark the partition failed
    QUARANTINE_ONLY = "quarantine_only"  # before an attempt, or the hook: quarantine if due
    NOTHING = "nothing"  # the lease is someone else's: the partition is not ours to mark


@dataclass(frozen=True)
class Settled:
    """The decision, the budget it was taken on, and the quarantine entry it made."""

    decision: Decision
    failures: int  # the episode's counted failures (or the tries, when nothing is recorded)
    entry_id: int | None = None


@overload
def settle(
    connection: sa.Connection,
    budget: RetryBudget,
    asset: str,
    partition: str,
    episode: int,
    verdict: Verdict,
    *,
    record: Record,
    store: Warehouse,
    rng: random.Random | None = None,
) -> Settled: ...


@overload
def settle(
    connection: sa.Connection,
    budget: RetryBudget,
    asset: str,
    partition: str,
    episode: int,
    verdict: None,
    *,
    record: Record,
    store: Warehouse,
    rng: random.Random | None = None,
) -> Settled | None: ...


def settle(
    connection: sa.Connection,
    budget: RetryBudget,
    asset: str,
    partition: str,
    episode: int,
    verdict: Verdict | None,
    *,
    record: Record,
    store: Warehouse,
    rng: random.Random | None = None,
) -> Settled | None:
    """Decide from the episode's budget what follows, and record it (in `connection`).

    `verdict` is the failure being settled, already in the history; None settles the
    latest recorded one (None is returned when there is none). Run it in the transaction
    that recorded the failure, with the lease row locked, so no takeover slips in between.
    What it records is stamped on `store`'s clock.
    """
    state = history.budget_state(connection, asset, partition, episode)
    if verdict is None:
        if state.last_class is None:
            return None
        verdict = Verdict(state.last_class, None, "the last attempt")
    decision = decide(verdict, state.counted_failures, budget, rng)
    entry_id = None
    if record is not Record.NOTHING and decision.next_step is NextStep.QUARANTINE:
        entry_id = store.dead_letter.quarantine_partition(connection, asset, partition, episode)
    elif record is Record.OWNER and verdict.classification is not Classification.LEASE_LOST:
        store.partitions.set_status(connection, asset, partition, PartitionStatus.FAILED)
    return Settled(decision, state.counted_failures, entry_id)


def settle_unrecorded(
    budget: RetryBudget, verdict: Verdict, tries: int, rng: random.Random | None = None
) -> Settled:
    """A failure nothing could be recorded for: the warehouse may be what failed.

    `tries` is what this process knows of (the step's consecutive tries, or the attempt's
    number); the partition is not ours to quarantine, so a spent budget stops the run.
    """
    return Settled(decide(verdict, tries, budget, rng, attempt_started=False), tries)


def snooze(budget: RetryBudget, busy_for: float, rng: random.Random | None = None) -> Decision:
    """Another live worker holds the lease for `busy_for` more seconds: later, for free."""
    return decide(None, 0, budget, rng, busy_for=busy_for)
