"""Readiness: when a partition held as not ready is checked again, and when it waited too long.

`backfill_asset(..., ready=fn, max_wait=timedelta)` declares that a partition is tried only
once `fn` says its input is there (a file landed, an upstream export finished). The gate
asks before each attempt; a partition not ready is held (`steering.holds`), with no
attempt recorded. The holds sensor asks again for a bounded number of held partitions per
tick, the least recently checked first, as the redrive walks its entries, and launches
each once it is ready. A partition held longer than its `max_wait` is reported once
(status, plan, an alert), and never quarantined: its input is late, not wrong.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable

from jobs_platform.steering.holds import Hold, HoldReason

READINESS_CHECKS_PER_TICK = 50
"""How many held partitions of one backfill the sensor asks `ready` about per tick: a
`ready` that reads a bucket's listing or a table takes a fraction of a second, and a
tick must end well within Dagster's sensor timeout (60 s by default)."""


def split_by_readiness(
    holds: Iterable[Hold], is_ready: Callable[[Hold], bool]
) -> tuple[list[Hold], list[Hold]]:
    """`holds` asked about one by one, in order: those whose input is ready, then the others."""
    ready: list[Hold] = []
    waiting: list[Hold] = []
    for hold in holds:
        (ready if is_ready(hold) else waiting).append(hold)
    return ready, waiting


def waited_past(hold: Hold, max_wait: dt.timedelta | None, now: dt.datetime) -> bool:
    """Whether `hold` has waited for its input longer than `max_wait` (None: never)."""
    return (
        hold.reason is HoldReason.NOT_READY and max_wait is not None and now - hold.since > max_wait
    )
