"""What happens after a failed attempt: one pure function of the verdict and the count."""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from jobs_platform.errors import Classification, Verdict

# The longest a backoff may grow to: past this, waiting longer only hides the problem.
MAX_BACKOFF_SECONDS = 300.0


class NextStep(enum.StrEnum):
    """What the orchestrator should do with the partition after this attempt."""

    RETRY = "retry"  # retryable and budget left: try again after the delay
    SNOOZE = "snooze"  # not the input's fault (busy, lease lost, interrupted): later, free
    QUARANTINE = "quarantine"  # terminal, or the budget is spent: stop and surface


@dataclass(frozen=True)
class Decision:
    next_step: NextStep
    delay_seconds: float = 0.0


def full_jitter_delay(
    attempt: int,
    base_seconds: float,
    rng: random.Random | None = None,
    cap: float = MAX_BACKOFF_SECONDS,
) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base·2^(attempt-1))]."""
    ceiling = min(cap, base_seconds * (2 ** max(0, attempt - 1)))
    return (rng or random).uniform(0.0, ceiling)


def decide_after_failure(
    verdict: Verdict,
    failures_in_episode: int,
    max_attempts: int,
    base_delay_seconds: float,
    rng: random.Random | None = None,
) -> Decision:
    """Decide retry, snooze or quarantine; `failures_in_episode` includes this attempt."""
    if verdict.classification is Classification.TERMINAL:
        return Decision(NextStep.QUARANTINE)
    if verdict.classification in (Classification.LEASE_LOST, Classification.INTERRUPTED):
        return Decision(NextStep.SNOOZE, base_delay_seconds)
    if failures_in_episode >= max_attempts:
        return Decision(NextStep.QUARANTINE)
    delay = full_jitter_delay(failures_in_episode, base_delay_seconds, rng)
    if verdict.retry_after is not None:
        # The server said when; never come back sooner than that.
        delay = max(delay, verdict.retry_after)
    return Decision(NextStep.RETRY, delay)
