"""A value the warehouse rejects is named by where it is in the input, not by the staging.

A CSV backfill whose chunk holds a value its column cannot store (not an integer, too
long, a NULL in a NOT NULL column) fails terminally, and the quarantine entry says which
chunk, which input line, which column and which value, in the framework's words, instead
of quoting the COPY into a staging table (`COPY jp_stage_seen_keys, line 2`).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset
from jobs_platform.dead_letter.entries import active_entry
from jobs_platform_tests.environments import engine_from
from jobs_platform_tests.rows import attempts_of
from jobs_platform_tests.runs import materialize
from orders_example.orders.resources import LandingZone

DAY = "2024-01-03"
CHUNK_ROWS = 3

readings_metadata = sa.MetaData()
readings_table = sa.Table(
    "test_readings",
    readings_metadata,
    sa.Column("reading_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("day", sa.String(10), nullable=False),
    sa.Column("station", sa.String(8), nullable=False),
    sa.Column("value", sa.BigInteger, nullable=False),
)


def readings_file(landing_root: str, day: str) -> Path:
    return Path(landing_root) / "readings" / f"{day}.csv"


@backfill_asset(
    table=readings_table,
    partitions_def=dg.StaticPartitionsDefinition([DAY]),
    partition_scope=lambda table, day: table.c.day == day,
)
def readings(source: PartitionInput, landing: LandingZone):
    """A day's meter readings from a CSV file (a test-only backfill, as in the README)."""
    path = readings_file(landing.resolved_root(), source.partition_key)
    for chunk in pd.read_csv(path, chunksize=source.chunk_rows):
        chunk["day"] = source.partition_key
        # Index the frame by the input's line numbers (line 1 is the header), so that an
        # error about a row names its line.
        chunk.index = pd.RangeIndex(chunk.index[0] + 2, chunk.index[-1] + 3, name="line")
        yield chunk


def write_readings(landing_root: str, bad_line: str) -> None:
    """Six readings; line 6 of the file, the second row of chunk 1, replaced by `bad_line`."""
    lines = ["reading_id,station,value", *(f"{n},ST{n},{n * 10}" for n in range(1, 7))]
    lines[5] = bad_line
    path = readings_file(landing_root, DAY)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def quarantined_message(env: dict[str, str]) -> str:
    engine = engine_from(env)
    history = attempts_of(engine, "readings", DAY)
    assert [row.error_class for row in history] == ["terminal"]
    with engine.connect() as connection:
        entry = active_entry(connection, "readings", DAY)
    assert entry is not None and entry.attempts == 1
    assert entry.last_error == history[0].message
    return entry.last_error


def stored_readings(env: dict[str, str]) -> list[tuple]:
    with engine_from(env).connect() as connection:
        return [
            tuple(row)
            for row in connection.execute(
                sa.select(readings_table.c.reading_id, readings_table.c.station).order_by(
                    readings_table.c.reading_id
                )
            )
        ]


@pytest.mark.parametrize(
    ("bad_line", "named"),
    [
        ("x5,ST5,50", "chunk 1, line 6, column 'reading_id': 'x5' is not a valid BIGINT"),
        ("5,ST5,fifty", "chunk 1, line 6, column 'value': 'fifty' is not a valid BIGINT"),
        (
            "5,STATION-FIVE,50",
            "chunk 1, line 6, column 'station': 'STATION-FIVE' is too long for VARCHAR(8)",
        ),
        ("5,,50", "chunk 1, line 6, column 'station': NULL in a NOT NULL column"),
        (
            "5,ST5,99999999999999999999",
            "chunk 1, line 6, column 'value': '99999999999999999999' is out of range for BIGINT",
        ),
    ],
)
def test_a_value_postgres_rejects_is_quarantined_naming_its_chunk_line_column_and_value(
    pg_platform_env, bad_line, named
):
    write_readings(pg_platform_env["JOBS_PLATFORM_LANDING"], bad_line)

    result = materialize([readings], DAY, chunk_rows=CHUNK_ROWS)

    assert not result.success
    message = quarantined_message(pg_platform_env)
    assert message == named
    assert stored_readings(pg_platform_env) == [(1, "ST1"), (2, "ST2"), (3, "ST3")]  # chunk 0


def test_a_null_in_a_not_null_column_is_quarantined_on_sqlite_too(platform_env):
    write_readings(platform_env["JOBS_PLATFORM_LANDING"], "5,,50")

    result = materialize([readings], DAY, chunk_rows=CHUNK_ROWS)

    assert not result.success
    assert quarantined_message(platform_env) == (
        "chunk 1, line 6, column 'station': NULL in a NOT NULL column"
    )


@pytest.mark.parametrize("bad_line", ["x5,ST5,50", "5,STATION-FIVE,50"])
def test_sqlite_stores_a_value_postgres_rejects_since_it_checks_neither_types_nor_lengths(
    sqlite_url, tmp_path, monkeypatch, bad_line
):
    from jobs_platform_tests.databases import prepare_warehouse
    from jobs_platform_tests.environments import enter_environment, platform_environment

    prepare_warehouse(sqlite_url)
    env = enter_environment(platform_environment(sqlite_url, tmp_path), monkeypatch, tmp_path)
    write_readings(env["JOBS_PLATFORM_LANDING"], bad_line)

    result = materialize([readings], DAY, chunk_rows=CHUNK_ROWS)

    assert result.success
    stored_id, stored_station = bad_line.split(",")[:2]
    assert (stored_id if stored_id == "x5" else 5, stored_station) in stored_readings(env)
