"""What happens after an attempt did not finish its partition: one pure function decides.

`decide` owns the quarantine rule and every delay: the backoff of a failed attempt, the
snooze of a busy partition, the wait after a failure before any attempt began. It is
pure; `settle.settle` gathers the facts (the verdict, the budget) and records what it says.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from jobs_platform.errors import Classification, Verdict
from jobs_platform.settings import Settings

# The longest a backoff may grow to: past this, waiting longer only hides the problem.
MAX_BACKOFF_SECONDS = 300.0
# A busy partition is looked at again no sooner than this (and no later than a third of a TTL).
MIN_SNOOZE_SECONDS = 0.5


class NextStep(enum.StrEnum):
    """What the orchestrator should do with the partition after this attempt."""

    RETRY = "retry"  # retryable and budget left: try again after the delay
    SNOOZE = "snooze"  # not the input's fault (busy, lease lost, interrupted): later, free
    QUARANTINE = "quarantine"  # terminal, or the budget is spent: stop and surface
    GIVE_UP = "give_up"  # failed before any attempt began, and for good: stop this run only


# The next steps that try the partition again after a delay; the others are due at once.
WAITING_STEPS = frozenset({NextStep.RETRY, NextStep.SNOOZE})


@dataclass(frozen=True)
class Decision:
    next_step: NextStep
    delay_seconds: float = 0.0

    @property
    def waits(self) -> bool:
        """Tried again after `delay_seconds`: a retry or a snooze."""
        return self.next_step in WAITING_STEPS


@dataclass(frozen=True)
class RetryBudget:
    """The settings `decide` needs: the ceiling, the backoff base and the lease TTL."""

    max_attempts: int
    base_delay_seconds: float
    lease_seconds: float

    @classmethod
    def from_settings(cls, settings: Settings) -> RetryBudget:
        return cls(settings.max_attempts, settings.retry_delay_seconds, settings.lease_seconds)


def full_jitter_delay(
    attempt: int,
    base_seconds: float,
    rng: random.Random | None = None,
    cap: float = MAX_BACKOFF_SECONDS,
) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base·2^(attempt-1))]."""
    ceiling = min(cap, base_seconds * (2 ** max(0, attempt - 1)))
    return (rng or random).uniform(0.0, ceiling)


def decide(
    verdict: Verdict | None,
    failures: int,
    budget: RetryBudget,
    rng: random.Random | None = None,
    *,
    attempt_started: bool = True,
    busy_for: float = 0.0,
) -> Decision:
    """Decide what follows an attempt that did not finish its partition.

    `verdict` is None when nothing failed: another live worker holds the lease for
    `busy_for` more seconds. `failures` counts the episode's counted failures, this one
    included. Before any attempt began (`attempt_started=False`) nothing is known about
    the input and the partition is not ours to quarantine: a spent budget stops this run.
    """
    rng = rng or random.Random()
    if verdict is None:
        # Come back when the lease could have expired, spread out (up to half as long
        # again) so that waiters do not stampede.
        delay = max(MIN_SNOOZE_SECONDS, min(busy_for, budget.lease_seconds / 3))
        return Decision(NextStep.SNOOZE, delay * (1 + rng.random() / 2))
    classification = verdict.classification
    if classification in (Classification.LEASE_LOST, Classification.INTERRUPTED):
        return Decision(NextStep.SNOOZE, budget.base_delay_seconds)
    stop = NextStep.QUARANTINE if attempt_started else NextStep.GIVE_UP
    if classification is Classification.TERMINAL or failures >= budget.max_attempts:
        return Decision(stop)
    delay = full_jitter_delay(failures, budget.base_delay_seconds, rng)
    if verdict.retry_after is not None:
        # The server said when; never come back sooner than that.
        delay = max(delay, verdict.retry_after)
    return Decision(NextStep.RETRY, delay)
