"""A landing file with an invalid line fails its partition at once, terminally, and says where.

Each case is a day of good orders with one bad line in the second chunk, so the first
chunk has already committed when validation fails. The partition is quarantined after one
attempt; once the file is fixed and the partition requeued, a re-run leaves exactly what a
clean run of the fixed file leaves.
"""

from __future__ import annotations

import json

import pytest

from jobs_platform.dead_letter.entries import DeadLetter
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import warehouse_engine
from jobs_platform_tests.databases import sibling_database
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.landing import order_line, write_landing_lines
from jobs_platform_tests.rows import attempts_of, table_snapshot
from jobs_platform_tests.runs import materialize, materialize_into
from orders_example.orders.assets import daily_revenue, orders

DAY = "2024-01-11"
CHUNK_ROWS = 10
GOOD_ORDERS = 25
BAD_LINE = 14  # 1-based: lines 11..20 form the second chunk
TABLES = ("orders", "daily_revenue")


def _bad(**changes) -> str:
    record = order_line(900, day=DAY, second=900)
    record.update(changes)
    return json.dumps({key: value for key, value in record.items() if value is not None})


# rule → (the bad line, what the failure must say about where and what)
RULES = {
    "bad_json": ('{"schema_version": 1, "order_id": 900, ', f"line {BAD_LINE}: not valid JSON"),
    "unknown_schema_version": (
        _bad(schema_version=2),
        f"line {BAD_LINE}, field 'schema_version': unknown schema_version 2",
    ),
    "missing_field": (
        _bad(customer_id=None),
        f"line {BAD_LINE}, field 'customer_id': required field is missing",
    ),
    "wrong_type": (
        _bad(amount_cents="1200"),
        f"line {BAD_LINE}, field 'amount_cents': must be an integer",
    ),
    "negative_amount": (
        _bad(amount_cents=-5),
        f"line {BAD_LINE}, field 'amount_cents': must be >= 0",
    ),
    "bad_currency": (_bad(currency="JPY"), f"line {BAD_LINE}, field 'currency': must be one of"),
    "another_days_timestamp": (
        _bad(ordered_at="2024-01-12T00:00:00Z"),
        f"line {BAD_LINE}, field 'ordered_at': must fall on {DAY}",
    ),
}


def _good_lines() -> list[dict]:
    return [
        order_line(order_id, day=DAY, amount_cents=100 * order_id, second=60 * order_id)
        for order_id in range(1, GOOD_ORDERS + 1)
    ]


def _write_with_bad_line(env, rule: str) -> None:
    lines: list[dict | str] = list(_good_lines())
    lines.insert(BAD_LINE - 1, RULES[rule][0])
    write_landing_lines(env["JOBS_PLATFORM_LANDING"], DAY, lines)


def _run():
    return materialize([orders, daily_revenue], DAY, chunk_rows=CHUNK_ROWS)


def _failure_messages(result) -> list[str]:
    return [
        event.step_failure_data.error.message
        for event in result.get_step_failure_events()
        if event.step_failure_data.error is not None
    ]


@pytest.mark.parametrize("rule", list(RULES))
def test_invalid_line_fails_the_run_naming_its_line_and_field(rule, pg_platform_env):
    _write_with_bad_line(pg_platform_env, rule)

    result = _run()

    assert not result.success
    messages = _failure_messages(result)
    assert len(messages) == 1 and RULES[rule][1] in messages[0], messages


@pytest.mark.parametrize("rule", list(RULES))
def test_invalid_line_is_terminal_after_a_single_attempt(rule, pg_platform_env):
    _write_with_bad_line(pg_platform_env, rule)

    result = _run()

    retries = [
        event for event in result.all_events if event.event_type_value == "STEP_UP_FOR_RETRY"
    ]
    assert retries == []
    history = attempts_of(engine_from(pg_platform_env), "orders", DAY)
    assert [(row.outcome, row.error_class) for row in history] == [("failed", "terminal")]


def test_rerun_of_a_quarantined_partition_is_refused_without_an_attempt(platform_env):
    _write_with_bad_line(platform_env, "negative_amount")
    assert not _run().success
    engine = engine_from(platform_env)
    orders_after_failure = table_snapshot(engine, "orders")

    result = _run()

    assert not result.success
    assert any("is quarantined" in message for message in _failure_messages(result))
    assert len(attempts_of(engine, "orders", DAY)) == 1
    assert table_snapshot(engine, "orders") == orders_after_failure


@pytest.mark.parametrize("rule", ["bad_json", "another_days_timestamp"])
def test_fixed_and_requeued_partition_converges_to_a_clean_run(rule, platform_env, tmp_path):
    _write_with_bad_line(platform_env, rule)
    assert not _run().success
    engine = engine_from(platform_env)
    assert len(table_snapshot(engine, "orders")) == CHUNK_ROWS  # the first chunk committed
    # The producer re-delivers the day: the bad line corrected, and order 3 (already
    # committed in the first chunk) withdrawn.
    fixed = [line for line in _good_lines() if line["order_id"] != 3]
    fixed.insert(BAD_LINE - 1, order_line(900, day=DAY, amount_cents=90_000, second=900))
    write_landing_lines(platform_env["JOBS_PLATFORM_LANDING"], DAY, fixed)
    with engine.begin() as connection:
        DeadLetter(DATABASE_CLOCK).requeue_partition(connection, "orders", DAY)

    result = _run()

    assert result.success
    with sibling_database(platform_env["JOBS_PLATFORM_DATABASE_URL"], tmp_path) as clean_url:
        materialize_into(clean_url, [orders, daily_revenue], DAY, chunk_rows=CHUNK_ROWS)
        clean_engine = warehouse_engine(clean_url)
        clean = {name: table_snapshot(clean_engine, name) for name in TABLES}
        clean_engine.dispose()
    assert {name: table_snapshot(engine, name) for name in TABLES} == clean
