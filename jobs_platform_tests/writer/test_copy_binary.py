"""The writer's binary COPY stores what its text COPY stores, or leaves the chunk to the text.

- Every column kind it writes (integers of each width, floats, booleans, strings of any
  script, zone-aware instants, NULLs) is stored as the text and row-by-row paths store it,
  into the target (new keys) and into the stage (the merge).
- The widths are the server's: a column declared BigInteger but created as integer still
  gets 4-byte fields.
- A value the binary format cannot carry as the text would (an integer out of the
  column's range, a NUL in a string) sends the chunk to the text path, where the server
  rejects it naming its row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform.store.db import warehouse_engine
from jobs_platform.writer import copy as copy_module
from jobs_platform.writer.copy_binary import binary_copy
from jobs_platform.writer.rejected_value import RejectedValue
from jobs_platform.writer.upsert import UpsertCounts, upsert_frame
from jobs_platform_tests.writer.test_upsert_fast_paths import (
    KEY,
    every_kind_frame,
    every_kind_table,
    stored,
    upsert,
)


class BinaryCopies:
    """Counts the chunks that went binary (the real `binary_copy`, watched)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, allowed: bool = True) -> None:
        self.binary, self.text = 0, 0
        self.allowed = allowed
        monkeypatch.setattr(copy_module, "binary_copy", self)

    def __call__(self, *args: Any) -> object:
        copy = binary_copy(*args) if self.allowed else None
        if copy is None:
            self.text += 1
        else:
            self.binary += 1
        return copy


def small_integers_table(name: str) -> sa.Table:
    return sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("small", sa.SmallInteger),
        sa.Column("medium", sa.Integer),
        sa.Column("label", sa.String(4)),
        sa.Column("padded", sa.CHAR(3)),
    )


def test_binary_copy_stores_what_the_text_and_row_by_row_copies_store(pg_url, monkeypatch):
    engine = warehouse_engine(pg_url)
    tables = {path: every_kind_table(path) for path in ("binary", "text", "row_by_row")}
    for table in tables.values():
        table.create(engine)
    frame = every_kind_frame()

    with monkeypatch.context() as patch:
        copies = BinaryCopies(patch)
        upsert(engine, tables["binary"], frame)
    with monkeypatch.context() as patch:
        BinaryCopies(patch, allowed=False)
        upsert(engine, tables["text"], frame)
    with monkeypatch.context() as patch:
        BinaryCopies(patch, allowed=False)
        patch.setattr(copy_module, "copy_text", lambda *args: None)
        upsert(engine, tables["row_by_row"], frame)

    assert copies.binary == 1
    assert stored(engine, tables["binary"]) == stored(engine, tables["text"])
    assert stored(engine, tables["binary"]) == stored(engine, tables["row_by_row"])
    assert stored(engine, tables["binary"])[3][3] == -(2**63)


def test_merge_stages_the_chunk_in_binary_and_updates_only_what_changed(pg_url, monkeypatch):
    engine = warehouse_engine(pg_url)
    table = every_kind_table("items")
    table.create(engine)
    frame = every_kind_frame()
    upsert(engine, table, frame)
    changed = frame.assign(name=["plain", "now set", "tab\tnew\nline\r\\N", "🎉 中文 ünï", None])

    copies = BinaryCopies(monkeypatch)
    counts = upsert(engine, table, changed)

    assert copies.binary == 1
    assert counts == UpsertCounts(updated=2, unchanged=3)
    assert [row[1] for row in stored(engine, table)] == changed["name"].tolist()


def test_fields_take_the_servers_widths_not_the_declared_ones(pg_url, monkeypatch):
    engine = warehouse_engine(pg_url)
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "CREATE TABLE narrow (id integer PRIMARY KEY, small smallint, "
                "medium integer, label varchar(4), padded char(3))"
            )
        )
    declared = small_integers_table("narrow")  # id declared BigInteger, created integer
    frame = pd.DataFrame(
        {
            "id": np.array([1, 2, 3], dtype=np.int64),
            "small": pd.array([-(2**15), None, 2**15 - 1], dtype="Int64"),
            "medium": np.array([-(2**31), 0, 2**31 - 1], dtype=np.int64),
            "label": ["a", "ünï", None],
            "padded": ["ab", "", "xyz"],
        }
    )
    copies = BinaryCopies(monkeypatch)

    counts = upsert(engine, declared, frame)

    assert copies.binary == 1
    assert counts == UpsertCounts(inserted=3)
    assert stored(engine, declared) == [
        (1, -(2**15), -(2**31), "a", "ab "),
        (2, None, 0, "ünï", "   "),
        (3, 2**15 - 1, 2**31 - 1, None, "xyz"),
    ]


def test_integer_out_of_the_columns_range_is_rejected_by_the_server_naming_its_row(
    pg_url, monkeypatch
):
    engine = warehouse_engine(pg_url)
    table = small_integers_table("numbers")
    table.create(engine)
    copies = BinaryCopies(monkeypatch)

    with pytest.raises(RejectedValue) as rejected, engine.begin() as connection:
        frame = pd.DataFrame({"id": [1, 2], "small": [1, 2**15]})
        upsert_frame(connection, table, KEY, frame)

    assert copies.text == 1
    assert str(rejected.value) == "row 1, column 'small': 32768 is out of range for SMALLINT"


def test_nul_in_a_string_is_rejected_by_the_server_naming_its_row(pg_url, monkeypatch):
    engine = warehouse_engine(pg_url)
    table = small_integers_table("labels")
    table.create(engine)
    copies = BinaryCopies(monkeypatch)

    with pytest.raises(RejectedValue) as rejected, engine.begin() as connection:
        upsert_frame(connection, table, KEY, pd.DataFrame({"id": [1, 2], "label": ["a", "b\x00"]}))

    assert copies.text == 1
    assert rejected.value.row == "row 1"
    assert rejected.value.sqlstate == "22021"


def test_too_long_string_is_rejected_in_binary_naming_its_row_and_column(pg_url, monkeypatch):
    engine = warehouse_engine(pg_url)
    table = small_integers_table("labels")
    table.create(engine)
    copies = BinaryCopies(monkeypatch)

    with pytest.raises(RejectedValue) as rejected, engine.begin() as connection:
        upsert_frame(connection, table, KEY, pd.DataFrame({"id": [1, 2], "label": ["a", "abcde"]}))

    assert copies.binary == 1
    assert str(rejected.value) == "row 1, column 'label': 'abcde' is too long for VARCHAR(4)"


@pytest.mark.parametrize("distinct", [3, 500], ids=["few distinct strings", "many"])
def test_strings_with_nulls_are_stored_as_the_text_copy_stores_them(pg_url, monkeypatch, distinct):
    engine = warehouse_engine(pg_url)
    binary, text = every_kind_table("binary"), every_kind_table("text")
    binary.create(engine)
    text.create(engine)
    spellings = [f"ünï {number}" if number % 7 else f"n{number}" for number in range(distinct)]
    names = [None if row % 11 == 0 else spellings[row % distinct] for row in range(3_000)]
    frame = pd.DataFrame({"id": np.arange(3_000, dtype=np.int64), "name": names})

    with monkeypatch.context() as patch:
        copies = BinaryCopies(patch)
        upsert(engine, binary, frame)
    with monkeypatch.context() as patch:
        BinaryCopies(patch, allowed=False)
        upsert(engine, text, frame)

    assert copies.binary == 1
    assert stored(engine, binary) == stored(engine, text)
    assert [row[1] for row in stored(engine, binary)] == names


def test_column_of_other_objects_takes_the_text_path(pg_url, monkeypatch):
    engine = warehouse_engine(pg_url)
    table = every_kind_table("items")
    table.create(engine)
    copies = BinaryCopies(monkeypatch)

    upsert(engine, table, pd.DataFrame({"id": [1, 2], "name": ["a", 5]}))

    assert copies.text == 1
    assert [row[1] for row in stored(engine, table)] == ["a", "5"]
