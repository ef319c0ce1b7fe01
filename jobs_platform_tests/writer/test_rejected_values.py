"""A value the warehouse rejects is named by its row, column and value, on every write path.

PostgreSQL meets a bad value in a COPY (into the seen keys, a staging table or the target
itself) or in the merge; SQLite checks neither types nor lengths but rejects a NULL in a
NOT NULL column. Each time the writer raises `RejectedValue` (terminal) naming the row by
its label in the caller's frame, never the statement or the staging table.
"""

from __future__ import annotations

import pickle

import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform.errors import Classification, classify
from jobs_platform.store.db import warehouse_engine
from jobs_platform.writer.copy import COPY_BLOCK_ROWS
from jobs_platform.writer.rejected_value import RejectedValue
from jobs_platform.writer.sweep import seen_keys_on
from jobs_platform.writer.upsert import upsert_frame


def measures_table() -> sa.Table:
    return sa.Table(
        "measures",
        sa.MetaData(),
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("unit", sa.String(3), nullable=False),
        sa.Column("amount", sa.BigInteger, sa.CheckConstraint("amount >= 0")),
    )


def created_measures(url: str) -> tuple[sa.Engine, sa.Table]:
    table = measures_table()
    engine = warehouse_engine(url)
    table.create(engine)
    return engine, table


@pytest.fixture
def measures(warehouse_url) -> tuple[sa.Engine, sa.Table]:
    return created_measures(warehouse_url)


@pytest.fixture
def pg_measures(pg_url) -> tuple[sa.Engine, sa.Table]:
    return created_measures(pg_url)


def frame(*rows: tuple, index: pd.Index | None = None) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["id", "unit", "amount"], index=index)


def rejection(engine: sa.Engine, table: sa.Table, chunk: pd.DataFrame) -> RejectedValue:
    with pytest.raises(RejectedValue) as rejected, engine.begin() as connection:
        upsert_frame(connection, table, ["id"], chunk)
    return rejected.value


def sweep_rejection(
    engine: sa.Engine, table: sa.Table, chunks: list[pd.DataFrame]
) -> RejectedValue:
    """Write chunks as a sweep does (each chunk's keys recorded as seen, then the chunk)."""
    with (
        pytest.raises(RejectedValue) as rejected,
        engine.connect() as connection,
        seen_keys_on(connection, table, ["id"]) as seen_keys,
    ):
        for chunk in chunks:
            with connection.begin():
                seen_keys.add(chunk)
                upsert_frame(connection, table, ["id"], chunk)
    return rejected.value


def test_a_value_of_the_wrong_type_names_its_row_column_and_value(pg_measures):
    engine, table = pg_measures

    rejected = rejection(engine, table, frame((1, "kg", "1"), (2, "kg", "two"), (3, "kg", "3")))

    assert str(rejected) == "row 1, column 'amount': 'two' is not a valid BIGINT"
    assert (rejected.row, rejected.column, rejected.chunk) == ("row 1", "amount", None)
    assert classify(rejected).classification is Classification.TERMINAL


def test_the_row_is_named_by_the_frames_index_and_its_name(pg_measures):
    engine, table = pg_measures
    lines = pd.RangeIndex(10, 13, name="line")

    rejected = rejection(
        engine, table, frame((1, "kg", 1), (2, "kilo", 2), (3, "kg", 3), index=lines)
    )

    assert str(rejected) == "line 11, column 'unit': 'kilo' is too long for VARCHAR(3)"


def test_a_repeated_key_does_not_shift_the_row_named(pg_measures):
    engine, table = pg_measures
    # The first line of key 1 is dropped (the last line wins): the COPY's line 2 is row 2.
    chunk = frame((1, "kg", 1), (1, "kg", 1), (2, "kilo", 2))

    assert rejection(engine, table, chunk).row == "row 2"


def test_a_long_value_is_truncated(pg_measures):
    engine, table = pg_measures

    rejected = rejection(engine, table, frame((1, "k" * 500, 1)))

    assert str(rejected) == f"row 0, column 'unit': '{'k' * 56}... is too long for VARCHAR(3)"


def test_a_null_rejected_by_the_merge_names_the_first_row_with_it(measures):
    engine, table = measures
    with engine.begin() as connection:  # rows in the key range: the chunk takes the merge
        upsert_frame(connection, table, ["id"], frame((1, "kg", 1), (3, "kg", 3)))

    rejected = rejection(engine, table, frame((1, "kg", 1), (2, "g", 2), (3, None, 3)))

    assert str(rejected) == "row 2, column 'unit': NULL in a NOT NULL column"


def test_a_null_copied_straight_into_the_table_names_its_row(pg_measures):
    engine, table = pg_measures  # an empty key range: COPY into the table itself

    rejected = rejection(engine, table, frame((1, "kg", 1), (2, None, 2)))

    assert str(rejected) == "row 1, column 'unit': NULL in a NOT NULL column"


def test_a_rejection_in_a_later_block_of_a_large_chunk_names_its_own_row(pg_measures):
    """The chunk is COPYed in blocks (`COPY_BLOCK_ROWS`): still one COPY, one line a row."""
    engine, table = pg_measures
    rows = COPY_BLOCK_ROWS * 2 + 10
    bad = COPY_BLOCK_ROWS + 7
    chunk = pd.DataFrame(
        {
            "id": range(1, rows + 1),
            "unit": ["kg" if n != bad else "kilogram" for n in range(rows)],
            "amount": range(rows),
        }
    )

    rejected = rejection(engine, table, chunk)

    assert str(rejected) == f"row {bad}, column 'unit': 'kilogram' is too long for VARCHAR(3)"


def test_a_check_constraint_is_rejected_in_the_databases_words_never_the_stages(measures):
    engine, table = measures

    rejected = rejection(engine, table, frame((1, "kg", 1), (2, "kg", -2)))

    assert "check constraint" in str(rejected).lower()
    assert "jp_stage" not in str(rejected)


def test_a_check_constraint_met_by_a_copy_names_the_row(pg_measures):
    engine, table = pg_measures  # an empty key range: COPY into the table itself

    rejected = rejection(engine, table, frame((1, "kg", 1), (2, "kg", -2)))

    assert str(rejected) == (
        'row 1: the warehouse rejected it: new row for relation "measures" violates check '
        'constraint "measures_amount_check"'
    )


def test_sqlite_stores_a_value_of_the_wrong_type_or_length_as_it_is(sqlite_url):
    engine, table = created_measures(sqlite_url)

    with engine.begin() as connection:
        upsert_frame(connection, table, ["id"], frame((1, "kilo", "two")))

    with engine.connect() as connection:
        assert connection.execute(sa.select(table)).all() == [(1, "kilo", "two")]


def test_a_rejection_while_writing_a_chunk_names_the_chunk(measures):
    engine, table = measures
    chunks = [frame((1, "kg", 1)), frame((2, "kg", 2), (3, None, 3))]

    rejected = sweep_rejection(engine, table, chunks)

    assert str(rejected) == "chunk 1, row 1, column 'unit': NULL in a NOT NULL column"


def test_a_key_rejected_by_the_seen_keys_names_the_chunk(pg_measures):
    engine, table = pg_measures
    chunks = [frame((1, "kg", 1)), frame((2, "kg", 2), ("x3", "kg", 3))]

    rejected = sweep_rejection(engine, table, chunks)

    assert str(rejected) == "chunk 1, row 1, column 'id': 'x3' is not a valid BIGINT"
    assert "jp_stage_seen_keys" in str(rejected.__cause__)  # the database's words, kept


def test_a_rejected_value_survives_pickling_with_its_fields():
    rejected = RejectedValue("'x' is not a valid BIGINT", chunk=2, row="line 9", column="id")

    copy = pickle.loads(pickle.dumps(rejected))

    assert str(copy) == str(rejected) == "chunk 2, line 9, column 'id': 'x' is not a valid BIGINT"
