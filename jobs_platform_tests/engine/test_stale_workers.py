"""Specifications of what a worker that lost its lease may still do: record its own attempt.

Each test reproduces a defect of the attempt path found in review (issue 10): a stale worker
overwriting a done partition, a checkpoint skipped against "last line wins", a heartbeat
thread left behind when its renewal hangs in the database.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from dataclasses import replace

import pandas as pd
import sqlalchemy as sa

from jobs_platform.dead_letter.entries import list_entries
from jobs_platform.engine.decisions import NextStep
from jobs_platform.engine.heartbeat import Heartbeat
from jobs_platform.engine.runner import Attempter, PartitionReport, PartitionRunner
from jobs_platform.engine.spec import BackfillSpec, PartitionInput
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.errors import Classification, RetryableError, TerminalError
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.leases import Leases
from jobs_platform.store.schema import leases
from jobs_platform_tests.engine.test_runner import (
    ASSET,
    DAY,
    attempt,
    history,
    items_input,
    items_spec,
    items_table,
    partition_state,
    settings,
    stored_items,
)
from jobs_platform_tests.waiting import wait_for

__all__ = ["items_input", "settings"]  # fixtures shared with test_runner


class StaleWorker:
    """A worker paused in its read while its lease runs out and another worker takes over."""

    def __init__(self, items_input, settings):
        self.items_input = items_input
        self.paused = threading.Event()
        items_input.hold = self.paused
        self.runner = PartitionRunner(items_spec(items_input), settings)
        self.outcome: list = []
        self.thread = threading.Thread(target=lambda: self.outcome.append(attempt(self.runner)))
        self.thread.start()
        assert items_input.reading.wait(timeout=30)
        items_input.hold = None  # later readers do not pause
        _expire_lease(self.runner.engine)

    def wake_up_failing_with(self, error: BaseException):
        self.items_input.errors.append(error)
        self.paused.set()
        self.thread.join(timeout=30)
        (result,) = self.outcome
        return result


def _expire_lease(engine: sa.Engine) -> None:
    """As if the worker had been paused past its TTL (its heartbeat paused with it)."""
    with engine.begin() as connection:
        connection.execute(
            sa.update(leases)
            .where(leases.c.asset == ASSET, leases.c.partition == DAY)
            .values(expires_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
        )


def test_worker_that_lost_its_lease_cannot_quarantine_a_done_partition(items_input, settings):
    stale = StaleWorker(items_input, settings)
    fresh = PartitionRunner(items_spec(items_input), settings)
    assert isinstance(attempt(fresh), PartitionReport)  # takes over and finishes

    failed = stale.wake_up_failing_with(TerminalError("line 7: not valid JSON"))

    assert failed.decision.next_step is NextStep.SNOOZE
    assert partition_state(fresh) == ("done", 1)
    with fresh.engine.connect() as connection:
        assert list_entries(connection) == []
    assert history(fresh) == [(1, 1, "failed", "lease_lost"), (1, 2, "succeeded", None)]


def test_worker_that_lost_its_lease_cannot_mark_a_done_partition_failed(items_input, settings):
    stale = StaleWorker(items_input, settings)
    fresh = PartitionRunner(items_spec(items_input), settings)
    assert isinstance(attempt(fresh), PartitionReport)

    failed = stale.wake_up_failing_with(RetryableError("upstream timed out"))

    assert failed.verdict.classification is Classification.LEASE_LOST
    assert partition_state(fresh) == ("done", 1)


def test_worker_that_lost_its_lease_does_not_release_the_new_holders_lease(items_input, settings):
    stale = StaleWorker(items_input, settings)
    grant = Leases(stale.runner.engine, DATABASE_CLOCK).acquire(
        ASSET, DAY, holder="w2", run_id=None, ttl_seconds=60
    )

    stale.wake_up_failing_with(RetryableError("upstream timed out"))

    with stale.runner.engine.connect() as connection:
        row = connection.execute(sa.select(leases).where(leases.c.partition == DAY)).one()
    assert (row.holder, row.token) == ("w2", grant.lease.token)
    assert [row[3] for row in history(stale.runner)] == ["lease_lost"]


def test_worker_past_its_deadline_that_lost_its_lease_still_spends_an_attempt(
    items_input, settings
):
    # A partition that hangs every worker must still reach its ceiling: the hung worker
    # that wakes up late records a timed-out (counted) attempt, not a free lease loss.
    stale = StaleWorker(items_input, replace(settings, attempt_timeout_seconds=1e-6))
    Leases(stale.runner.engine, DATABASE_CLOCK).acquire(
        ASSET, DAY, holder="w2", run_id=None, ttl_seconds=60
    )

    failed = stale.wake_up_failing_with(RetryableError("upstream timed out"))

    assert failed.decision.next_step is NextStep.SNOOZE
    assert [row[3] for row in history(stale.runner)] == ["retryable"]


# "Last line wins" without a fingerprint


def _keyed_lines_spec(lines: dict[str, list[tuple[int, str]]], table) -> BackfillSpec:
    def read_chunks(source: PartitionInput):
        rows = lines[source.partition_key]
        for start in range(0, len(rows), source.chunk_rows):
            chunk = rows[start : start + source.chunk_rows]
            yield pd.DataFrame(
                {
                    "id": [row_id for row_id, _ in chunk],
                    "value": [value for _, value in chunk],
                    "part": source.partition_key,
                }
            )

    return BackfillSpec(
        asset=ASSET,
        table=table,
        key=("id",),
        read_chunks=read_chunks,
        partition_scope=lambda t, partition: t.c.part == partition,
    )


def test_unchanged_later_chunk_still_wins_over_a_changed_earlier_chunk(settings):
    lines = {DAY: [(1, "a"), (1, "b")]}  # two chunks of one line; the second wins
    runner = PartitionRunner(_keyed_lines_spec(lines, items_table()), settings)
    runner.attempt(DAY, Attempter(run_id="run-1"), chunk_rows=1)
    lines[DAY] = [(1, "c"), (1, "b")]  # the first chunk changed, the second did not

    runner.attempt(DAY, Attempter(run_id="run-1"), chunk_rows=1)

    assert stored_items(runner) == [(1, "b", DAY)]  # as a clean run of the current input


# The heartbeat's shutdown


def test_heartbeat_thread_stops_even_when_its_renewal_hangs_in_the_database(upgraded_pg_url):
    engine = warehouse_engine(upgraded_pg_url)
    grant = Leases(engine, DATABASE_CLOCK).acquire(
        ASSET, DAY, holder="w", run_id=None, ttl_seconds=1.5
    )
    blocker = engine.connect()
    transaction = blocker.begin()
    blocker.execute(sa.select(leases).where(leases.c.partition == DAY).with_for_update())
    store = Warehouse(engine, DATABASE_CLOCK)
    heartbeat = Heartbeat(store, grant.lease, 1.5, deadline=time.monotonic() + 3600)
    try:
        with heartbeat:
            wait_for(lambda: _renewal_waits_on_a_lock(engine), timeout=30, what="blocked renewal")
        assert not heartbeat.running
    finally:
        transaction.rollback()
        blocker.close()


def _renewal_waits_on_a_lock(engine: sa.Engine) -> bool:
    with engine.connect() as connection:
        waiting = connection.execute(
            sa.text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
        ).scalar_one()
    return waiting > 0
