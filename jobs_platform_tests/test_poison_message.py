"""An input that fails every time stops and surfaces; a transient failure retries, then passes."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import sqlalchemy as sa

from jobs_platform.dead_letter.entries import active_entry
from jobs_platform.store.schema import attempts
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.rows import table_snapshot
from jobs_platform_tests.runs import materialize
from orders_example.orders.assets import daily_revenue, orders
from orders_example.orders.seed import seed_orders

DAY = dt.date(2024, 2, 1)
PARTITION = DAY.isoformat()


def attempt_rows(env, asset="orders", partition=PARTITION) -> list[sa.Row]:
    with engine_from(env).connect() as connection:
        return list(
            connection.execute(
                sa.select(attempts)
                .where(attempts.c.asset == asset, attempts.c.partition == partition)
                .order_by(attempts.c.id)
            )
        )


def quarantine_entry(env, asset="orders", partition=PARTITION):
    with engine_from(env).connect() as connection:
        return active_entry(connection, asset, partition)


def step_events(result: dg.ExecuteInProcessResult, event_type: dg.DagsterEventType) -> list:
    return [event for event in result.all_events if event.event_type == event_type]


def test_malformed_line_is_quarantined_after_exactly_one_attempt(platform_env):
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], DAY, DAY, poison_days=[DAY])

    result = materialize([orders, daily_revenue], PARTITION)

    assert not result.success
    history = attempt_rows(platform_env)
    assert [(row.attempt, row.error_class) for row in history] == [(1, "terminal")]
    assert "not valid JSON" in history[0].message
    entry = quarantine_entry(platform_env)
    assert entry is not None
    assert (entry.attempts, entry.error_class) == (1, "terminal")


def test_terminal_failure_is_not_retried_by_dagster(platform_env):
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], DAY, DAY, poison_days=[DAY])

    result = materialize([orders], PARTITION)

    assert step_events(result, dg.DagsterEventType.STEP_UP_FOR_RETRY) == []
    assert len(step_events(result, dg.DagsterEventType.STEP_FAILURE)) == 1


def test_retryable_error_that_never_clears_is_quarantined_at_the_ceiling(platform_env, monkeypatch):
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], DAY, DAY)
    monkeypatch.setenv("JOBS_PLATFORM_FAILPOINTS", "read@orders=transient")

    result = materialize([orders], PARTITION)

    assert not result.success
    ceiling = int(platform_env["JOBS_PLATFORM_MAX_ATTEMPTS"])
    assert [row.error_class for row in attempt_rows(platform_env)] == ["retryable"] * ceiling
    assert len(step_events(result, dg.DagsterEventType.STEP_UP_FOR_RETRY)) == ceiling - 1
    entry = quarantine_entry(platform_env)
    assert (entry.attempts, entry.error_class) == (ceiling, "retryable")


def test_relaunching_a_quarantined_partition_adds_no_attempt_and_does_no_work(
    platform_env, monkeypatch
):
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], DAY, DAY)
    monkeypatch.setenv("JOBS_PLATFORM_FAILPOINTS", "read@orders=transient")
    assert not materialize([orders], PARTITION).success
    attempts_before = attempt_rows(platform_env)
    monkeypatch.delenv("JOBS_PLATFORM_FAILPOINTS")  # the input would pass now

    relaunch = materialize([orders, daily_revenue], PARTITION)

    assert not relaunch.success
    assert step_events(relaunch, dg.DagsterEventType.STEP_UP_FOR_RETRY) == []
    assert attempt_rows(platform_env) == attempts_before
    assert table_snapshot(engine_from(platform_env), "orders") == []
    failure = step_events(relaunch, dg.DagsterEventType.STEP_FAILURE)[0]
    assert "is quarantined" in failure.event_specific_data.error.message


def test_transient_failure_retries_then_succeeds_without_quarantine(platform_env, monkeypatch):
    seed_orders(platform_env["JOBS_PLATFORM_LANDING"], DAY, DAY, orders_per_day=30)
    monkeypatch.setenv("JOBS_PLATFORM_FAILPOINTS", "read@orders=transient*2")

    result = materialize([orders, daily_revenue], PARTITION)

    assert result.success
    history = attempt_rows(platform_env)
    assert [row.outcome for row in history] == ["failed", "failed", "succeeded"]
    assert [row.error_class for row in history] == ["retryable", "retryable", None]
    assert quarantine_entry(platform_env) is None
    assert len(table_snapshot(engine_from(platform_env), "orders")) == 30
