"""Whose clock the framework's timestamps read: the warehouse's, so that every host agrees.

Workers on different hosts (or under `faketime`) disagree about the time; the database
they share does not. Lease expiry, takeover and renewal compare the database's clock with
the database's timestamps, and every time written to the framework's rows (an attempt's
start and end, a quarantine entry, a partition's state, a checkpoint, an alert delivery,
an outbox request and its claim) is the database's too: another host reads it, ends the
attempt it started or measures the age of the request. SQLite lives on one host, whose
clock is the only one. Tests inject a clock of their own, as tenacity injects `sleep`.

Every query that reads or stamps the time is a method of an object built with its `clock`
(no default, e.g. `store.attempts.Attempts`): the process's `Store` (`store.handle`) builds
them all with its one clock, so a stamp cannot read another clock than the one injected.

A stamp or a comparison that only goes into a statement reads the time inside that
statement (`now_in_statement`): on PostgreSQL, `clock_timestamp()` when the statement
runs, the very time a read just before would have given, without its round trip.
"""

from __future__ import annotations

import datetime as dt
from typing import Protocol

import sqlalchemy as sa

from jobs_platform.store.schema import UtcDateTime, utcnow


class Clock(Protocol):
    """The source of the time for leases and for every timestamp on the framework's rows."""

    def now(self, connection: sa.Connection) -> dt.datetime:
        """The current time, UTC-aware, as every worker sharing `connection`'s database sees it."""
        ...


class DatabaseClock:
    """The default `Clock`: PostgreSQL's `clock_timestamp()` (not the transaction's start);
    SQLite's host clock."""

    def now(self, connection: sa.Connection) -> dt.datetime:
        if connection.dialect.name == "postgresql":
            now: dt.datetime = connection.execute(sa.text("SELECT clock_timestamp()")).scalar_one()
            return now
        return utcnow()


DATABASE_CLOCK = DatabaseClock()


def now_in_statement(clock: Clock, connection: sa.Connection) -> sa.ColumnElement[dt.datetime]:
    """`clock`'s time as an SQL expression, for a statement that stamps or compares it.

    The database's clock on PostgreSQL is `clock_timestamp()`, read by the statement itself:
    one round trip less than `now` then the statement. Any other clock (a test's, SQLite's
    host clock) is read here and bound, so an injected clock still decides every stamp.
    """
    if isinstance(clock, DatabaseClock) and connection.dialect.name == "postgresql":
        return sa.func.clock_timestamp(type_=UtcDateTime)
    return sa.literal(clock.now(connection), UtcDateTime)
