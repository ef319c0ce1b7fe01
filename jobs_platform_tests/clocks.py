"""Time in the tests: a clock moved by hand, the database's clock, lease expiry on it."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa


class ManualClock:
    """A `Clock` (`store.clock`) that a test sets, and moves by hand (`advance`): leases
    expire without sleeping, and every stamp of a `Store` built with it is its time."""

    def __init__(self, start: dt.datetime | None = None):
        self._now = start or dt.datetime.now(dt.UTC)

    def now(self, connection: sa.Connection | None = None) -> dt.datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += dt.timedelta(seconds=seconds)


def database_now(engine: sa.Engine) -> dt.datetime:
    """The time on the database's clock, the one leases and the framework's rows obey."""
    from jobs_platform.store.clock import DATABASE_CLOCK

    with engine.connect() as connection:
        return DATABASE_CLOCK.now(connection)


def lease_has_expired(engine: sa.Engine, asset: str, partition: str) -> bool:
    """Whether the partition's lease is past its expiry on the database's clock (or released)."""
    from jobs_platform.store.schema import leases

    with engine.connect() as connection:
        expires_at = connection.execute(
            sa.select(leases.c.expires_at).where(
                leases.c.asset == asset, leases.c.partition == partition
            )
        ).scalar_one()
    return expires_at <= database_now(engine)
