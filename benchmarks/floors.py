"""The COPY floors: the physical cost of getting the bench's rows into a table.

Nothing here imports the framework. Each floor loads one transaction per chunk, and
everything but the COPY itself is done before the clock starts.

- `copy_floor`: COPY … FROM STDIN of text prepared beforehand (the client sends it).
- `server_copy_floor` of text files: COPY … FROM 'file', the server reads text files
  written beforehand (no client at all in the timed part).
- `server_copy_floor` of binary files (`binary=True`): the same with
  `(FORMAT BINARY)` files, the format the framework's writer sends. The files are the
  server's own binary COPY output of each chunk (`write_binary_copy_files`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import psycopg
from psycopg import sql


def prepared_copy_text(frame: pd.DataFrame, chunk_rows: int) -> list[bytes]:
    """Each chunk as COPY text (before any timing)."""
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


def _columns(table: str, columns: Sequence[str]) -> sql.Composable:
    names = sql.SQL(", ").join(map(sql.Identifier, columns))
    return sql.SQL("{} ({})").format(sql.Identifier(table), names)


def copy_floor(dsn: str, table: str, columns: Sequence[str], texts: list[bytes]) -> float:
    """Seconds to COPY the prepared texts, one transaction per chunk."""
    with psycopg.connect(dsn) as connection:
        return copy_floor_on(connection, table, columns, texts)


def copy_floor_on(
    connection: psycopg.Connection, table: str, columns: Sequence[str], texts: list[bytes]
) -> float:
    """`copy_floor` on an open connection (whose server process can then be watched)."""
    statement = sql.SQL("COPY {} FROM STDIN").format(_columns(table, columns))
    began = time.perf_counter()
    for text in texts:
        with connection.transaction(), connection.cursor().copy(statement) as copy:
            copy.write(text)
    return time.perf_counter() - began


def _readable_folder(folder: Path) -> None:
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    folder.chmod(0o755)  # the server's own user reads the files


def _write_file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o644)
    return path


def write_copy_files(texts: list[bytes], folder: Path) -> list[Path]:
    """The prepared texts as files the server can read (one per chunk)."""
    _readable_folder(folder)
    return [
        _write_file(folder / f"chunk_{number:05d}.copy", text) for number, text in enumerate(texts)
    ]


def write_binary_copy_files(
    dsn: str, like: str, columns: Sequence[str], texts: list[bytes], folder: Path
) -> list[Path]:
    """Each chunk as a binary COPY file the server can read: the prepared text loaded into
    a scratch table shaped like table `like`, then COPYed out by the server in binary."""
    _readable_folder(folder)
    scratch = _columns("floor_scratch", columns)
    load = sql.SQL("COPY {} FROM STDIN").format(scratch)
    unload = sql.SQL("COPY {} TO STDOUT (FORMAT BINARY)").format(scratch)
    paths = []
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            sql.SQL("CREATE TEMPORARY TABLE floor_scratch (LIKE {})").format(sql.Identifier(like))
        )
        for number, text in enumerate(texts):
            connection.execute("TRUNCATE floor_scratch")
            with connection.cursor() as cursor:
                with cursor.copy(load) as copy:
                    copy.write(text)
                with cursor.copy(unload) as copy:
                    data = b"".join(bytes(block) for block in copy)
            paths.append(_write_file(folder / f"chunk_{number:05d}.bin", data))
    return paths


def server_copy_floor(
    dsn: str, table: str, columns: Sequence[str], paths: list[Path], *, binary: bool = False
) -> float:
    """Seconds for the server to COPY the files into `table`, one transaction per chunk
    (needs a server on this host, and superuser or `pg_read_server_files`)."""
    with psycopg.connect(dsn) as connection:
        return server_copy_floor_on(connection, table, columns, paths, binary=binary)


def server_copy_floor_on(
    connection: psycopg.Connection,
    table: str,
    columns: Sequence[str],
    paths: list[Path],
    *,
    binary: bool = False,
) -> float:
    """`server_copy_floor` on an open connection."""
    form = sql.SQL(" (FORMAT BINARY)" if binary else "")
    statements = [
        sql.SQL("COPY {} FROM {}{}").format(
            _columns(table, columns), sql.Literal(os.fspath(path)), form
        )
        for path in paths
    ]
    began = time.perf_counter()
    for statement in statements:
        with connection.transaction():
            connection.execute(statement)
    return time.perf_counter() - began
