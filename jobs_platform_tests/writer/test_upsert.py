"""Specifications of the upsert writer: exact counts, last row wins, values round-trip.

PostgreSQL stages a chunk with COPY, SQLite with an executemany; every behaviour here holds
on both, and one test compares the two paths row for row.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import UtcDateTime
from jobs_platform.writer.upsert import UpsertCounts, last_row_per_key, upsert_frame

KEY = ["id"]


def items_table() -> sa.Table:
    """A target table with one column of each kind a backfill typically writes."""
    return sa.Table(
        "items",
        sa.MetaData(),
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("name", sa.Text),
        sa.Column("amount", sa.Float),
        sa.Column("quantity", sa.BigInteger),
        sa.Column("seen_at", UtcDateTime),
    )


def pairs_table() -> sa.Table:
    return sa.Table(
        "pairs",
        sa.MetaData(),
        sa.Column("day", sa.Date, primary_key=True),
        sa.Column("currency", sa.String(3), primary_key=True),
        sa.Column("total", sa.BigInteger, nullable=False),
    )


def new_table(url: str, table: sa.Table) -> sa.Engine:
    engine = warehouse_engine(url)
    table.create(engine)
    return engine


def upsert(engine: sa.Engine, table: sa.Table, frame: pd.DataFrame, key=KEY) -> UpsertCounts:
    with engine.begin() as connection:
        return upsert_frame(connection, table, key, frame)


def rows(engine: sa.Engine, table: sa.Table) -> list[tuple]:
    with engine.connect() as connection:
        query = sa.select(table).order_by(*table.primary_key.columns)
        return [tuple(row) for row in connection.execute(query)]


def names(*pairs: tuple[int, str | None]) -> pd.DataFrame:
    return pd.DataFrame({"id": [p[0] for p in pairs], "name": [p[1] for p in pairs]})


def row_versions(engine: sa.Engine, table_name: str) -> dict[int, str]:
    """PostgreSQL's xmin per row id: it changes exactly when a row is rewritten."""
    with engine.connect() as connection:
        result = connection.execute(sa.text(f"SELECT id, xmin::text FROM {table_name}"))
        return {row_id: version for row_id, version in result}


@pytest.fixture
def items(warehouse_url) -> tuple[sa.Engine, sa.Table]:
    table = items_table()
    return new_table(warehouse_url, table), table


# Counts


def test_first_upsert_counts_every_row_as_inserted(items):
    engine, table = items

    counts = upsert(engine, table, names((1, "a"), (2, "b"), (3, "c")))

    assert counts == UpsertCounts(inserted=3, updated=0, unchanged=0)


def test_counts_split_exactly_into_inserted_updated_and_unchanged(items):
    engine, table = items
    upsert(engine, table, names((1, "a"), (2, "b"), (3, "c")))

    counts = upsert(engine, table, names((1, "a"), (2, "B"), (4, "d"), (5, "e")))

    assert counts == UpsertCounts(inserted=2, updated=1, unchanged=1)
    assert counts.written == 3


def test_setting_a_value_to_null_counts_as_an_update(items):
    engine, table = items
    upsert(engine, table, names((1, "a"), (2, None)))

    counts = upsert(engine, table, names((1, None), (2, None)))

    assert counts == UpsertCounts(inserted=0, updated=1, unchanged=1)
    assert [row[:2] for row in rows(engine, table)] == [(1, None), (2, None)]


def test_empty_chunk_writes_nothing(items):
    engine, table = items

    counts = upsert(engine, table, names())

    assert counts == UpsertCounts()
    assert rows(engine, table) == []


# Idempotency


def test_unchanged_reupsert_changes_nothing(items):
    engine, table = items
    frame = names((1, "a"), (2, "b"))
    upsert(engine, table, frame)
    before = rows(engine, table)

    counts = upsert(engine, table, frame)

    assert counts == UpsertCounts(inserted=0, updated=0, unchanged=2)
    assert rows(engine, table) == before


def test_unchanged_reupsert_creates_no_new_row_versions_on_postgresql(pg_url):
    table = items_table()
    engine = new_table(pg_url, table)
    frame = pd.DataFrame(
        {
            "id": [1, 2, 3],
            "name": ["a", None, "c"],
            "amount": [1.5, float("nan"), 0.0],
            "seen_at": [dt.datetime(2024, 1, 3, 4, 5, tzinfo=dt.UTC), pd.NaT, pd.NaT],
        }
    )
    upsert(engine, table, frame)
    versions = row_versions(engine, "items")

    upsert(engine, table, frame)

    assert row_versions(engine, "items") == versions


def test_only_changed_rows_get_new_row_versions_on_postgresql(pg_url):
    table = items_table()
    engine = new_table(pg_url, table)
    upsert(engine, table, names((1, "a"), (2, "b")))
    versions = row_versions(engine, "items")

    upsert(engine, table, names((1, "a"), (2, "changed")))

    after = row_versions(engine, "items")
    assert after[1] == versions[1]
    assert after[2] != versions[2]


# Keys


def test_repeated_key_in_one_chunk_keeps_the_last_row(items):
    engine, table = items

    counts = upsert(engine, table, names((1, "first"), (2, "b"), (1, "second"), (1, "last")))

    assert counts == UpsertCounts(inserted=2, updated=0, unchanged=0)
    assert [row[:2] for row in rows(engine, table)] == [(1, "last"), (2, "b")]


def test_repeated_key_in_one_chunk_updates_an_existing_row_to_the_last_value(items):
    engine, table = items
    upsert(engine, table, names((1, "old")))

    counts = upsert(engine, table, names((1, "new"), (1, "newest")))

    assert counts == UpsertCounts(inserted=0, updated=1, unchanged=0)
    assert [row[:2] for row in rows(engine, table)] == [(1, "newest")]


def test_composite_key_merges_on_the_whole_key(warehouse_url):
    table = pairs_table()
    engine = new_table(warehouse_url, table)
    day1, day2 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)
    first = pd.DataFrame(
        {"day": [day1, day1, day2], "currency": ["EUR", "USD", "EUR"], "total": [1, 2, 3]}
    )
    upsert(engine, table, first, key=["day", "currency"])

    second = pd.DataFrame(
        {"day": [day1, day2, day2], "currency": ["USD", "EUR", "USD"], "total": [20, 3, 4]}
    )
    counts = upsert(engine, table, second, key=["day", "currency"])

    assert counts == UpsertCounts(inserted=1, updated=1, unchanged=1)
    assert rows(engine, table) == [
        (day1, "EUR", 1),
        (day1, "USD", 20),
        (day2, "EUR", 3),
        (day2, "USD", 4),
    ]


def test_repeated_composite_key_in_one_chunk_keeps_the_last_row(warehouse_url):
    table = pairs_table()
    engine = new_table(warehouse_url, table)
    day = dt.date(2024, 1, 1)
    frame = pd.DataFrame({"day": [day, day, day], "currency": ["EUR", "USD", "EUR"]})

    upsert(engine, table, frame.assign(total=[1, 2, 3]), key=["day", "currency"])

    assert rows(engine, table) == [(day, "EUR", 3), (day, "USD", 2)]


def test_table_of_key_columns_only_inserts_new_keys_and_keeps_the_rest(warehouse_url):
    table = sa.Table("tags", sa.MetaData(), sa.Column("tag", sa.Text, primary_key=True))
    engine = new_table(warehouse_url, table)
    upsert(engine, table, pd.DataFrame({"tag": ["a", "b"]}), key=["tag"])

    counts = upsert(engine, table, pd.DataFrame({"tag": ["b", "c", "c"]}), key=["tag"])

    assert counts == UpsertCounts(inserted=1, updated=0, unchanged=1)
    assert rows(engine, table) == [("a",), ("b",), ("c",)]


def test_last_row_per_key_keeps_each_keys_last_row_in_input_order():
    frame = names((3, "x"), (1, "a"), (3, "y"), (2, "b"), (1, "c"))

    kept = last_row_per_key(frame, ["id"])

    assert list(kept.itertuples(index=False, name=None)) == [(3, "y"), (2, "b"), (1, "c")]


# Values


def test_missing_values_none_nan_and_nat_are_stored_as_null(items):
    engine, table = items
    frame = pd.DataFrame(
        {
            "id": [1, 2],
            "name": ["a", None],
            "amount": [np.nan, 2.5],
            "quantity": [None, 7],  # pandas holds this as float64: [NaN, 7.0]
            "seen_at": pd.to_datetime([pd.NaT, "2024-01-03T00:00:00Z"]),
        }
    )

    upsert(engine, table, frame)

    assert rows(engine, table) == [
        (1, "a", None, None, None),
        (2, None, 2.5, 7, dt.datetime(2024, 1, 3, tzinfo=dt.UTC)),
    ]


def test_nullable_integer_dtype_round_trips_as_integers(items):
    engine, table = items
    quantities = pd.array([5, 6], dtype="Int64")

    upsert(engine, table, pd.DataFrame({"id": [1, 2], "quantity": quantities}))

    stored = [row[3] for row in rows(engine, table)]
    assert stored == [5, 6]
    assert all(type(value) is int for value in stored)


AWKWARD_TEXT = [
    "plain",
    "",
    "emoji 🎉🚀 and a flag 🇫🇷",
    "中文字符 日本語 한국어",
    "quotes ' \" `",
    "commas, more, commas",
    "tab\there",
    "new\nline and carriage\r\nreturn",
    "back\\slash \\N \\t \\\\",
    "\\N",
    "NULL",
    "trailing space ",
    "ünïcödé ñ ß €",
]


def test_awkward_text_round_trips_exactly(items):
    engine, table = items
    frame = pd.DataFrame({"id": range(len(AWKWARD_TEXT)), "name": AWKWARD_TEXT})

    upsert(engine, table, frame)

    assert [row[1] for row in rows(engine, table)] == AWKWARD_TEXT


def test_awkward_text_reupserted_is_unchanged(items):
    engine, table = items
    frame = pd.DataFrame({"id": range(len(AWKWARD_TEXT)), "name": AWKWARD_TEXT})
    upsert(engine, table, frame)

    counts = upsert(engine, table, frame)

    assert counts == UpsertCounts(unchanged=len(AWKWARD_TEXT))


def test_timezone_aware_timestamps_round_trip_as_the_same_instants(items):
    engine, table = items
    instants = [
        dt.datetime(2024, 1, 3, 23, 59, 59, 999999, tzinfo=dt.UTC),
        dt.datetime(2024, 1, 3, 10, 0, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
        dt.datetime(2024, 7, 1, 1, 2, 3, 456, tzinfo=dt.timezone(dt.timedelta(hours=-8))),
    ]
    frame = pd.DataFrame({"id": [1, 2, 3], "seen_at": pd.Series(instants, dtype=object)})

    upsert(engine, table, frame)

    stored = [row[4] for row in rows(engine, table)]
    assert stored == instants
    assert all(value.utcoffset() == dt.timedelta(0) for value in stored)


def test_utc_timestamp_column_round_trips_exactly(items):
    engine, table = items
    seen_at = pd.to_datetime(
        ["2024-01-03T00:00:00.000001Z", "2024-02-29T12:34:56Z"], format="ISO8601"
    )

    upsert(engine, table, pd.DataFrame({"id": [1, 2], "seen_at": seen_at}))

    assert [row[4] for row in rows(engine, table)] == [t.to_pydatetime() for t in seen_at]


def test_naive_timestamp_for_a_utc_column_is_rejected(items):
    engine, table = items
    frame = pd.DataFrame({"id": [1], "seen_at": [dt.datetime(2024, 1, 3, 10, 0)]})

    with pytest.raises(Exception, match="naive datetimes are ambiguous"):
        upsert(engine, table, frame)

    assert rows(engine, table) == []


def test_chunk_may_carry_a_subset_of_the_columns_and_leaves_the_others_alone(items):
    engine, table = items
    upsert(engine, table, pd.DataFrame({"id": [1], "name": ["a"], "amount": [1.5]}))

    counts = upsert(engine, table, pd.DataFrame({"id": [1, 2], "amount": [9.0, 2.0]}))

    assert counts == UpsertCounts(inserted=1, updated=1, unchanged=0)
    assert [row[:3] for row in rows(engine, table)] == [(1, "a", 9.0), (2, None, 2.0)]


def test_two_chunks_upserted_in_one_transaction_both_apply(items):
    engine, table = items

    with engine.begin() as connection:
        first = upsert_frame(connection, table, KEY, names((1, "a"), (2, "b")))
        second = upsert_frame(connection, table, KEY, names((2, "B"), (3, "c")))

    assert (first, second) == (UpsertCounts(inserted=2), UpsertCounts(inserted=1, updated=1))
    assert [row[:2] for row in rows(engine, table)] == [(1, "a"), (2, "B"), (3, "c")]


def test_upsert_rolled_back_with_its_transaction_leaves_no_row(items):
    engine, table = items

    with pytest.raises(RuntimeError), engine.begin() as connection:
        upsert_frame(connection, table, KEY, names((1, "a")))
        raise RuntimeError("the chunk's transaction fails after the upsert")

    assert rows(engine, table) == []


# The two staging paths


def mixed_frames() -> list[pd.DataFrame]:
    """Chunks that exercise every kind of value, repeated keys and changes between chunks."""
    return [
        pd.DataFrame(
            {
                "id": [1, 2, 3, 4, 2],
                "name": ["a", None, "tab\tcomma,quote'", "🎉\nline", "b-last"],
                "amount": [1.25, np.nan, -0.1, 1e300, 3.0],
                "quantity": [10, None, 30, 40, 20],
                "seen_at": pd.to_datetime(
                    [
                        "2024-01-03T00:00:00Z",
                        None,
                        "2024-01-03T12:00:00.5Z",
                        "2024-01-03T23:59:59Z",
                        None,
                    ],
                    format="ISO8601",
                ),
            }
        ),
        pd.DataFrame(
            {
                "id": [3, 5, 1],
                "name": ["changed", "back\\slash", "a"],
                "amount": [-0.1, 0.0, 1.25],
                "quantity": [31, 50, 10],
                "seen_at": pd.to_datetime(
                    ["2024-01-03T12:00:00.5Z", None, "2024-01-03T00:00:00Z"], format="ISO8601"
                ),
            }
        ),
        pd.DataFrame({"id": [4, 6], "name": [None, "中文"]}),
    ]


def test_copy_path_on_postgresql_stores_the_same_rows_as_the_sqlite_path(pg_url, sqlite_url):
    results = {}
    for backend, url in (("postgresql", pg_url), ("sqlite", sqlite_url)):
        table = items_table()
        engine = new_table(url, table)
        counts = [upsert(engine, table, frame) for frame in mixed_frames()]
        results[backend] = (counts, set(rows(engine, table)))

    assert results["postgresql"] == results["sqlite"]
    assert len(results["sqlite"][1]) == 6


# Rejections


def test_chunk_with_a_column_unknown_to_the_table_is_rejected_by_name(items):
    engine, table = items
    frame = pd.DataFrame({"id": [1], "name": ["a"], "colour": ["red"]})

    with pytest.raises(ValueError, match=r"chunk for items has columns not in the table.*colour"):
        upsert(engine, table, frame)

    assert rows(engine, table) == []


def test_chunk_without_its_key_column_is_rejected_by_name(items):
    engine, table = items

    with pytest.raises(ValueError, match=r"chunk for items lacks key column\(s\) \['id'\]"):
        upsert(engine, table, pd.DataFrame({"name": ["a"]}))

    assert rows(engine, table) == []


# Properties


ROW = st.tuples(
    st.integers(min_value=0, max_value=6),
    st.none() | st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00")),
)
FRAMES = st.lists(st.lists(ROW, max_size=8), min_size=1, max_size=5)
PROPERTY_SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _restart(engine: sa.Engine, table: sa.Table) -> None:
    with engine.begin() as connection:
        connection.execute(sa.delete(table))


@PROPERTY_SETTINGS
@given(frames=FRAMES)
def test_any_sequence_of_chunks_leaves_the_last_value_of_each_key(items, frames):
    engine, table = items
    _restart(engine, table)
    expected: dict[int, str | None] = {}

    for pairs in frames:
        upsert(engine, table, names(*pairs))
        expected.update(dict(pairs))

    assert [row[:2] for row in rows(engine, table)] == sorted(expected.items())


@PROPERTY_SETTINGS
@given(frames=FRAMES)
def test_counts_of_any_sequence_of_chunks_match_a_model_of_the_table(items, frames):
    engine, table = items
    _restart(engine, table)
    model: dict[int, str | None] = {}

    for pairs in frames:
        last = dict(pairs)
        expected = UpsertCounts(
            inserted=sum(key not in model for key in last),
            updated=sum(key in model and model[key] != value for key, value in last.items()),
            unchanged=sum(key in model and model[key] == value for key, value in last.items()),
        )
        assert upsert(engine, table, names(*pairs)) == expected
        model.update(last)
