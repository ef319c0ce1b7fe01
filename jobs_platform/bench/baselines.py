"""What a user would write instead of the framework, sharing no code with it.

Nothing here imports the framework's writer or its COPY text builder: these are the
baselines the writer is measured against, written as an engineer loading PostgreSQL by
hand would write them, with psycopg 3 only.

- `copy_floor`: COPY of text prepared beforehand (only the COPY is timed): the physical
  floor of getting these rows into the table.
- `best_plain_script`: per chunk, COPY into a temporary stage (psycopg's `write_row`
  formats the values; the chunk deduplicated on its key first), then ONE merging
  `INSERT … SELECT … ON CONFLICT DO UPDATE … WHERE (…) IS DISTINCT FROM (…)`, committed
  per chunk. Idempotent, and no new row version for an unchanged row: the script a
  careful engineer writes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import pandas as pd
import psycopg
from psycopg import sql


def prepared_copy_text(frame: pd.DataFrame, chunk_rows: int) -> list[bytes]:
    """Each chunk as COPY text, built with psycopg's own formatting (before any timing)."""
    texts = []
    for start in range(0, len(frame), chunk_rows):
        chunk = frame.iloc[start : start + chunk_rows]
        lines = []
        for row in chunk.itertuples(index=False, name=None):
            lines.append("\t".join(_field(value) for value in row))
        texts.append(("\n".join(lines) + "\n").encode())
    return texts


def _field(value) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "\\N"
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    text = str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def copy_floor(dsn: str, table: str, columns: Sequence[str], texts: list[bytes]) -> float:
    """Seconds to COPY the prepared texts, one transaction per chunk."""
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    with psycopg.connect(dsn) as connection:
        began = time.perf_counter()
        for text in texts:
            with connection.transaction(), connection.cursor().copy(statement) as copy:
                copy.write(text)
        return time.perf_counter() - began


def best_plain_script(
    dsn: str,
    table: str,
    key: Sequence[str],
    frame: pd.DataFrame,
    chunk_rows: int,
) -> float:
    """Seconds to stage-and-merge `frame` into `table`, chunk by chunk (all of it timed)."""
    statements = merge_statements(table, key, list(frame.columns))
    with psycopg.connect(dsn) as connection:
        began = time.perf_counter()
        for start in range(0, len(frame), chunk_rows):
            merge_chunk(connection, statements, key, frame.iloc[start : start + chunk_rows])
        return time.perf_counter() - began


def merge_statements(table: str, key: Sequence[str], columns: Sequence[str]) -> tuple:
    """(create the stage, COPY into it, merge it into `table`) for these columns."""
    others = [name for name in columns if name not in key]
    ident = sql.Identifier
    names = sql.SQL(", ").join(map(ident, columns))
    create_stage = sql.SQL(
        "CREATE TEMPORARY TABLE stage (LIKE {} INCLUDING DEFAULTS) ON COMMIT DROP"
    ).format(ident(table))
    copy_stage = sql.SQL("COPY stage ({}) FROM STDIN").format(names)
    merge = sql.SQL(
        "INSERT INTO {table} ({names}) SELECT {names} FROM stage "
        "ON CONFLICT ({keys}) DO UPDATE SET {sets} "
        "WHERE ({current}) IS DISTINCT FROM ({incoming})"
    ).format(
        table=ident(table),
        names=names,
        keys=sql.SQL(", ").join(map(ident, key)),
        sets=sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(ident(name), ident(name)) for name in others
        ),
        current=sql.SQL(", ").join(sql.SQL("{}.{}").format(ident(table), ident(n)) for n in others),
        incoming=sql.SQL(", ").join(sql.SQL("EXCLUDED.{}").format(ident(n)) for n in others),
    )
    return create_stage, copy_stage, merge


def merge_chunk(
    connection: psycopg.Connection, statements: tuple, key: Sequence[str], chunk: pd.DataFrame
) -> None:
    """One chunk, one transaction: stage it with COPY, merge it, commit."""
    create_stage, copy_stage, merge = statements
    # One row per key, the last one (ON CONFLICT refuses to touch a row twice).
    chunk = chunk.drop_duplicates(list(key), keep="last")
    with connection.transaction(), connection.cursor() as cursor:
        cursor.execute(create_stage)
        with cursor.copy(copy_stage) as copy:
            for row in chunk.itertuples(index=False, name=None):
                copy.write_row(row)
        cursor.execute(merge)
