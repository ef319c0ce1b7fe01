"""Specifications of the sweep (a partition converges to its input) and chunk checkpoints."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform.store.checkpoints import (
    Checkpoints,
    committed_chunks,
    forget_chunks_from,
    forget_other_inputs,
)
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import checkpoints
from jobs_platform.writer.sweep import SWEEP_BATCH, sweep_partition
from jobs_platform.writer.upsert import upsert_frame

ASSET = "items"


def items_table() -> sa.Table:
    return sa.Table(
        "items",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("part", sa.Text, nullable=False),
    )


def sales_table() -> sa.Table:
    return sa.Table(
        "sales",
        sa.MetaData(),
        sa.Column("day", sa.Date, primary_key=True),
        sa.Column("shop", sa.Text, primary_key=True),
        sa.Column("total", sa.Integer, nullable=False),
    )


@pytest.fixture
def warehouse(upgraded_url) -> sa.Engine:
    engine = warehouse_engine(upgraded_url)
    return engine


@pytest.fixture
def items(warehouse) -> sa.Table:
    table = items_table()
    table.create(warehouse)
    return table


def insert(engine: sa.Engine, table: sa.Table, rows: list[dict]) -> None:
    with engine.begin() as connection:
        connection.execute(sa.insert(table), rows)


def ids_by_part(engine: sa.Engine, table: sa.Table) -> dict[str, list[int]]:
    with engine.connect() as connection:
        found: dict[str, list[int]] = {}
        for row_id, part in connection.execute(sa.select(table).order_by(table.c.id)):
            found.setdefault(part, []).append(row_id)
        return found


def sweep(engine: sa.Engine, table: sa.Table, part: str, seen: set, key=("id",)) -> int:
    with engine.begin() as connection:
        return sweep_partition(connection, table, list(key), table.c.part == part, seen)


def record(engine: sa.Engine, partition: str, fingerprint: str, index: int, chunk_hash="h"):
    with engine.begin() as connection:
        Checkpoints(DATABASE_CLOCK).record_chunk(
            connection,
            asset=ASSET,
            partition=partition,
            fingerprint=fingerprint,
            chunk_index=index,
            chunk_hash=chunk_hash,
            row_count=10,
            token=1,
        )


def committed(engine: sa.Engine, partition: str, fingerprint: str) -> dict[int, str]:
    with engine.connect() as connection:
        return committed_chunks(connection, ASSET, partition, fingerprint)


# Sweep


def test_sweep_deletes_exactly_the_rows_in_scope_whose_key_was_not_seen(warehouse, items):
    insert(warehouse, items, [{"id": i, "part": "a"} for i in range(1, 6)])

    swept = sweep(warehouse, items, "a", seen={1, 3, 5})

    assert swept == 2
    assert ids_by_part(warehouse, items) == {"a": [1, 3, 5]}


def test_sweep_leaves_rows_of_other_partitions_alone(warehouse, items):
    insert(warehouse, items, [{"id": 1, "part": "a"}, {"id": 2, "part": "b"}])
    insert(warehouse, items, [{"id": 3, "part": "b"}, {"id": 4, "part": "a"}])

    swept = sweep(warehouse, items, "a", seen={4})

    assert swept == 1
    assert ids_by_part(warehouse, items) == {"a": [4], "b": [2, 3]}


def test_sweep_with_no_key_seen_empties_only_its_partition(warehouse, items):
    insert(warehouse, items, [{"id": 1, "part": "a"}, {"id": 2, "part": "b"}])

    swept = sweep(warehouse, items, "a", seen=set())

    assert swept == 1
    assert ids_by_part(warehouse, items) == {"b": [2]}


def test_sweep_repeated_deletes_nothing_more(warehouse, items):
    insert(warehouse, items, [{"id": i, "part": "a"} for i in range(1, 6)])
    sweep(warehouse, items, "a", seen={2})

    swept_again = sweep(warehouse, items, "a", seen={2})

    assert swept_again == 0
    assert ids_by_part(warehouse, items) == {"a": [2]}


def test_sweep_deletes_stale_rows_beyond_one_batch(warehouse, items):
    row_count = SWEEP_BATCH * 2 + 7
    insert(warehouse, items, [{"id": i, "part": "a"} for i in range(row_count)])

    swept = sweep(warehouse, items, "a", seen={0, row_count - 1})

    assert swept == row_count - 2
    assert ids_by_part(warehouse, items) == {"a": [0, row_count - 1]}


def test_sweep_on_a_composite_key_keeps_the_seen_key_pairs(warehouse):
    table = sales_table()
    table.create(warehouse)
    day1, day2 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)
    rows = [
        {"day": day, "shop": shop, "total": 1}
        for day in (day1, day2)
        for shop in ("north", "south")
    ]
    insert(warehouse, table, rows)

    with warehouse.begin() as connection:
        swept = sweep_partition(
            connection, table, ["day", "shop"], table.c.day == day1, {(day1, "south")}
        )

    with warehouse.connect() as connection:
        left = {tuple(row) for row in connection.execute(sa.select(table.c.day, table.c.shop))}
    assert swept == 1
    assert left == {(day1, "south"), (day2, "north"), (day2, "south")}


# Checkpoints


def test_recorded_chunks_are_committed_for_their_input_only(warehouse):
    record(warehouse, "p1", "input-1", 0, "hash-0")
    record(warehouse, "p1", "input-1", 1, "hash-1")
    record(warehouse, "p1", "input-2", 0, "other")
    record(warehouse, "p2", "input-1", 5, "elsewhere")

    assert committed(warehouse, "p1", "input-1") == {0: "hash-0", 1: "hash-1"}


def test_recording_a_chunk_again_replaces_its_checkpoint(warehouse):
    record(warehouse, "p1", "input-1", 0, "first")

    record(warehouse, "p1", "input-1", 0, "second")

    assert committed(warehouse, "p1", "input-1") == {0: "second"}


def test_a_partition_without_checkpoints_has_no_committed_chunks(warehouse):
    assert committed(warehouse, "p1", "input-1") == {}


def test_forget_other_inputs_drops_every_other_fingerprint_of_the_partition(warehouse):
    record(warehouse, "p1", "old-a", 0)
    record(warehouse, "p1", "old-b", 3)
    record(warehouse, "p1", "current", 1)
    record(warehouse, "p2", "old-a", 0)

    with warehouse.begin() as connection:
        forgotten = forget_other_inputs(connection, ASSET, "p1", "current")

    assert forgotten == 2
    assert committed(warehouse, "p1", "current") == {1: "h"}
    assert committed(warehouse, "p1", "old-a") == {}
    assert committed(warehouse, "p2", "old-a") == {0: "h"}


def test_forget_chunks_from_drops_that_index_and_later_of_the_partition(warehouse):
    for index in range(4):
        record(warehouse, "p1", "input-1", index)
    record(warehouse, "p2", "input-1", 3)

    with warehouse.begin() as connection:
        forgotten = forget_chunks_from(connection, ASSET, "p1", 2)

    assert forgotten == 2
    assert committed(warehouse, "p1", "input-1") == {0: "h", 1: "h"}
    assert committed(warehouse, "p2", "input-1") == {3: "h"}


def test_rolled_back_chunk_transaction_leaves_neither_rows_nor_checkpoint(warehouse, items):
    chunk = pd.DataFrame({"id": [1, 2], "part": ["a", "a"]})

    with pytest.raises(RuntimeError), warehouse.begin() as connection:
        upsert_frame(connection, items, ["id"], chunk)
        Checkpoints(DATABASE_CLOCK).record_chunk(
            connection,
            asset=ASSET,
            partition="a",
            fingerprint="input-1",
            chunk_index=0,
            chunk_hash="h",
            row_count=2,
            token=1,
        )
        raise RuntimeError("the worker fails before COMMIT")

    assert ids_by_part(warehouse, items) == {}
    with warehouse.connect() as connection:
        assert connection.execute(sa.select(sa.func.count()).select_from(checkpoints)).scalar() == 0


def test_committed_chunk_transaction_leaves_both_rows_and_checkpoint(warehouse, items):
    chunk = pd.DataFrame({"id": [1, 2], "part": ["a", "a"]})

    with warehouse.begin() as connection:
        upsert_frame(connection, items, ["id"], chunk)
        Checkpoints(DATABASE_CLOCK).record_chunk(
            connection,
            asset=ASSET,
            partition="a",
            fingerprint="input-1",
            chunk_index=0,
            chunk_hash="h",
            row_count=2,
            token=1,
        )

    assert ids_by_part(warehouse, items) == {"a": [1, 2]}
    assert committed(warehouse, "a", "input-1") == {0: "h"}
