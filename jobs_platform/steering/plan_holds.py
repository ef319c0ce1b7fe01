"""What holds a whole backfill back, as `plan` reads it: a pause, and partitions not ready.

The pause is `steering.pauses` (`pause_of`); a partition is not ready while a run held it
for its input (`steering.holds`, reason `not_ready`) and the holds sensor has not found it
ready since. This is the one place `plan` reads them.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.steering.holds import HoldReason, held_partitions
from jobs_platform.steering.pauses import Pause, pause_of


@dataclass(frozen=True)
class Holds:
    """What steers the backfill as a whole: its pause, and the partitions not ready."""

    pause: Pause | None = None
    not_ready: frozenset[str] = frozenset()

    @property
    def paused(self) -> bool:
        return self.pause is not None


def read_holds(connection: sa.Connection, asset: str, keys: Collection[str]) -> Holds:
    """Whether `asset` is paused, and which of `keys` wait for their input."""
    # Every hold of the backfill, kept when asked about: a backfill holds few partitions,
    # and a list of 8,760 keys in the query would cost more than the rows it saves.
    wanted = set(keys)
    held = held_partitions(connection, asset)
    return Holds(
        pause=pause_of(connection, asset),
        not_ready=frozenset(
            key
            for key, hold in held.items()
            if key in wanted and hold.reason is HoldReason.NOT_READY
        ),
    )
