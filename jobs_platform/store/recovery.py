"""Finding attempts whose worker died: the stuck-attempt rescuer's queries.

An attempt is abandoned when it is still `running` but its lease has expired (nobody
renewed it) or its holder process is gone, or another worker has since taken the lease.
Recording it as a crash here, instead of only when the next worker arrives, lets the
orchestrator fail the run that owned it within a bounded time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import sqlalchemy as sa

from jobs_platform.errors import Classification
from jobs_platform.store.attempts import AttemptOutcome, crash_values
from jobs_platform.store.clock import Clock
from jobs_platform.store.holders import holder_is_dead
from jobs_platform.store.rows import TableRow
from jobs_platform.store.schema import attempts, leases


class Recovery:
    """Crashed attempts and runs, found on one clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def record_abandoned_attempts_everywhere(
        self, connection: sa.Connection, *, assets: Sequence[str] | None = None
    ) -> list[TableRow]:
        """Mark every abandoned attempt (at `assets` if given) as a crash; returns those marked.

        A holder in another PID namespace or on another host is never judged dead here: its
        attempt is abandoned only once its lease has expired on the database's clock. A code
        location passes its backfills: other locations sharing the warehouse rescue theirs.
        """
        now = self.clock.now(connection)
        query = (
            sa.select(
                attempts,
                leases.c.token.label("lease_token"),
                leases.c.holder.label("lease_holder"),
                leases.c.expires_at,
            )
            .join(
                leases,
                sa.and_(
                    leases.c.asset == attempts.c.asset, leases.c.partition == attempts.c.partition
                ),
            )
            .where(attempts.c.outcome == AttemptOutcome.RUNNING)
        )
        if assets is not None:
            query = query.where(attempts.c.asset.in_(list(assets)))
        candidates = connection.execute(query).all()
        abandoned = [
            row
            for row in candidates
            if row.lease_token != row.token
            or row.expires_at <= now
            or (row.lease_holder is not None and holder_is_dead(row.lease_holder))
        ]
        for row in abandoned:
            connection.execute(
                sa.update(attempts)
                .where(attempts.c.id == row.id, attempts.c.outcome == AttemptOutcome.RUNNING)
                .values(**crash_values(now))
            )
        return abandoned

    def runs_with_live_attempts(self, connection: sa.Connection, run_ids: list[str]) -> set[str]:
        """Which of these runs still have an attempt running under a live lease."""
        if not run_ids:
            return set()
        now = self.clock.now(connection)
        rows = connection.execute(
            sa.select(attempts.c.run_id)
            .join(
                leases,
                sa.and_(
                    leases.c.asset == attempts.c.asset,
                    leases.c.partition == attempts.c.partition,
                    leases.c.token == attempts.c.token,
                ),
            )
            .where(
                attempts.c.run_id.in_(run_ids),
                attempts.c.outcome == AttemptOutcome.RUNNING,
                leases.c.expires_at > now,
            )
        ).scalars()
        return set(rows)

    def runs_whose_worker_died(
        self,
        connection: sa.Connection,
        run_ids: list[str],
        grace_seconds: float,
        *,
        assets: Sequence[str] | None = None,
    ) -> set[str]:
        """Runs whose latest attempt crashed at least `grace_seconds` ago and started no other.

        The grace leaves a live run worker time to retry its killed step itself; a run worker
        that is gone never does, and its run must be failed by someone else. With `assets`
        (a code location's backfills), only runs that attempted them are judged.
        """
        if not run_ids:
            return set()
        live = self.runs_with_live_attempts(connection, run_ids)
        ran_here: sa.ColumnElement[bool] = attempts.c.run_id.in_(run_ids)
        if assets is not None:
            ran_here = sa.and_(ran_here, attempts.c.asset.in_(list(assets)))
        latest = (
            sa.select(attempts.c.run_id, sa.func.max(attempts.c.id).label("latest_id"))
            .where(ran_here)
            .group_by(attempts.c.run_id)
            .subquery()
        )
        cutoff = self.clock.now(connection) - dt.timedelta(seconds=grace_seconds)
        crashed = connection.execute(
            sa.select(attempts.c.run_id)
            .join(latest, attempts.c.id == latest.c.latest_id)
            .where(attempts.c.error_class == Classification.CRASH, attempts.c.ended_at <= cutoff)
        ).scalars()
        return set(crashed) - live
