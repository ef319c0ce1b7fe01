"""Fenced leases: at most one worker may commit for a partition at a time.

Each acquisition issues a new, strictly increasing token. Every commit proves, inside its
own transaction, that its token still owns the partition (`fence`); a worker that was
paused, hung or partitioned away past its lease finds 0 rows and rolls back.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.errors import LeaseLostError
from jobs_platform.store.schema import leases, utcnow

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


class LeaseBusy(Exception):
    """Another live worker holds the partition; wait, this is not a failure of the input."""

    def __init__(self, asset: str, partition: str, holder: str, expires_at: dt.datetime):
        self.holder = holder
        self.expires_at = expires_at
        super().__init__(f"{asset}/{partition} is leased by {holder} until {expires_at:%H:%M:%S}")

    def seconds_left(self, now: dt.datetime | None = None) -> float:
        return max(0.0, (self.expires_at - (now or utcnow())).total_seconds())


def this_holder() -> str:
    """Who this process is, so that a dead holder on this host can be recognised."""
    return f"{socket.gethostname()}:{os.getpid()}:{_process_start_ticks(os.getpid())}"


def holder_is_dead(holder: str) -> bool:
    """True when `holder` was a process on this host that no longer runs.

    Holders on other hosts are never judged here: their leases simply expire. The start
    time in the holder id protects against a recycled pid.
    """
    try:
        host, pid_text, ticks = holder.rsplit(":", 2)
        pid = int(pid_text)
    except ValueError:
        return False
    if host != socket.gethostname():
        return False
    return _process_start_ticks(pid) != ticks


def acquire_lease(
    engine: sa.Engine,
    asset: str,
    partition: str,
    *,
    holder: str,
    run_id: str | None,
    ttl_seconds: float,
) -> Grant:
    """Take the partition's lease with a new token, or raise LeaseBusy."""
    with engine.begin() as connection:
        connection.execute(
            _insert_ignore(connection)(leases)
            .values(asset=asset, partition=partition, token=0, expires_at=_EPOCH)
            .on_conflict_do_nothing()
        )
        current = connection.execute(
            sa.select(leases)
            .where(leases.c.asset == asset, leases.c.partition == partition)
            .with_for_update()
        ).one()
        now = utcnow()
        live = current.holder is not None and current.expires_at > now
        if live and not holder_is_dead(current.holder):
            raise LeaseBusy(asset, partition, current.holder, current.expires_at)
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


def fence(connection: sa.Connection, lease: Lease, ttl_seconds: float) -> None:
    """Prove inside the caller's transaction that `lease` still owns the partition.

    Run it last before COMMIT: it locks the lease row until the commit, so a takeover
    waits for this commit or this commit sees the takeover, never both.
    """
    now = utcnow()
    renewed = connection.execute(
        sa.update(leases)
        .where(*_owned(lease), leases.c.expires_at > now)
        .values(expires_at=now + dt.timedelta(seconds=ttl_seconds))
    ).rowcount
    if renewed != 1:
        raise LeaseLostError(
            f"lease on {lease.asset}/{lease.partition} lost (token {lease.token}); "
            "this commit was rolled back"
        )


def renew_lease(engine: sa.Engine, lease: Lease, ttl_seconds: float) -> bool:
    """Heartbeat: extend the lease if it is still ours and unexpired; False when lost."""
    now = utcnow()
    with engine.begin() as connection:
        return (
            connection.execute(
                sa.update(leases)
                .where(*_owned(lease), leases.c.expires_at > now)
                .values(expires_at=now + dt.timedelta(seconds=ttl_seconds))
            ).rowcount
            == 1
        )


def attach_attempt(connection: sa.Connection, lease: Lease, attempt_id: int) -> None:
    connection.execute(sa.update(leases).where(*_owned(lease)).values(attempt_id=attempt_id))


def release_lease(connection: sa.Connection, lease: Lease) -> None:
    """Give the partition back at once (the token stays, so it keeps increasing)."""
    connection.execute(
        sa.update(leases).where(*_owned(lease)).values(holder=None, expires_at=_EPOCH)
    )


def live_leases(connection: sa.Connection) -> list[sa.Row]:
    return list(connection.execute(sa.select(leases).where(leases.c.holder.is_not(None))))


def _owned(lease: Lease) -> list[sa.ColumnElement[bool]]:
    return [
        leases.c.asset == lease.asset,
        leases.c.partition == lease.partition,
        leases.c.token == lease.token,
    ]


def _insert_ignore(connection: sa.Connection):
    if connection.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert


def _process_start_ticks(pid: int) -> str:
    """The process's start time in clock ticks, or "" when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return ""
    state, start_ticks = fields[0], fields[19]
    return "" if state in ("Z", "X") else start_ticks
