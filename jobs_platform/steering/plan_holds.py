"""What holds a whole backfill back, as `plan` reads it: a pause, and partitions not ready.

The pause is `steering.pauses` (`pause_of`). The partitions not ready are what `ready=`
answers now (`steering.plan_readiness`, asked by `plan_location`); where it cannot be
asked, those a run held for their input (`steering.holds`, reason `not_ready`) that the
holds sensor has not found ready since. This is the one place `plan` reads them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import sqlalchemy as sa

from jobs_platform.steering.holds import Hold, HoldReason, held_partitions
from jobs_platform.steering.pauses import Pause, pause_of
from jobs_platform.steering.plan_readiness import NotReady, recorded


@dataclass(frozen=True)
class Holds:
    """What steers the backfill as a whole: its pause, and the partitions not ready."""

    pause: Pause | None = None
    not_ready: Mapping[str, NotReady] = field(default_factory=dict)
    held: Mapping[str, Hold] = field(default_factory=dict)  # held by a run as not ready

    @property
    def paused(self) -> bool:
        return self.pause is not None

    def as_recorded(self, max_wait: dt.timedelta | None, now: dt.datetime) -> Holds:
        """Not ready: the partitions a run held for their input (`ready` not asked now)."""
        return Holds(
            self.pause,
            {key: recorded(hold, max_wait, now) for key, hold in self.held.items()},
            self.held,
        )


def read_holds(connection: sa.Connection, asset: str, keys: Collection[str]) -> Holds:
    """Whether `asset` is paused, and which of `keys` a run held for their input."""
    # Every hold of the backfill, kept when asked about: a backfill holds few partitions,
    # and a list of 8,760 keys in the query would cost more than the rows it saves.
    wanted = set(keys)
    held = {
        key: hold
        for key, hold in held_partitions(connection, asset).items()
        if key in wanted and hold.reason is HoldReason.NOT_READY
    }
    return Holds(
        pause=pause_of(connection, asset),
        not_ready={key: NotReady(hold.since) for key, hold in held.items()},
        held=held,
    )
