"""What a user would write instead of the framework, sharing no code with it.

Nothing here imports the framework's writer or its COPY text builder: these are the
baselines the writer is measured against, written as an engineer loading PostgreSQL by
hand would write them, with psycopg 3 only.

- The floors, the physical cost of getting these rows into the table, one transaction per
  chunk: `copy_floor`, COPY … FROM STDIN of text prepared before the clock starts (only
  the COPY is timed), and `server_copy_floor`, COPY … FROM a file the server reads,
  written before the clock starts (no client at all in the timed part).
- The plain script (`plain_script`): per chunk, the chunk deduplicated on its key, a
  temporary stage filled by binary COPY of the columns as Python values (psycopg's fastest
  way from a DataFrame: measured against `write_row` of text, CSV from `to_csv` and
  prepared text, docs/BENCHMARKS.md), then one merging statement, committed per chunk.
  Idempotent, and no new row version for an unchanged row. Three variants of the merge,
  since which is fastest depends on the changed fraction (`PLAIN_VARIANTS`):
  `on_conflict` (`INSERT … SELECT … ON CONFLICT DO UPDATE … WHERE (…) IS DISTINCT FROM
  (…)`), `not_exists` (the same, with the unchanged rows filtered out first by `NOT
  EXISTS`, so that they are not locked), and `merge` (PostgreSQL 15's `MERGE`, after
  `ANALYZE` of the stage).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import psycopg
from psycopg import sql

PLAIN_VARIANTS = ("on_conflict", "not_exists", "merge")
# PostgreSQL's binary COPY type for each kind of pandas column the bench frames hold.
_COPY_TYPES = {"i": "int8", "f": "float8", "b": "bool", "O": "text", "M": "timestamptz"}


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
    with psycopg.connect(dsn) as connection:
        return copy_floor_on(connection, table, columns, texts)


def copy_floor_on(
    connection: psycopg.Connection, table: str, columns: Sequence[str], texts: list[bytes]
) -> float:
    """`copy_floor` on an open connection (whose server process can then be watched)."""
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    began = time.perf_counter()
    for text in texts:
        with connection.transaction(), connection.cursor().copy(statement) as copy:
            copy.write(text)
    return time.perf_counter() - began


def write_copy_files(texts: list[bytes], folder: Path) -> list[Path]:
    """The prepared texts as files the server can read (one per chunk)."""
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    folder.chmod(0o755)
    paths = []
    for number, text in enumerate(texts):
        path = folder / f"chunk_{number:05d}.copy"
        path.write_bytes(text)
        path.chmod(0o644)
        paths.append(path)
    return paths


def server_copy_floor(dsn: str, table: str, columns: Sequence[str], paths: list[Path]) -> float:
    """Seconds for the server to COPY the files into `table`, one transaction per chunk
    (needs a server on this host, and superuser or `pg_read_server_files`)."""
    with psycopg.connect(dsn) as connection:
        return server_copy_floor_on(connection, table, columns, paths)


def server_copy_floor_on(
    connection: psycopg.Connection, table: str, columns: Sequence[str], paths: list[Path]
) -> float:
    """`server_copy_floor` on an open connection."""
    statements = [
        sql.SQL("COPY {} ({}) FROM {}").format(
            sql.Identifier(table),
            sql.SQL(", ").join(map(sql.Identifier, columns)),
            sql.Literal(os.fspath(path)),
        )
        for path in paths
    ]
    began = time.perf_counter()
    for statement in statements:
        with connection.transaction():
            connection.execute(statement)
    return time.perf_counter() - began


def plain_script(
    dsn: str,
    table: str,
    key: Sequence[str],
    frame: pd.DataFrame,
    chunk_rows: int,
    variant: str = "on_conflict",
) -> float:
    """Seconds to stage-and-merge `frame` into `table`, chunk by chunk (all of it timed:
    the values' conversion too)."""
    statements = merge_statements(table, key, list(frame.columns), variant)
    types = copy_types(frame)
    with psycopg.connect(dsn) as connection:
        began = time.perf_counter()
        for start in range(0, len(frame), chunk_rows):
            chunk = frame.iloc[start : start + chunk_rows]
            merge_chunk(connection, statements, key, types, chunk)
        return time.perf_counter() - began


def copy_types(frame: pd.DataFrame) -> list[str]:
    """The binary COPY type of each column of `frame`."""
    return [_COPY_TYPES[dtype.kind] for dtype in frame.dtypes]


def merge_statements(table: str, key: Sequence[str], columns: Sequence[str], variant: str) -> tuple:
    """(create the stage, COPY into it, the statements merging it into `table`)."""
    if variant not in PLAIN_VARIANTS:
        raise ValueError(f"unknown plain-script variant {variant!r}: one of {PLAIN_VARIANTS}")
    others = [name for name in columns if name not in key]
    ident = sql.Identifier
    names = sql.SQL(", ").join(map(ident, columns))
    create_stage = sql.SQL(
        "CREATE TEMPORARY TABLE stage (LIKE {} INCLUDING DEFAULTS) ON COMMIT DROP"
    ).format(ident(table))
    copy_stage = sql.SQL("COPY stage ({}) FROM STDIN (FORMAT BINARY)").format(names)

    def listed(prefix: str, columns: Sequence[str]) -> sql.Composable:
        return sql.SQL(", ").join(sql.SQL(prefix + "{}").format(ident(n)) for n in columns)

    def assigned_from(source: str) -> sql.Composable:
        """`col = source.col, …` for every column outside the key."""
        return sql.SQL(", ").join(
            sql.SQL("{} = " + source + ".{}").format(ident(n), ident(n)) for n in others
        )

    changed = sql.SQL("({}) IS DISTINCT FROM ({})").format(
        listed("t.", others), listed("s.", others)
    )
    matches = sql.SQL(" AND ").join(
        sql.SQL("t.{} = s.{}").format(ident(name), ident(name)) for name in key
    )
    if variant == "merge":
        merge = [
            sql.SQL("ANALYZE stage"),
            sql.SQL(
                "MERGE INTO {table} AS t USING stage AS s ON {matches} "
                "WHEN MATCHED AND {changed} THEN UPDATE SET {sets} "
                "WHEN NOT MATCHED THEN INSERT ({names}) VALUES ({values})"
            ).format(
                table=ident(table),
                matches=matches,
                changed=changed,
                sets=assigned_from("s"),
                names=names,
                values=listed("s.", columns),
            ),
        ]
    else:
        unchanged_filtered = sql.SQL(
            " WHERE NOT EXISTS (SELECT 1 FROM {table} AS t WHERE {matches} "
            "AND ({current}) IS NOT DISTINCT FROM ({incoming}))"
        ).format(
            table=ident(table),
            matches=matches,
            current=listed("t.", others),
            incoming=listed("s.", others),
        )
        merge = [
            sql.SQL(
                "INSERT INTO {table} AS t ({names}) SELECT {values} FROM stage AS s{filtered} "
                "ON CONFLICT ({keys}) DO UPDATE SET {sets} "
                "WHERE ({current}) IS DISTINCT FROM ({incoming})"
            ).format(
                table=ident(table),
                names=names,
                values=listed("s.", columns),
                filtered=unchanged_filtered if variant == "not_exists" else sql.SQL(""),
                keys=sql.SQL(", ").join(map(ident, key)),
                sets=assigned_from("EXCLUDED"),
                current=listed("t.", others),
                incoming=listed("EXCLUDED.", others),
            )
        ]
    return create_stage, copy_stage, merge


def merge_chunk(
    connection: psycopg.Connection,
    statements: tuple,
    key: Sequence[str],
    types: Sequence[str],
    chunk: pd.DataFrame,
) -> None:
    """One chunk of a DataFrame, one transaction (`merge_rows`)."""
    columns = [chunk[name].astype(object).tolist() for name in chunk.columns]
    positions = [list(chunk.columns).index(name) for name in key]
    merge_rows(connection, statements, positions, types, list(zip(*columns, strict=True)))


def merge_rows(
    connection: psycopg.Connection,
    statements: tuple,
    key_positions: Sequence[int],
    types: Sequence[str],
    rows: list[tuple],
) -> None:
    """One chunk of rows, one transaction: stage it with binary COPY, merge it, commit."""
    create_stage, copy_stage, merge = statements
    # One row per key, the last one (ON CONFLICT refuses to touch a row twice).
    latest = {tuple(row[i] for i in key_positions): row for row in rows}
    with connection.transaction(), connection.cursor() as cursor:
        cursor.execute(create_stage)
        with cursor.copy(copy_stage) as copy:
            copy.set_types(list(types))
            for row in latest.values():
                copy.write_row(row)
        for statement in merge:
            cursor.execute(statement)
