"""Readiness as `plan` asks it: `ready=` itself, for the partitions a launch would act on.

A launch's gate asks `ready` before each attempt (`engine.holding.hold_back`), after the
quarantine, the upstream and the pause. `plan` asks it the same question for each partition
the launch would otherwise run or quarantine, and for no other: a skipped partition's
input is not the launch's business. A partition the gate held before keeps the time it
was first held (`steering.holds`), so the plan can say it waits past its `max_wait`
(`steering.readiness.waited_past`, as the holds sensor reports it).

`ready` may be slow (a bucket's listing, a query). The plan asks within a budget of time,
in the order of the range; the partitions left unasked are said so, never guessed.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from jobs_platform.steering.holds import Hold
from jobs_platform.steering.readiness import waited_past

READY_BUDGET_SECONDS = 10.0
"""How long one plan asks `ready` for, in all. A `ready` that checks a file takes
microseconds (8,760 hours in a fraction of a second); one that lists a bucket may take a
second, and a plan must still answer at 3 a.m."""


@dataclass(frozen=True)
class NotReady:
    """A partition whose input is not ready, as far as the plan can tell."""

    since: dt.datetime | None = None  # when the gate first held it (None: never held)
    past_max_wait: bool = False  # held longer than the backfill's `max_wait`
    error: str | None = None  # `ready` raised this: the launch fails it before any attempt


@dataclass(frozen=True)
class Readiness:
    """The answers: the partitions not ready, and those left unasked past the budget."""

    not_ready: Mapping[str, NotReady] = field(default_factory=dict)
    unasked: frozenset[str] = frozenset()


def ask_readiness(
    keys: Sequence[str],
    is_ready: Callable[[str], bool],
    held: Mapping[str, Hold],
    *,
    max_wait: dt.timedelta | None,
    now: dt.datetime,
    budget_seconds: float = READY_BUDGET_SECONDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> Readiness:
    """Ask `is_ready` about `keys` in order, until `budget_seconds` have gone by.

    `held` are the partitions the gate held as not ready (their `since`); `now` is the
    database's clock, which `since` was stamped on.
    """
    not_ready: dict[str, NotReady] = {}
    deadline = monotonic() + budget_seconds
    for position, key in enumerate(keys):
        if monotonic() > deadline:
            return Readiness(not_ready, frozenset(keys[position:]))
        error = None
        try:
            ready = is_ready(key)
        except Exception as raised:  # the gate's question fails the same way
            ready, error = False, f"{type(raised).__name__}: {raised}"
        if not ready:
            not_ready[key] = recorded(held.get(key), max_wait, now, error)
    return Readiness(not_ready)


def recorded(
    hold: Hold | None, max_wait: dt.timedelta | None, now: dt.datetime, error: str | None = None
) -> NotReady:
    """A partition not ready, with what its hold says of how long it has waited."""
    if hold is None:
        return NotReady(error=error)
    return NotReady(hold.since, waited_past(hold, max_wait, now), error)
