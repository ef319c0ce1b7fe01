"""Where a declared backfill's rows come from: a query over a source database, or a file.

Plain Python over SQLAlchemy and pandas, no Dagster. Secrets stay out of the declaration:
the source's URL (or a landing folder) is read from the variable it names when a step
runs, and never shown. The partition reaches the query only as bound parameters.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa

from jobs_platform.component.declaration import (
    PARTITION_KEY,
    WINDOW_END,
    WINDOW_START,
    FilesSource,
    SqlSource,
)
from jobs_platform.component.rows import PartitionWindow
from jobs_platform.errors import DeploymentError, InputValidationError, TerminalError

_DIGEST_BLOCK_BYTES = 1 << 20


def source_variable(name: str) -> str:
    """The value of the variable a declaration names, read when a step needs it."""
    value = os.environ.get(name)
    if not value:
        raise DeploymentError(f"the variable {name} is not set: it names this backfill's source")
    return value


def partition_values(window: PartitionWindow) -> dict[str, Any]:
    """What a query's bind parameters and a file pattern's fields are for a partition."""
    values: dict[str, Any] = {PARTITION_KEY: window.key}
    if window.start is not None and window.end is not None:
        values[WINDOW_START] = window.start
        values[WINDOW_END] = window.end
    return values


def query_rows(
    source: SqlSource, window: PartitionWindow, chunk_rows: int
) -> Iterator[pd.DataFrame]:
    """The query's rows for the partition, `chunk_rows` at a time, read as they stream.

    On PostgreSQL the query runs in a read-only transaction: a declaration reads its source
    and cannot change it.
    """
    try:
        engine = sa.create_engine(source_variable(source.url_env), poolclass=sa.NullPool)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError):
        # The URL is a secret: the error names the variable, not its value.
        raise DeploymentError(
            f"the variable {source.url_env} holds no SQLAlchemy URL this environment can use"
        ) from None
    used = source.parameters()
    parameters = {name: value for name, value in partition_values(window).items() if name in used}
    try:
        with engine.connect() as connection:
            if connection.dialect.name == "postgresql":
                connection = connection.execution_options(postgresql_readonly=True)
            result = connection.execution_options(
                stream_results=True, max_row_buffer=chunk_rows
            ).execute(sa.text(source.query), parameters)
            columns = list(result.keys())
            for rows in result.partitions(chunk_rows):
                yield pd.DataFrame.from_records([tuple(row) for row in rows], columns=columns)
    finally:
        engine.dispose()


def partition_file(source: FilesSource, window: PartitionWindow) -> Path:
    """The partition's file: the pattern filled in, and never outside the landing folder."""
    root_name = source.root if source.root is not None else source_variable(str(source.root_env))
    root = Path(root_name).resolve()
    values = partition_values(window)
    path = (root / source.path.format(**{name: values[name] for name in source.fields()})).resolve()
    if not path.is_relative_to(root):
        raise TerminalError(f"partition {window.key!r}: its file {path} is outside {root}")
    return path


def file_digest(path: Path) -> str:
    """The sha256 of the file's bytes: a done partition whose file is unchanged is not read
    again, and a quarantined one whose file was fixed is redriven."""
    digest = hashlib.sha256()
    with _opened(path) as stream:
        while block := stream.read(_DIGEST_BLOCK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def file_rows(source: FilesSource, path: Path, chunk_rows: int) -> Iterator[pd.DataFrame]:
    """The file's rows, `chunk_rows` at a time: a CSV with a header (every value read as
    text), or JSON lines, each one object."""
    if source.file_format() == "csv":
        return _csv_rows(path, chunk_rows)
    return _json_lines(path, chunk_rows)


def _csv_rows(path: Path, chunk_rows: int) -> Iterator[pd.DataFrame]:
    with _opened(path) as stream:
        try:
            yield from pd.read_csv(stream, chunksize=chunk_rows, dtype=str, keep_default_na=False)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
            raise InputValidationError(f"{path}: not a readable CSV file ({error})") from None


def _json_lines(path: Path, chunk_rows: int) -> Iterator[pd.DataFrame]:
    rows: list[Mapping[str, Any]] = []
    with _opened(path) as stream:
        for line_number, line in enumerate(stream, start=1):
            if line.isspace():
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                raise InputValidationError("not valid JSON", line=line_number) from None
            if not isinstance(record, dict):
                raise InputValidationError("must be a JSON object", line=line_number)
            rows.append(record)
            if len(rows) == chunk_rows:
                yield pd.DataFrame.from_records(rows)
                rows = []
    if rows:
        yield pd.DataFrame.from_records(rows)


def _opened(path: Path) -> Any:
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise TerminalError(f"no input: {path} does not exist") from None
