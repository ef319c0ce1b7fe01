"""Finding the rows the warehouse rejects inside a chunk (PostgreSQL): what it costs."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform.store.db import warehouse_engine
from jobs_platform.writer.rejected_value import RejectedValue
from jobs_platform.writer.rejecting_upsert import upsert_rejecting_rows

ROWS = 1_000


@pytest.fixture
def engine(pg_url) -> sa.Engine:
    return warehouse_engine(pg_url)


def checked_table(engine: sa.Engine) -> sa.Table:
    table = sa.Table(
        "checked",
        sa.MetaData(),
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("amount", sa.BigInteger, sa.CheckConstraint("amount >= 0"), nullable=False),
        sa.UniqueConstraint("amount", name="uq_checked_amount"),
    )
    table.metadata.create_all(engine)
    return table


def frame(amounts: dict[int, int]) -> pd.DataFrame:
    values = [amounts.get(i, i) for i in range(1, ROWS + 1)]
    return pd.DataFrame(
        {"id": range(1, ROWS + 1), "amount": values}, index=pd.Index(range(1, ROWS + 1))
    )


@pytest.mark.parametrize("stored", [False, True], ids=["copy_new_rows", "merge"])
def test_one_check_violation_is_found_in_at_most_twice_log2_statements(engine, stored):
    table = checked_table(engine)
    if stored:  # a key in the chunk's range is stored: the chunk takes the merge
        with engine.begin() as connection:
            connection.execute(table.insert(), [{"id": 500, "amount": 10**9}])

    with engine.begin() as connection:
        result = upsert_rejecting_rows(connection, table, ["id"], frame({700: -1}))

    assert [(row.label, row.sqlstate) for row in result.rejected] == [(700, "23514")]
    assert result.statements <= 2 * math.ceil(math.log2(ROWS)) + 1
    with engine.connect() as connection:
        assert connection.execute(sa.select(sa.func.count()).select_from(table)).scalar_one() == 999


def test_a_rejection_no_single_row_caused_is_raised_not_rejected(engine):
    table = checked_table(engine)
    duplicated = frame({2: 1})  # two rows with amount 1: the unique constraint on amount

    with pytest.raises(RejectedValue) as rejected, engine.begin() as connection:
        upsert_rejecting_rows(connection, table, ["id"], duplicated)

    assert rejected.value.sqlstate == "23505"


def test_it_stops_once_more_rows_are_rejected_than_allowed(engine):
    table = checked_table(engine)

    with engine.begin() as connection:
        result = upsert_rejecting_rows(
            connection, table, ["id"], frame({i: -i for i in range(10, 110, 10)}), most=2
        )

    assert result.stopped_early
    assert len(result.rejected) == 3


def test_a_merge_check_violation_is_found_from_the_failing_row_in_two_statements(engine):
    table = checked_table(engine)
    with engine.begin() as connection:  # a stored key in range: the chunk takes the merge
        connection.execute(table.insert(), [{"id": 500, "amount": 10**9}])

    with engine.begin() as connection:
        result = upsert_rejecting_rows(connection, table, ["id"], frame({700: -1, 900: -2}))

    assert [row.label for row in result.rejected] == [700, 900]
    # rejected naming 700, rows before it; rejected naming 900, rows between; rows after
    assert result.statements == 5


def test_a_failing_row_it_cannot_read_for_certain_is_found_by_bisection(engine):
    table = sa.Table(
        "noted",
        sa.MetaData(),
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("note", sa.Text, sa.CheckConstraint("note <> 'a, b'"), nullable=False),
    )
    table.metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(table.insert(), [{"id": 1, "note": "stored"}])
    notes = pd.DataFrame(
        {"id": range(1, 65), "note": ["a, b" if i == 40 else "fine" for i in range(1, 65)]},
        index=pd.Index(range(1, 65)),
    )

    with engine.begin() as connection:
        result = upsert_rejecting_rows(connection, table, ["id"], notes)

    assert [row.label for row in result.rejected] == [40]
    assert result.statements > 3  # "a, b" makes the failing row ambiguous: bisected
