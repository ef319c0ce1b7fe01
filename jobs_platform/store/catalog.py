"""The backfill catalog: what each code location serves, kept in the warehouse.

`jobs-platform status` needs, per backfill of a location, its partition keys (to count
the missing ones) and little else; loading the location to learn them imports Dagster and
the user's code, seconds before the first query. The catalog holds them instead, one row
per (location, backfill): every key, or for a time-window backfill whose keys sort as
their times do only its window (first and last key, and the count: `store.health.KeyWindow`,
counted in the database however long the backfill). It is written when the location is
deployed (`jobs-platform db upgrade`) and by each `platform_health` materialization (every
10 minutes by default), so status answers from the warehouse alone. The keys are as of
`updated_at`: a catalog older than `CATALOG_STALE_AFTER_SECONDS` is reported stale (a
daily backfill may have gained a day since, or the location changed its backfills).

Rows are built from a loaded location by `orchestration.catalog`; this module is plain SQL.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.store.clock import Clock
from jobs_platform.store.health import ExpectedKeys, KeyWindow
from jobs_platform.store.schema import backfill_catalog

CATALOG_STALE_AFTER_SECONDS = 15 * 60
"""A catalog older than this is stale: the `platform_health` schedule (every 10 minutes)
has missed a tick at least, so a new partition or a changed location may not be in it."""

# Any constant works; every process writing the catalog must use the same one.
_CATALOG_LOCK_ID = 7_415_902_313


@dataclass(frozen=True)
class CatalogEntry:
    """One backfill of a code location, as status needs it."""

    asset: str
    partitions_kind: str
    """`time_window`, `dynamic`, `static` or `multi` (informative)."""
    partition_keys: tuple[str, ...]
    """Every key; empty when `window` says them."""
    max_partitions_per_run: int | None = None
    """Its backfill policy's bound; None for `single_run()` or no policy."""
    target_table: str | None = None
    window: KeyWindow | None = None
    """A time-window backfill's keys, when they sort as their times do."""

    @property
    def expected_keys(self) -> ExpectedKeys:
        return self.window if self.window is not None else self.partition_keys

    @property
    def partition_count(self) -> int:
        return self.window.count if self.window is not None else len(self.partition_keys)


@dataclass(frozen=True)
class LocationCatalog:
    """A code location's catalog as read: its backfills in order, and how old it is."""

    location: str
    entries: tuple[CatalogEntry, ...]
    updated_at: dt.datetime
    age_seconds: float
    """On the database's clock, as `updated_at` was written."""

    @property
    def stale(self) -> bool:
        return self.age_seconds > CATALOG_STALE_AFTER_SECONDS

    def partition_keys(self) -> dict[str, ExpectedKeys]:
        """Every partition key of each backfill (or its window), in the location's order."""
        return {entry.asset: entry.expected_keys for entry in self.entries}


class Catalog:
    """The code locations' catalog in one warehouse, stamped and judged stale on one clock."""

    def __init__(self, engine: sa.Engine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock

    def write(self, location: str, entries: Sequence[CatalogEntry]) -> dt.datetime:
        """Replace `location`'s rows with `entries`, in one transaction; returns the time stamped.

        Only the location's own rows change: other locations sharing the warehouse keep
        theirs. A backfill the location no longer serves loses its row. Concurrent writers
        (a deploy while `platform_health` runs) are serialised by a transaction-scoped
        advisory lock on PostgreSQL (and by SQLite's single writer): without it, two
        delete-then-insert transactions would both insert the same keys and one would fail.
        """
        with self.engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(
                    sa.text("SELECT pg_advisory_xact_lock(:lock_id)"), {"lock_id": _CATALOG_LOCK_ID}
                )
            now = self.clock.now(connection)
            of_location = backfill_catalog.c.location == location
            connection.execute(sa.delete(backfill_catalog).where(of_location))
            rows = [
                {
                    "location": location,
                    "asset": entry.asset,
                    "position": position,
                    "partitions_kind": entry.partitions_kind,
                    "partition_count": entry.partition_count,
                    "partition_keys": json.dumps(
                        [] if entry.window else list(entry.partition_keys), separators=(",", ":")
                    ),
                    "first_key": entry.window.first if entry.window else None,
                    "last_key": entry.window.last if entry.window else None,
                    "max_partitions_per_run": entry.max_partitions_per_run,
                    "target_table": entry.target_table,
                    "updated_at": now,
                }
                for position, entry in enumerate(entries)
            ]
            if rows:
                connection.execute(sa.insert(backfill_catalog), rows)
        return now

    def read(self, connection: sa.Connection, location: str) -> LocationCatalog | None:
        """`location`'s catalog; None when nothing wrote one in this warehouse.

        A windowed backfill's keys column (an empty array) is not read: one with every key
        is, and parsed.
        """
        columns = backfill_catalog.c
        windowed = columns.first_key.is_not(None)
        rows = connection.execute(
            sa.select(
                *(column for column in columns if column.name != "partition_keys"),
                sa.case((windowed, None), else_=columns.partition_keys).label("partition_keys"),
            )
            .where(backfill_catalog.c.location == location)
            .order_by(backfill_catalog.c.position)
        ).all()
        if not rows:
            return None
        # Written in one transaction, the rows share one stamp; the oldest is the safe reading.
        updated_at = min(row.updated_at for row in rows)
        entries = tuple(
            CatalogEntry(
                asset=row.asset,
                partitions_kind=row.partitions_kind,
                partition_keys=tuple(json.loads(row.partition_keys))
                if row.first_key is None
                else (),
                max_partitions_per_run=row.max_partitions_per_run,
                target_table=row.target_table,
                window=(
                    KeyWindow(row.first_key, row.last_key, row.partition_count)
                    if row.first_key is not None
                    else None
                ),
            )
            for row in rows
        )
        age = (self.clock.now(connection) - updated_at).total_seconds()
        return LocationCatalog(location, entries, updated_at, round(max(age, 0.0), 3))
