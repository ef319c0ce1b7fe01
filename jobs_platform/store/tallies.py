"""Grouped counts over the framework's tables, for `/metrics` (`jobs_platform.metrics.reader`).

Each is one set-based query per scrape, whatever the number of partitions; the reader
turns the rows into Prometheus' shapes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import sqlalchemy as sa

from jobs_platform.store.attempts import AttemptOutcome
from jobs_platform.store.partitions import PartitionStatus
from jobs_platform.store.rows import TableRow
from jobs_platform.store.schema import attempts, partitions

# Only ended attempts are counted, so each count only grows; a running attempt is seen in
# `in_flight` instead, and counted once it ends.
ENDED_OUTCOMES = (str(AttemptOutcome.SUCCEEDED), str(AttemptOutcome.FAILED))


def ended_attempts_by_duration(
    connection: sa.Connection, bounds: Sequence[float]
) -> list[TableRow]:
    """One grouped scan of the ended attempts: (asset, outcome, error_class, bucket, count,
    seconds), `bucket` being the index of the first of `bounds` the duration fits under
    (len(bounds) past the last).

    Each attempt is put in its bucket once (a CASE that stops at the first bound it fits):
    cheaper than a filtered count per bound.
    """
    seconds = _seconds_between(connection.dialect.name, attempts.c.started_at, attempts.c.ended_at)
    # Attempts stamped by hosts' clocks (before both ends came from the database's) may
    # disagree: never below zero.
    seconds = sa.case((seconds < 0, 0.0), else_=seconds)
    bucket = sa.case(
        *((seconds <= bound, index) for index, bound in enumerate(bounds)),
        else_=len(bounds),
    ).label("bucket")
    return list(
        connection.execute(
            sa.select(
                attempts.c.asset,
                attempts.c.outcome,
                attempts.c.error_class,
                bucket,
                sa.func.count(),
                sa.func.sum(seconds),
            )
            .where(attempts.c.outcome.in_(ENDED_OUTCOMES), attempts.c.ended_at.is_not(None))
            .group_by(attempts.c.asset, attempts.c.outcome, attempts.c.error_class, bucket)
        )
    )


def rows_written(connection: sa.Connection) -> dict[str, int]:
    """Rows of each asset's done partitions, as their last successful attempt wrote them."""
    return {
        asset: int(total or 0)
        for asset, total in connection.execute(
            sa.select(partitions.c.asset, sa.func.sum(partitions.c.row_count))
            .where(partitions.c.status == PartitionStatus.DONE)
            .group_by(partitions.c.asset)
        )
    }


def _seconds_between(
    dialect: str, start: sa.ColumnElement[dt.datetime], end: sa.ColumnElement[dt.datetime]
) -> sa.ColumnElement[float]:
    if dialect == "sqlite":
        # SQLite stores the UTC timestamps as text; julianday() reads them as days, a
        # double whose precision is tens of microseconds here: kept to the millisecond.
        return sa.func.round((sa.func.julianday(end) - sa.func.julianday(start)) * 86_400.0, 3)
    # date_part is a double; extract() is a slower numeric since PostgreSQL 14.
    return sa.func.date_part("epoch", end - start)
