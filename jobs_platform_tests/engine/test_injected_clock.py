"""Every time the framework writes reads the clock its `Store` was given, and no other.

One partition lives through a failure, a quarantine, a requeue and a run that sets a row
aside and commits two chunks, on a runner whose clock stands still far in the past. Every
timestamp on the framework's rows must then be that moment (a lease's expiry that moment
plus its TTL): a stamp that read the database's or the host's clock instead is decades off.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform.engine.outcomes import Failed, PartitionReport
from jobs_platform.engine.runner import Attempter, PartitionRunner
from jobs_platform.engine.spec import BackfillSpec, PartitionInput, RejectRows
from jobs_platform.errors import RetryableError, TerminalError
from jobs_platform.settings import Settings
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import UtcDateTime, create_user_tables, framework_metadata, leases
from jobs_platform_tests.clocks import ManualClock

ASSET, DAY = "items", "2024-01-03"
LONG_AGO = dt.datetime(2001, 2, 3, 4, 5, 6, 789000, tzinfo=dt.UTC)
LEASE_SECONDS = 30
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)  # a released lease's expiry: no time read

# What the life below stamps, at the least: without these the test would prove nothing.
EXPECTED_STAMPS = {
    "jp_attempts.started_at",
    "jp_attempts.ended_at",
    "jp_checkpoints.committed_at",
    "jp_partitions.updated_at",
    "jp_quarantine.first_failed_at",
    "jp_quarantine.last_failed_at",
    "jp_quarantine.quarantined_at",
    "jp_quarantine.requeued_at",
    "jp_quarantine.requeue_launched_at",
    "jp_quarantine.resolved_at",
    "jp_requeues.at",
    "jp_rejected_rows.rejected_at",
    "jp_leases.acquired_at",
}


def items_table() -> sa.Table:
    return sa.Table(
        "items",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("part", sa.Text, nullable=False),
    )


class Input:
    """Fails retryably, then terminally, then yields two chunks and refuses one row."""

    def __init__(self, engine: sa.Engine):
        self.engine = engine
        self.errors: list[BaseException] = [
            RetryableError("upstream timed out"),
            TerminalError("a poison row"),
        ]
        self.lease_mid_attempt: sa.Row | None = None

    def read_chunks(self, source: PartitionInput) -> Iterator[pd.DataFrame]:
        if self.errors:
            raise self.errors.pop(0)
        source.reject(1, "malformed", {"id": "x"})
        yield pd.DataFrame({"id": [1, 2], "part": DAY})
        # The first chunk's fence extended the lease: on the runner's clock too.
        with self.engine.connect() as connection:
            self.lease_mid_attempt = connection.execute(sa.select(leases)).one()
        yield pd.DataFrame({"id": [3], "part": DAY})


@pytest.fixture
def settings(upgraded_pg_url, tmp_path) -> Settings:
    create_user_tables(warehouse_engine(upgraded_pg_url), items_table())
    return Settings(
        database_url=upgraded_pg_url,
        landing_root=str(tmp_path),
        max_attempts=3,
        retry_delay_seconds=0.01,
        lease_seconds=LEASE_SECONDS,
    )


def stamps(engine: sa.Engine) -> dict[str, set[dt.datetime]]:
    """Every time on the framework's rows, by `table.column`."""
    found: dict[str, set[dt.datetime]] = {}
    with engine.connect() as connection:
        for table in framework_metadata.sorted_tables:
            for column in table.columns:
                if not isinstance(column.type, UtcDateTime):
                    continue
                values = connection.execute(
                    sa.select(column).where(column.is_not(None)).distinct()
                ).scalars()
                for value in values:
                    found.setdefault(f"{table.name}.{column.name}", set()).add(value)
    return found


def test_every_framework_timestamp_is_the_injected_clocks(settings):
    engine = warehouse_engine(settings.database_url)
    source = Input(engine)
    spec = BackfillSpec(
        asset=ASSET,
        table=items_table(),
        key=("id",),
        read_chunks=source.read_chunks,
        partition_scope=lambda table, partition: table.c.part == partition,
        bad_rows=RejectRows(max_rows=5),
    )
    runner = PartitionRunner(spec, settings, clock=ManualClock(LONG_AGO))

    def attempt(run_id: str) -> object:
        return runner.attempt(DAY, Attempter(run_id=run_id), chunk_rows=2)

    failed = attempt("run-1")  # retryable: the partition is marked failed
    quarantined = attempt("run-1")  # terminal: quarantined
    assert isinstance(failed, Failed) and isinstance(quarantined, Failed)
    assert quarantined.entry_id is not None
    with runner.store.begin() as connection:  # a person requeues; its run is on its way
        runner.store.dead_letter.requeue_partition(connection, ASSET, DAY)
        runner.store.dead_letter.mark_requeue_launched(connection, [quarantined.entry_id])
    done = attempt("run-2")  # a row rejected, two chunks, finalize; the entry resolved
    assert isinstance(done, PartitionReport) and done.chunks_written == 2

    found = stamps(engine)
    assert set(found) >= EXPECTED_STAMPS, f"not stamped: {EXPECTED_STAMPS - set(found)}"
    expected = {name: {LONG_AGO} for name in found} | {"jp_leases.expires_at": {_EPOCH}}
    assert found == expected
    mid = source.lease_mid_attempt
    assert mid is not None and mid.holder is not None
    assert (mid.acquired_at, mid.expires_at) == (
        LONG_AGO,
        LONG_AGO + dt.timedelta(seconds=LEASE_SECONDS),
    )
