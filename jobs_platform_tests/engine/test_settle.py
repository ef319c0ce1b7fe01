"""Specifications of `settle`: the one place that decides what follows a failure and records it."""

from __future__ import annotations

import sqlalchemy as sa

from jobs_platform.dead_letter.entries import active_entry
from jobs_platform.engine.decisions import NextStep, RetryBudget
from jobs_platform.engine.settle import Record, settle
from jobs_platform.engine.warehouse import Warehouse
from jobs_platform.errors import Classification, Verdict
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.partitions import partition_rows
from jobs_platform_tests.store.factories import ASSET, PARTITION, an_attempt

BUDGET = RetryBudget(max_attempts=3, base_delay_seconds=0.0, lease_seconds=60.0)
RETRYABLE = Verdict(Classification.RETRYABLE, None, "test")
TERMINAL = Verdict(Classification.TERMINAL, None, "test")


def settled(connection: sa.Connection, verdict: Verdict | None, record: Record):
    store = Warehouse(connection.engine, DATABASE_CLOCK)
    return settle(connection, BUDGET, ASSET, PARTITION, 1, verdict, record=record, store=store)


def status(connection: sa.Connection) -> str | None:
    rows = [row for row in partition_rows(connection) if row.partition == PARTITION]
    return rows[0].status if rows else None


def test_the_owner_marks_the_partition_failed_while_budget_is_left(connection):
    an_attempt(connection, error_class="retryable")

    outcome = settled(connection, RETRYABLE, Record.OWNER)

    assert (outcome.decision.next_step, outcome.failures, outcome.entry_id) == (
        NextStep.RETRY,
        1,
        None,
    )
    assert status(connection) == "failed"


def test_the_owner_quarantines_when_the_budget_is_spent(connection):
    for _ in range(3):
        an_attempt(connection, error_class="retryable")

    outcome = settled(connection, RETRYABLE, Record.OWNER)

    assert outcome.decision.next_step is NextStep.QUARANTINE
    assert outcome.entry_id == active_entry(connection, ASSET, PARTITION).id


def test_a_worker_that_lost_the_lease_records_nothing_of_the_partition(connection):
    an_attempt(connection, error_class="terminal")

    outcome = settled(connection, TERMINAL, Record.NOTHING)

    assert outcome.decision.next_step is NextStep.QUARANTINE
    assert (outcome.entry_id, active_entry(connection, ASSET, PARTITION)) == (None, None)
    assert status(connection) is None


def test_the_last_recorded_failure_is_settled_when_no_verdict_is_given(connection):
    assert settled(connection, None, Record.QUARANTINE_ONLY) is None
    an_attempt(connection, error_class="terminal")

    outcome = settled(connection, None, Record.QUARANTINE_ONLY)

    assert outcome.decision.next_step is NextStep.QUARANTINE
    assert outcome.entry_id is not None
