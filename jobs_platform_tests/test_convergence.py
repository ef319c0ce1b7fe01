"""A partition converges to its input: re-runs after the input changed leave exactly its rows.

The expected tables are derived in the test straight from the landing file
(`expected_tables_from_landing`), not from the framework, and compared with the warehouse
read through the declared tables.
"""

from __future__ import annotations

import datetime as dt

import pytest

from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.landing import (
    expected_tables_from_landing,
    order_line,
    read_landing_lines,
    write_landing_lines,
)
from jobs_platform_tests.rows import declared_rows
from jobs_platform_tests.runs import materialize, metadata_of
from orders_example.orders.assets import (
    daily_revenue,
    orders,
    orders_of_day,
    revenue_of_day,
)
from orders_example.orders.seed import seed_orders
from orders_example.orders.tables import daily_revenue_table, orders_table

DAY = "2024-01-09"
ORDERS_PER_DAY = 100
CHUNK_ROWS = 30


def _run(chunk_rows: int = CHUNK_ROWS):
    result = materialize([orders, daily_revenue], DAY, chunk_rows=chunk_rows)
    assert result.success
    return result


def _warehouse(env) -> tuple[list[tuple], list[tuple]]:
    engine = engine_from(env)
    return declared_rows(engine, orders_table), declared_rows(engine, daily_revenue_table)


def _seed(env) -> list[dict]:
    day = dt.date.fromisoformat(DAY)
    seed_orders(env["JOBS_PLATFORM_LANDING"], day, day, orders_per_day=ORDERS_PER_DAY)
    return read_landing_lines(env["JOBS_PLATFORM_LANDING"], DAY)


def _changed(records: list[dict]) -> tuple[list[dict], dict[str, int]]:
    """The input edited: 7 orders removed, 5 amounts changed, one paid order refunded."""
    removed = {records[index]["order_id"] for index in (0, 13, 29, 30, 31, 64, 99)}
    kept = [dict(record) for record in records if record["order_id"] not in removed]
    for record in kept[2:52:10]:
        record["amount_cents"] += 777
    refunded = next(record for record in kept[60:] if record["status"] == "paid")
    refunded["status"] = "refunded"
    return kept, {"removed": len(removed), "changed": 6}


def test_rerun_after_input_changed_leaves_exactly_the_new_inputs_rows(platform_env):
    landing = platform_env["JOBS_PLATFORM_LANDING"]
    records = _seed(platform_env)
    _run()
    changed, _ = _changed(records)
    write_landing_lines(landing, DAY, changed)

    _run()

    assert _warehouse(platform_env) == expected_tables_from_landing(landing, DAY)


def test_rows_swept_counts_the_orders_removed_from_the_input(platform_env):
    records = _seed(platform_env)
    _run()
    changed, edits = _changed(records)
    write_landing_lines(platform_env["JOBS_PLATFORM_LANDING"], DAY, changed)

    result = _run()

    assert metadata_of(result, "orders")["rows_swept"] == edits["removed"]


def test_rerun_after_input_changed_counts_only_changed_rows_as_updated(platform_env):
    records = _seed(platform_env)
    _run()
    changed, edits = _changed(records)
    write_landing_lines(platform_env["JOBS_PLATFORM_LANDING"], DAY, changed)

    metadata = metadata_of(_run(), "orders")

    assert metadata["rows_inserted"] == 0
    assert metadata["rows_updated"] == edits["changed"]
    assert metadata["rows_unchanged"] == ORDERS_PER_DAY - edits["removed"] - edits["changed"]


def test_paid_order_turned_refunded_leaves_daily_revenue(platform_env):
    landing = platform_env["JOBS_PLATFORM_LANDING"]
    records = _seed(platform_env)
    _run()
    _, revenue_before = _warehouse(platform_env)
    refunded = next(record for record in records if record["status"] == "paid")
    refunded["status"] = "refunded"
    write_landing_lines(landing, DAY, records)

    _run()

    _, revenue_after = _warehouse(platform_env)
    before = {row[1]: row for row in revenue_before}[refunded["currency"]]
    after = {row[1]: row for row in revenue_after}[refunded["currency"]]
    assert after[2:] == (before[2] - refunded["amount_cents"], before[3] - 1)
    assert revenue_after == expected_tables_from_landing(landing, DAY)[1]


@pytest.mark.parametrize(
    "chunk_rows", [1_000, 10], ids=["repeats_in_one_chunk", "repeats_across_chunks"]
)
def test_repeated_order_id_within_a_day_takes_the_last_line(platform_env, chunk_rows):
    landing = platform_env["JOBS_PLATFORM_LANDING"]
    lines = [order_line(order_id, day=DAY, second=order_id) for order_id in range(1, 41)]
    lines.insert(3, order_line(7, day=DAY, amount_cents=1, status="pending", second=7))
    lines.append(order_line(7, day=DAY, amount_cents=4_242, currency="EUR", second=7))
    lines.insert(25, order_line(30, day=DAY, amount_cents=5, second=30))
    write_landing_lines(landing, DAY, lines)

    _run(chunk_rows)

    orders_rows, revenue_rows = _warehouse(platform_env)
    by_id = {row[0]: row for row in orders_rows}
    assert len(orders_rows) == 40
    assert by_id[7][2:5] == (4_242, "EUR", "paid")
    assert by_id[30][2] == 1_000  # the original line 30 comes after the inserted one
    assert (orders_rows, revenue_rows) == expected_tables_from_landing(landing, DAY)


def test_input_that_shrinks_then_grows_back_converges_each_time(platform_env):
    landing = platform_env["JOBS_PLATFORM_LANDING"]
    input_a = _seed(platform_env)  # 100 orders: 4 chunks
    input_b = [dict(record) for record in input_a[:40]]  # 2 chunks, one amount changed
    input_b[5]["amount_cents"] += 1

    seen = []
    for records in (input_a, input_b, input_a):
        write_landing_lines(landing, DAY, records)
        _run()
        seen.append(_warehouse(platform_env))
        assert seen[-1] == expected_tables_from_landing(landing, DAY)

    assert len(seen[1][0]) == 40
    assert seen[2] == seen[0]


def test_input_emptied_of_paid_orders_leaves_no_revenue_rows_for_the_day(platform_env):
    landing = platform_env["JOBS_PLATFORM_LANDING"]
    records = _seed(platform_env)
    _run()
    for record in records:
        if record["status"] == "paid":
            record["status"] = "refunded"
    write_landing_lines(landing, DAY, records)

    _run()

    assert _warehouse(platform_env) == expected_tables_from_landing(landing, DAY)
    assert _warehouse(platform_env)[1] == []


def test_input_emptied_sweeps_every_row_of_the_day(platform_env):
    landing = platform_env["JOBS_PLATFORM_LANDING"]
    _seed(platform_env)
    _run()
    write_landing_lines(landing, DAY, [])

    result = _run()

    assert _warehouse(platform_env) == ([], [])
    assert metadata_of(result, "orders")["rows_swept"] == ORDERS_PER_DAY


def _rows_of_day(engine, day: str) -> tuple[list[tuple], list[tuple]]:
    return (
        declared_rows(engine, orders_table, orders_of_day(orders_table, day)),
        declared_rows(engine, daily_revenue_table, revenue_of_day(daily_revenue_table, day)),
    )


def test_changed_input_of_one_day_leaves_other_days_untouched(platform_env):
    landing = platform_env["JOBS_PLATFORM_LANDING"]
    other_day = "2024-01-10"
    seed_orders(
        landing,
        dt.date.fromisoformat(DAY),
        dt.date.fromisoformat(other_day),
        orders_per_day=ORDERS_PER_DAY,
    )
    _run()
    assert materialize([orders, daily_revenue], other_day, chunk_rows=CHUNK_ROWS).success
    engine = engine_from(platform_env)
    other_day_before = _rows_of_day(engine, other_day)
    write_landing_lines(landing, DAY, read_landing_lines(landing, DAY)[:10])

    _run()

    assert len(other_day_before[0]) == ORDERS_PER_DAY
    assert _rows_of_day(engine, other_day) == other_day_before
    assert len(_rows_of_day(engine, DAY)[0]) == 10
