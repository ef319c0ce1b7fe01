"""The seen keys' temporary table, kept on its connection from one attempt to the next.

A partition of a few rows paid more for creating and dropping the table than for its rows
(docs/BENCHMARKS.md, the hourly shape): a successful attempt now leaves it to the
connection's next attempt, which empties it first. What must hold: an attempt's sweep
sees only its own keys, a failed attempt leaves no table behind, and a table that took
many keys, or of other columns, or gone with the session, is made anew.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform.store.db import warehouse_engine
from jobs_platform.writer import sweep as sweep_module
from jobs_platform.writer.sweep import SEEN_KEYS_TABLE, seen_keys_on, sweep_partition
from jobs_platform_tests.store.test_sweep_and_checkpoints import (
    ids_by_part,
    insert,
    items_table,
    sales_table,
)


@pytest.fixture
def warehouse(upgraded_url) -> sa.Engine:
    return warehouse_engine(upgraded_url)


@pytest.fixture
def items(warehouse) -> sa.Table:
    table = items_table()
    table.create(warehouse)
    return table


def attempt(connection: sa.Connection, table: sa.Table, part: str, ids: list[int]) -> int:
    """One attempt's use of the seen keys: its keys added, then the sweep of its part."""
    with seen_keys_on(connection, table, ["id"]) as seen:
        with connection.begin():
            seen.add(pd.DataFrame({"id": ids}))
        with connection.begin():
            return sweep_partition(connection, table, ["id"], table.c.part == part, seen)


def has_seen_keys(connection: sa.Connection) -> bool:
    found = sa.inspect(connection).has_table(SEEN_KEYS_TABLE)
    connection.rollback()  # the look-up's own transaction, so the next attempt can begin
    return found


def test_the_next_attempt_on_the_connection_sees_only_its_own_keys(warehouse, items):
    insert(warehouse, items, [{"id": i, "part": "a"} for i in range(1, 6)])

    with warehouse.connect() as connection:
        assert attempt(connection, items, "a", [1, 2, 3, 4, 5]) == 0
        assert has_seen_keys(connection)  # kept for the next attempt
        swept = attempt(connection, items, "a", [5])

    # Keys 1-4 of the first attempt were emptied out, so they are swept now.
    assert swept == 4
    assert ids_by_part(warehouse, items) == {"a": [5]}


def test_a_failed_attempt_drops_the_table(warehouse, items):
    with warehouse.connect() as connection:
        attempt(connection, items, "a", [1])
        with pytest.raises(RuntimeError), seen_keys_on(connection, items, ["id"]) as seen:
            with connection.begin():
                seen.add(pd.DataFrame({"id": [1, 2]}))
            raise RuntimeError("the attempt failed")

        assert not has_seen_keys(connection)
        # And the next attempt makes it again.
        insert(warehouse, items, [{"id": 7, "part": "a"}])
        assert attempt(connection, items, "a", []) == 1


def test_a_table_that_took_many_keys_is_dropped(warehouse, items, monkeypatch):
    monkeypatch.setattr(sweep_module, "RECYCLE_MAX_KEYS", 5)

    with warehouse.connect() as connection:
        attempt(connection, items, "a", [1, 2, 3])
        assert has_seen_keys(connection)
        attempt(connection, items, "a", [4, 5, 6])  # 6 keys through it: past the limit

        assert not has_seen_keys(connection)
        insert(warehouse, items, [{"id": 9, "part": "a"}])
        assert attempt(connection, items, "a", [1]) == 1


def test_a_kept_table_of_other_columns_is_made_again(warehouse, items):
    sales = sales_table()
    sales.create(warehouse)
    day = dt.date(2024, 1, 1)
    insert(warehouse, sales, [{"day": day, "shop": s, "total": 1} for s in ("x", "y")])
    insert(warehouse, items, [{"id": 1, "part": "a"}])

    with warehouse.connect() as connection:
        attempt(connection, items, "a", [1])
        with seen_keys_on(connection, sales, ["day", "shop"]) as seen:
            with connection.begin():
                seen.add(pd.DataFrame({"day": [day], "shop": ["x"]}))
            with connection.begin():
                swept = sweep_partition(
                    connection, sales, ["day", "shop"], sales.c.day == day, seen
                )
        after = attempt(connection, items, "a", [1])

    assert swept == 1  # ("y") only: the composite key's table, not the kept one of ids
    assert after == 0
    with warehouse.connect() as connection:
        shops = connection.execute(sa.select(sales.c.shop)).scalars().all()
    assert shops == ["x"]


def test_a_kept_table_gone_with_the_session_is_made_again(warehouse, items):
    insert(warehouse, items, [{"id": i, "part": "a"} for i in (1, 2)])

    with warehouse.connect() as connection:
        attempt(connection, items, "a", [1, 2])
        with connection.begin():  # as DISCARD TEMP would, or a pooler's session reset
            connection.execute(sa.text(f"DROP TABLE {SEEN_KEYS_TABLE}"))

        assert attempt(connection, items, "a", [2]) == 1

    assert ids_by_part(warehouse, items) == {"a": [2]}


def test_a_sweep_of_keys_given_as_values_replaces_the_kept_table(warehouse, items):
    insert(warehouse, items, [{"id": i, "part": "a"} for i in (1, 2, 3)])

    with warehouse.connect() as connection:
        attempt(connection, items, "a", [1, 2, 3])
        with connection.begin():
            assert sweep_partition(connection, items, ["id"], items.c.part == "a", {1, 2}) == 1

        # That sweep dropped the table; the next attempt makes it again and sees its keys.
        assert attempt(connection, items, "a", [1]) == 1

    assert ids_by_part(warehouse, items) == {"a": [1]}
