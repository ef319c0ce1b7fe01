"""`Store`: one warehouse, its clock, and the store's objects that read the time.

Built once where a warehouse engine is opened, it builds each object that stamps or
compares a time (`attempts`, `leases`, `checkpoints`, …) with its one `clock`. So no query
can read another clock than the one injected (`store.clock`: the database's by default; a
test's own). Each object's methods are its queries, with their SQL and docstrings. The
caller still owns the transaction (`store.begin()`), so one transaction stays one: rows,
checkpoint and fence; a finalize; a release.

The dead letter's, the outbox's and the alerts' objects sit above the store, with the
warehouse that holds them all (`engine.warehouse.Warehouse`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator

import sqlalchemy as sa

from jobs_platform.store.attempts import Attempts
from jobs_platform.store.catalog import Catalog
from jobs_platform.store.checkpoints import Checkpoints
from jobs_platform.store.clock import Clock, now_in_statement
from jobs_platform.store.health import Health
from jobs_platform.store.leases import Leases
from jobs_platform.store.outbox_backlog import OutboxBacklog
from jobs_platform.store.partitions import Partitions
from jobs_platform.store.recovery import Recovery


class Store:
    """The warehouse's engine, the one clock every stamp and comparison reads, and the
    store's objects built with both."""

    def __init__(self, engine: sa.Engine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock
        self.attempts = Attempts(clock)
        self.leases = Leases(engine, clock)
        self.checkpoints = Checkpoints(clock)
        self.partitions = Partitions(clock)
        self.catalog = Catalog(engine, clock)
        self.health = Health(clock)
        self.outbox_backlog = OutboxBacklog(clock)
        self.recovery = Recovery(clock)

    def now(self, connection: sa.Connection) -> dt.datetime:
        return self.clock.now(connection)

    def now_in_statement(self, connection: sa.Connection) -> sa.ColumnElement[dt.datetime]:
        """The clock's time for a statement to stamp (`clock.now_in_statement`)."""
        return now_in_statement(self.clock, connection)

    @contextlib.contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        """One transaction (committed at the end of the block, rolled back on an error)."""
        with self.engine.begin() as connection:
            yield connection

    @contextlib.contextmanager
    def connect(self) -> Iterator[sa.Connection]:
        with self.engine.connect() as connection:
            yield connection
