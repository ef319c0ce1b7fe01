"""When each partition of a retrying step is due again: a pure rule, no Dagster, no database.

Dagster retries a step, not a partition. A step over a range attempts each partition on
its own account, and each one that did not finish was given its own delay: its backoff,
a server's `Retry-After`, a snooze. The step comes back when the first of them is due and
attempts only the partitions that are due then; a partition whose delay has not passed is
skipped, recording and spending nothing, and the step comes back again when the next one
is due. So a partition of a ranged step waits as long as it would in a step of its own,
and its tries (what bounds failures nothing could record, the warehouse down) count its
own attempts, not the step's.

What a step try leaves for the next (`RetrySchedule`) is relative: each partition is due
`due_in` seconds after the step asked to be retried, and the step waits `wait_seconds`,
the smallest of them, before its next try. Either Dagster waits it (its retry delay), or
the next try sleeps it at its start, Dagster restarting the step at once
(`waits_in_next_try`). The next try measures how long it has waited on the same kernel's
monotonic clock, and otherwise (another host) counts what Dagster waited and what it slept
itself: a partition is never attempted early, at worst late by what could not be measured.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from jobs_platform.engine.decisions import WAITING_STEPS

# The smallest wait of a step (Dagster rounds nothing; 1 ms keeps it positive).
MIN_WAIT_SECONDS = 0.001
# A partition whose next step waits (`decisions.WAITING_STEPS`) is due after its delay; any
# other entry is due at once (one that failed before its attempt and spent its tries: it is
# tried with those tries).


@dataclass(frozen=True)
class Waiting:
    """A partition that did not finish in this step try and will be tried again.

    `delay_seconds` counts from `decided_at` (monotonic seconds, when its delay was
    decided); `tries` is how many times this step has attempted it, this try included.
    """

    asset: str
    partition: str
    delay_seconds: float
    decided_at: float
    tries: int
    next_step: str = "retry"


@dataclass(frozen=True)
class Pending:
    """A partition of the schedule: due `due_in` seconds after the step asked to retry."""

    asset: str
    partition: str
    due_in: float
    tries: int
    next_step: str = "retry"


@dataclass(frozen=True)
class RetrySchedule:
    """The partitions a step try left to retry, on the clock it asked on."""

    pending: tuple[Pending, ...]
    clock: str  # whose monotonic clock `asked_at` is on ("" when unknown)
    asked_at: float  # monotonic seconds when the step asked to be retried
    # True: the next try sleeps `wait_seconds` itself, and Dagster restarts the step at once.
    waits_in_next_try: bool = False

    @property
    def wait_seconds(self) -> float:
        """How long the step waits before its next try: until the first partition is due."""
        soonest = min((p.due_in for p in self.pending if p.next_step in WAITING_STEPS), default=0.0)
        return max(MIN_WAIT_SECONDS, math.ceil(soonest * 1000) / 1000)

    @property
    def dagster_wait_seconds(self) -> float:
        """The retry delay the step asks Dagster for: all of its wait, or none of it."""
        return 0.0 if self.waits_in_next_try else self.wait_seconds

    def waited(self, clock: str, now: float, *, slept: float = 0.0) -> float:
        """How long the step has waited since it asked, by a next try that began at `now`
        and then slept `slept` seconds itself (`now` counts from after that sleep).

        On the same clock this is measured. On another it is what Dagster waited plus what
        the try slept, the least it can have been.
        """
        measured = now - self.asked_at if clock and clock == self.clock else 0.0
        return max(self.dagster_wait_seconds + slept, measured)

    def left_to_sleep(self, clock: str, now: float) -> float:
        """What a next try beginning at `now` sleeps before its first partition is due.

        Zero when Dagster waited the whole wait. Example: a wait of 9 s left to the next try,
        which begins 0.8 s after the step asked on the same host, sleeps 8.2 s.
        """
        return max(0.0, self.wait_seconds - self.waited(clock, now))

    def pending_for(self, asset: str, partition: str) -> Pending | None:
        for pending in self.pending:
            if (pending.asset, pending.partition) == (asset, partition):
                return pending
        return None

    def to_record(self, pending: Pending) -> dict[str, str | int | float]:
        """One partition's entry, with what the whole schedule needs, as plain values."""
        return {
            "due_in": pending.due_in,
            "tries": pending.tries,
            "next_step": pending.next_step,
            "clock": self.clock,
            "asked_at": self.asked_at,
            "waits_in_next_try": int(self.waits_in_next_try),
        }

    @classmethod
    def from_records(
        cls, records: Mapping[tuple[str, str], Mapping[str, object]]
    ) -> RetrySchedule | None:
        """The schedule from each (asset, partition)'s entry (`to_record`); None if none."""
        if not records:
            return None
        first = next(iter(records.values()))
        pending = tuple(
            Pending(
                asset,
                partition,
                due_in=_number(entry["due_in"]),
                tries=int(_number(entry["tries"])),
                next_step=str(entry.get("next_step", "retry")),
            )
            for (asset, partition), entry in records.items()
        )
        return cls(
            pending,
            clock=str(first["clock"]),
            asked_at=_number(first["asked_at"]),
            # Absent in a schedule logged before the next try could sleep: Dagster waited.
            waits_in_next_try=bool(_number(first.get("waits_in_next_try", 0))),
        )


@dataclass(frozen=True)
class Due:
    """Whether a partition is attempted in this step try, and with how many tries before."""

    attempt: bool
    tries_before: int
    remaining_seconds: float = 0.0  # when not attempted: how long until it is due
    next_step: str = "retry"


def due_now(
    schedule: RetrySchedule | None,
    asset: str,
    partition: str,
    *,
    waited: float,
    step_retry: int,
) -> Due:
    """Whether `asset`/`partition` is due in a step try that began `waited` s after asking.

    Without a schedule (the first try, or a previous try that left none: its process
    died) every partition is due, and each has had the step's tries (`step_retry`).
    A partition the schedule does not name (it finished, or is quarantined) is due.
    """
    if schedule is None:
        return Due(attempt=True, tries_before=step_retry)
    pending = schedule.pending_for(asset, partition)
    if pending is None:
        return Due(attempt=True, tries_before=0)
    remaining = pending.due_in - waited
    if remaining > 0:
        return Due(False, pending.tries, remaining, pending.next_step)
    return Due(attempt=True, tries_before=pending.tries)


def schedule_retry(
    waiting: Iterable[Waiting], *, clock: str, now: float, waits_in_next_try: bool = False
) -> RetrySchedule:
    """The schedule a step try leaves when it asks, at `now`, to be retried.

    `waits_in_next_try`: the next try sleeps the wait, not Dagster (`RetrySchedule`).
    """
    pending = tuple(
        Pending(
            w.asset,
            w.partition,
            due_in=max(0.0, w.delay_seconds - max(0.0, now - w.decided_at)),
            tries=w.tries,
            next_step=w.next_step,
        )
        for w in waiting
    )
    if not any(p.next_step in WAITING_STEPS for p in pending):
        raise ValueError("a step retries only when some partition waits")
    return RetrySchedule(pending, clock=clock, asked_at=now, waits_in_next_try=waits_in_next_try)


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"not a number in a retry schedule: {value!r}")
    return float(value)
