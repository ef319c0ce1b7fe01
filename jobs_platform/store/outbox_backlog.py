"""The outbox's backlog: its requests per status and the age of the oldest pending one.

The only SQL over `jp_outbox` the store keeps: `status` and `platform_health`
(`store.health`) count the pending requests, and the store imports no feature above it.
The claims and marks are the outbox's own (`outbox.queue`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.store.clock import Clock
from jobs_platform.store.schema import OutboxStatus, outbox


@dataclass(frozen=True)
class QueueStats:
    """How the outbox is doing: the backlog, its age and the outcomes so far."""

    pending: int
    claimed: int
    launched: int
    rejected: int
    oldest_pending_age_seconds: float | None  # None when nothing is pending


class OutboxBacklog:
    """The outbox's counts, its age judged on one clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def queue_stats(
        self, connection: sa.Connection, *, assets: Sequence[str] | None = None
    ) -> QueueStats:
        """Requests (for `assets` if given) per status and the age of the oldest pending one,
        in one grouped query."""
        counts = {str(status): 0 for status in OutboxStatus}
        oldest_pending = None
        query = sa.select(outbox.c.status, sa.func.count(), sa.func.min(outbox.c.created_at))
        if assets is not None:
            query = query.where(outbox.c.asset.in_(list(assets)))
        for status, count, oldest in connection.execute(query.group_by(outbox.c.status)):
            if status in counts:
                counts[status] = count
            if status == OutboxStatus.PENDING:
                oldest_pending = oldest
        age = None
        if oldest_pending is not None:
            age = max(0.0, (self.clock.now(connection) - oldest_pending).total_seconds())
        return QueueStats(
            pending=counts[OutboxStatus.PENDING],
            claimed=counts[OutboxStatus.CLAIMED],
            launched=counts[OutboxStatus.LAUNCHED],
            rejected=counts[OutboxStatus.REJECTED],
            oldest_pending_age_seconds=age,
        )
