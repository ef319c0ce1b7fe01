"""The PostgreSQL writer's fast paths keep the writer's contract (see test_upsert.py).

- Column-wise COPY text stores exactly what psycopg's row-by-row COPY stores.
- A chunk of new integer keys is copied straight into the table; a writer that inserts
  one of those keys concurrently sends the chunk back through the merge.
- The merge skips unchanged rows without locking them.
"""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import sqlalchemy as sa

from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import UtcDateTime
from jobs_platform.writer import copy as copy_module
from jobs_platform.writer import upsert as upsert_module
from jobs_platform.writer.upsert import UpsertCounts, upsert_frame
from jobs_platform_tests.waiting import wait_for

KEY = ["id"]


def every_kind_table(name: str) -> sa.Table:
    return sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("name", sa.Text),
        sa.Column("amount", sa.Float),
        sa.Column("quantity", sa.BigInteger),
        sa.Column("flag", sa.Boolean),
        sa.Column("seen_at", UtcDateTime),
        sa.Column("noted_at", sa.DateTime(timezone=True)),
    )


def every_kind_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": np.array([1, 2, 3, 4, 5], dtype=np.int64),
            "name": ["plain", None, "tab\tnew\nline\r\\N", "🎉 中文 ünï", ""],
            "amount": [1.5, np.nan, -0.0, 1e300, float("inf")],
            "quantity": pd.array([7, None, 9, -(2**63), 2**63 - 1], dtype="Int64"),
            "flag": [True, False, True, False, True],
            "seen_at": pd.to_datetime(
                [
                    "2024-01-03T00:00:00.000001Z",
                    None,
                    "1969-12-31T23:59:59.9999995Z",
                    None,
                    "2024-02-29T12:00:00Z",
                ],
                format="ISO8601",
            ),
            "noted_at": pd.to_datetime(["2024-07-01T10:00:00"] * 5).tz_localize("Asia/Kolkata"),
        }
    )


def upsert(engine: sa.Engine, table: sa.Table, frame: pd.DataFrame) -> UpsertCounts:
    with engine.begin() as connection:
        return upsert_frame(connection, table, KEY, frame)


def stored(engine: sa.Engine, table: sa.Table) -> list[tuple]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(sa.select(table).order_by(table.c.id))]


def test_column_wise_copy_stores_what_the_row_by_row_copy_stores(pg_url, monkeypatch):
    engine = warehouse_engine(pg_url)
    column_wise, row_by_row = every_kind_table("column_wise"), every_kind_table("row_by_row")
    column_wise.create(engine)
    row_by_row.create(engine)
    frame = every_kind_frame()

    upsert(engine, column_wise, frame)
    with monkeypatch.context() as patch:
        patch.setattr(copy_module, "copy_text", lambda *args: None)
        upsert(engine, row_by_row, frame)

    assert stored(engine, column_wise) == stored(engine, row_by_row)
    assert stored(engine, column_wise)[2][1] == "tab\tnew\nline\r\\N"


def test_chunk_of_new_keys_is_copied_without_a_merge(pg_url, monkeypatch):
    engine = warehouse_engine(pg_url)
    table = every_kind_table("items")
    table.create(engine)
    upsert(engine, table, pd.DataFrame({"id": [1, 2], "name": ["a", "b"]}))

    def no_merge(*args):
        raise AssertionError("a chunk of new keys went through the merge")

    monkeypatch.setattr(upsert_module, "_merge_from_stage", no_merge)
    counts = upsert(engine, table, pd.DataFrame({"id": [3, 4], "name": ["c", "d"]}))

    assert counts == UpsertCounts(inserted=2)
    assert [row[:2] for row in stored(engine, table)] == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]


def test_new_row_of_nulls_among_existing_keys_is_inserted(pg_url):
    engine = warehouse_engine(pg_url)
    table = every_kind_table("items")
    table.create(engine)
    upsert(engine, table, pd.DataFrame({"id": [1, 3], "name": ["a", "c"]}))

    counts = upsert(engine, table, pd.DataFrame({"id": [1, 2, 3], "name": ["a", None, "c"]}))

    assert counts == UpsertCounts(inserted=1, unchanged=2)
    assert [row[:2] for row in stored(engine, table)] == [(1, "a"), (2, None), (3, "c")]


def test_key_inserted_concurrently_after_the_probe_sends_the_chunk_through_the_merge(pg_url):
    engine = warehouse_engine(pg_url)
    table = every_kind_table("items")
    table.create(engine)
    other = engine.connect()
    other_transaction = other.begin()
    other.execute(sa.insert(table).values(id=5, name="other writer"))
    outcome: dict = {}

    def upsert_in_background():
        try:
            outcome["counts"] = upsert(
                engine, table, pd.DataFrame({"id": [4, 5, 6], "name": ["d", "e", "f"]})
            )
        except BaseException as exc:  # surfaced by the assertion below
            outcome["error"] = exc

    writer = threading.Thread(target=upsert_in_background)
    writer.start()
    wait_for(lambda: _copy_waiting_on_a_lock(engine), timeout=30, what="COPY to wait on key 5")
    other_transaction.commit()
    other.close()
    writer.join(timeout=30)

    assert "error" not in outcome, outcome.get("error")
    assert outcome["counts"] == UpsertCounts(inserted=2, updated=1)
    assert [row[:2] for row in stored(engine, table)] == [(4, "d"), (5, "e"), (6, "f")]


def _copy_waiting_on_a_lock(engine: sa.Engine) -> bool:
    with engine.connect() as connection:
        return bool(
            connection.execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE 'COPY%' AND datname = current_database()"
                )
            ).scalar_one()
        )


def test_unchanged_reupsert_locks_no_row(pg_url):
    engine = warehouse_engine(pg_url)
    table = every_kind_table("items")
    table.create(engine)
    frame = pd.DataFrame({"id": [1, 2, 3], "name": ["a", "b", "c"]})
    upsert(engine, table, frame)

    with engine.connect() as writer, writer.begin():
        counts = upsert_frame(writer, table, KEY, frame)
        with engine.connect() as reader, reader.begin():
            locked = reader.execute(
                sa.text("SELECT id FROM items ORDER BY id FOR UPDATE NOWAIT")
            ).scalars()
            assert list(locked) == [1, 2, 3]

    assert counts == UpsertCounts(unchanged=3)


def test_a_chunk_mostly_changed_is_merged_without_the_unchanged_rows_filter(pg_url):
    engine = warehouse_engine(pg_url)
    table = every_kind_table("items")
    table.create(engine)
    upsert(engine, table, pd.DataFrame({"id": [1, 2, 3, 4], "name": ["a", "b", "c", "d"]}))
    merges: list[str] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def keep_merges(connection, cursor, statement, parameters, context, executemany):
        if statement.lstrip().startswith("WITH merged"):
            merges.append(statement)

    three_changed = pd.DataFrame({"id": [1, 2, 3, 4], "name": ["A", "B", "C", "d"]})
    counts = upsert(engine, table, three_changed)
    one_changed = pd.DataFrame({"id": [1, 2, 3, 4], "name": ["A", "B", "C", "D"]})
    counts_after = upsert(engine, table, one_changed)

    assert counts == UpsertCounts(updated=3, unchanged=1)
    assert counts_after == UpsertCounts(updated=1, unchanged=3)
    # The sample saw 3 of 4 changed: no probe per staged row; then 1 of 4: the probe.
    assert ["AS stored" in merge for merge in merges] == [False, True]
    assert [row[:2] for row in stored(engine, table)] == [(1, "A"), (2, "B"), (3, "C"), (4, "D")]
