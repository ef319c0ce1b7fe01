"""Fenced leases: at most one worker may commit for a partition at a time.

Each acquisition issues a new, strictly increasing token. Every commit proves, inside its
own transaction, that its token still owns the partition (`fence`); a worker that was
paused, hung or partitioned away past its lease finds 0 rows and rolls back. Expiry is
always judged on the database's clock (`store.clock`), never on a worker's.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.errors import LeaseLostError
from jobs_platform.store.clock import Clock, now_in_statement
from jobs_platform.store.holders import holder_is_dead, this_holder
from jobs_platform.store.rows import upsert_row
from jobs_platform.store.schema import leases

__all__ = [
    "Grant",
    "Lease",
    "LeaseBusy",
    "Leases",
    "attach_attempt",
    "holder_is_dead",
    "owns_lease",
    "release_lease",
    "this_holder",
]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Lease:
    """A worker's hold on one partition, valid while its token is the current one."""

    asset: str
    partition: str
    token: int
    holder: str


@dataclass(frozen=True)
class Grant:
    """A new lease, and the holder it replaced when that one never released it."""

    lease: Lease
    abandoned_by: str | None

    @property
    def first(self) -> bool:
        """The partition's first lease: no attempt at it was ever recorded.

        Every attempt row is written under a lease, and lease rows are never deleted.
        """
        return self.lease.token == 1


class LeaseBusy(Exception):
    """Another live worker holds the partition; wait, this is not a failure of the input."""

    def __init__(
        self, asset: str, partition: str, holder: str, expires_at: dt.datetime, seconds_left: float
    ):
        self.holder = holder
        self.expires_at = expires_at
        # Measured on the database's clock when the lease was found busy.
        self.seconds_left = max(0.0, seconds_left)
        super().__init__(
            f"{asset}/{partition} is leased by {holder} for another {self.seconds_left:.1f}s"
        )


class Leases:
    """The partitions' leases on one warehouse, judged and stamped on one clock."""

    def __init__(self, engine: sa.Engine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock

    def acquire(
        self, asset: str, partition: str, *, holder: str, run_id: str | None, ttl_seconds: float
    ) -> Grant:
        """Take the partition's lease with a new token, or raise LeaseBusy.

        A live lease is taken over early only when its holder is provably dead (see
        `store.holders`); otherwise only once it has expired on the database's clock.
        """
        with self.engine.begin() as connection:
            return self.acquire_on(
                connection,
                asset,
                partition,
                holder=holder,
                run_id=run_id,
                ttl_seconds=ttl_seconds,
            )

    def acquire_on(
        self,
        connection: sa.Connection,
        asset: str,
        partition: str,
        *,
        holder: str,
        run_id: str | None,
        ttl_seconds: float,
    ) -> Grant:
        """`acquire`, in the caller's transaction: the lease is taken when it commits.

        The attempt's start takes it this way, with its attempt row, in one commit: a
        rollback leaves neither, so nothing has to give the partition back.
        """
        # Not one upsert: whether to take the lease over depends on its holder being alive,
        # which only this process's /proc can tell. So make sure the row exists, then lock
        # it and decide; a concurrent acquirer waits on the lock and then sees our token.
        upsert_row(
            connection,
            leases,
            {"asset": asset, "partition": partition, "token": 0, "expires_at": _EPOCH},
        )
        current = connection.execute(
            sa.select(leases)
            .where(leases.c.asset == asset, leases.c.partition == partition)
            .with_for_update()
        ).one()
        now = self.clock.now(connection)
        live = current.holder is not None and current.expires_at > now
        if live and not holder_is_dead(current.holder):
            seconds_left = (current.expires_at - now).total_seconds()
            raise LeaseBusy(asset, partition, current.holder, current.expires_at, seconds_left)
        token = current.token + 1
        connection.execute(
            sa.update(leases)
            .where(
                leases.c.asset == asset,
                leases.c.partition == partition,
                leases.c.token == current.token,
            )
            .values(
                token=token,
                holder=holder,
                run_id=run_id,
                attempt_id=None,
                acquired_at=now,
                expires_at=now + dt.timedelta(seconds=ttl_seconds),
            )
        )
        return Grant(Lease(asset, partition, token, holder), abandoned_by=current.holder)

    def fence(self, connection: sa.Connection, lease: Lease, ttl_seconds: float) -> None:
        """Prove inside the caller's transaction that `lease` still owns the partition.

        Run it last before COMMIT: it locks the lease row until the commit, so a takeover
        waits for this commit or this commit sees the takeover, never both.
        """
        if not self._extend(connection, lease, ttl_seconds):
            raise LeaseLostError(
                f"lease on {lease.asset}/{lease.partition} lost (token {lease.token}); "
                "this commit was rolled back"
            )

    def fence_and_release(self, connection: sa.Connection, lease: Lease) -> None:
        """`fence`, then `release_lease`, as ONE statement: the last of a transaction that
        makes the partition done. A lost lease raises and the transaction rolls back."""
        now = now_in_statement(self.clock, connection)
        released = connection.execute(
            sa.update(leases)
            .where(*_owned(lease), leases.c.expires_at > now)
            .values(holder=None, expires_at=_EPOCH)
        ).rowcount
        if released != 1:
            raise LeaseLostError(
                f"lease on {lease.asset}/{lease.partition} lost (token {lease.token}); "
                "this commit was rolled back"
            )

    def renew(
        self, lease: Lease, ttl_seconds: float, *, timeout_seconds: float | None = None
    ) -> bool:
        """Heartbeat: extend the lease if it is still ours and unexpired; False when lost.

        With `timeout_seconds`, PostgreSQL stops waiting for a lock or a statement after that
        long (the call raises), so a renewal cannot hang its caller.
        """
        with self.engine.begin() as connection:
            if timeout_seconds is not None and connection.dialect.name == "postgresql":
                connection.execute(
                    _BOUND_THIS_TRANSACTION, {"ms": str(int(timeout_seconds * 1000))}
                )
            return self._extend(connection, lease, ttl_seconds)

    def _extend(self, connection: sa.Connection, lease: Lease, ttl_seconds: float) -> bool:
        now = self.clock.now(connection)
        extended = connection.execute(
            sa.update(leases)
            .where(*_owned(lease), leases.c.expires_at > now)
            .values(expires_at=now + dt.timedelta(seconds=ttl_seconds))
        ).rowcount
        return extended == 1


# Transaction-local (the `true`): the pooled connection keeps its defaults afterwards.
_BOUND_THIS_TRANSACTION = sa.text(
    "SELECT set_config('lock_timeout', :ms, true), set_config('statement_timeout', :ms, true)"
)


def owns_lease(connection: sa.Connection, lease: Lease) -> bool:
    """Lock the partition's lease row and tell whether `lease` is still its current token.

    A lease past its expiry that nobody took over is still owned: no one else can have
    written since. The row lock holds until the caller's commit, so no takeover slips in.
    """
    current = connection.execute(
        sa.select(leases.c.token)
        .where(leases.c.asset == lease.asset, leases.c.partition == lease.partition)
        .with_for_update()
    ).scalar_one_or_none()
    return current == lease.token


def attach_attempt(connection: sa.Connection, lease: Lease, attempt_id: int) -> None:
    connection.execute(sa.update(leases).where(*_owned(lease)).values(attempt_id=attempt_id))


def release_lease(connection: sa.Connection, lease: Lease) -> None:
    """Give the partition back at once (the token stays, so it keeps increasing)."""
    connection.execute(
        sa.update(leases).where(*_owned(lease)).values(holder=None, expires_at=_EPOCH)
    )


def _owned(lease: Lease) -> list[sa.ColumnElement[bool]]:
    return [
        leases.c.asset == lease.asset,
        leases.c.partition == lease.partition,
        leases.c.token == lease.token,
    ]
