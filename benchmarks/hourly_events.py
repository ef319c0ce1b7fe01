"""The hourly shape of `bench backfill`: small event rows, one landing file per hour.

No Dagster here: the table, the hours, the streaming seed and the reader, shared by the
bench's code location (`hourly_location`, what the daemon runs) and the plain scripts
(`hourly`), so both read the same files the same way.

A landing file is `<landing>/events/<YYYY-MM-DD>/<HH>.jsonl`, one JSON object a line:
`{"event_id":…,"user_id":…,"kind":"…","value_cents":…,"occurred_at":"…Z"}`. Event ids are
(hours since HOURLY_START) * EVENT_ID_HOUR_STRIDE + index + 1: unique across hours.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import random
from collections.abc import Iterator

import numpy as np
import pandas as pd
import sqlalchemy as sa

from jobs_platform.errors import InputValidationError, TerminalError
from jobs_platform.store.schema import UtcDateTime

HOURLY_START = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
# Dagster's HourlyPartitionsDefinition key format.
HOUR_KEY_FORMAT = "%Y-%m-%d-%H:%M"
EVENT_ID_HOUR_STRIDE = 1_000_000
EVENT_COLUMNS = ("event_id", "user_id", "kind", "value_cents", "occurred_at")
KINDS = ("view", "click", "add_to_cart", "purchase")
_USERS = 50_000
_UNIX_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)

events_metadata = sa.MetaData()

events_table = sa.Table(
    "hourly_events",
    events_metadata,
    sa.Column("event_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("user_id", sa.BigInteger, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("value_cents", sa.BigInteger, nullable=False),
    # The partition's scope (its hour) is a range of this column: the sweep needs the index.
    sa.Column("occurred_at", UtcDateTime, nullable=False, index=True),
)


def hour_keys(partitions: int) -> list[str]:
    """The first `partitions` hourly partition keys from HOURLY_START."""
    return [
        (HOURLY_START + dt.timedelta(hours=offset)).strftime(HOUR_KEY_FORMAT)
        for offset in range(partitions)
    ]


def hour_bounds(key: str) -> tuple[dt.datetime, dt.datetime]:
    start = dt.datetime.strptime(key, HOUR_KEY_FORMAT).replace(tzinfo=dt.UTC)
    return start, start + dt.timedelta(hours=1)


def events_of_hour(table: sa.Table, key: str) -> sa.ColumnElement[bool]:
    """The partition scope: the rows whose event time falls in the hour."""
    start, end = hour_bounds(key)
    return sa.and_(table.c.occurred_at >= start, table.c.occurred_at < end)


def hour_file(landing_root: str, key: str) -> str:
    start, _ = hour_bounds(key)  # a malformed key fails here, before it becomes a path
    return os.path.join(landing_root, "events", start.strftime("%Y-%m-%d"), f"{start:%H}.jsonl")


def seed_events(landing_root: str, partitions: int, rows_per_partition: int, seed: int = 0) -> int:
    """Write every hour's file in one pass, each with one buffered write; the bytes written.

    Deterministic: the same arguments write byte-identical files. No temporary file and
    rename per hour (the bench seeds a fresh folder nobody reads yet), and one folder made
    per day: at 8,760 hours the seed is bound by the disk, not by Python.
    """
    if partitions < 1 or rows_per_partition < 0:
        raise ValueError("partitions must be >= 1 and rows_per_partition >= 0")
    if rows_per_partition >= EVENT_ID_HOUR_STRIDE:
        raise ValueError(f"rows_per_partition must be < {EVENT_ID_HOUR_STRIDE}")
    rng = random.Random(seed)
    written = 0
    day_folder = ""
    step_seconds = 3600 / max(rows_per_partition, 1)
    for offset in range(partitions):
        start = HOURLY_START + dt.timedelta(hours=offset)
        folder = os.path.join(landing_root, "events", start.strftime("%Y-%m-%d"))
        if folder != day_folder:
            os.makedirs(folder, exist_ok=True)
            day_folder = folder
        stamp = start.strftime("%Y-%m-%dT%H:")
        first_id = offset * EVENT_ID_HOUR_STRIDE + 1
        lines = []
        for index in range(rows_per_partition):
            minute, second = divmod(int(index * step_seconds), 60)
            lines.append(
                f'{{"event_id":{first_id + index},"user_id":{rng.randint(1, _USERS)},'
                f'"kind":"{rng.choice(KINDS)}","value_cents":{rng.randint(0, 10_000)},'
                f'"occurred_at":"{stamp}{minute:02d}:{second:02d}Z"}}\n'
            )
        text = "".join(lines).encode()
        with open(os.path.join(folder, f"{start:%H}.jsonl"), "wb") as stream:
            stream.write(text)
        written += len(text)
    return written


_decode = json.JSONDecoder().decode


def read_hour_rows(path: str) -> list[tuple[int, int, str, int, int]]:
    """An hour's file as row tuples in EVENT_COLUMNS order (`occurred_at` in UTC
    microseconds; a time without an offset is refused), each line checked."""
    try:
        with open(path, "rb") as stream:
            raw = stream.read()
    except FileNotFoundError:
        raise TerminalError(f"no input: {path} does not exist") from None
    rows = []
    for line_number, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line or line.isspace():
            continue
        try:
            record = _decode(line)
            row = (
                record["event_id"],
                record["user_id"],
                record["kind"],
                record["value_cents"],
                (dt.datetime.fromisoformat(record["occurred_at"]) - _UNIX_EPOCH) // _MICROSECOND,
            )
        except (ValueError, KeyError, TypeError) as exc:  # TypeError: a naive time too
            raise InputValidationError(f"not a valid event ({exc})", line=line_number) from None
        if type(row[0]) is not int or type(row[1]) is not int or type(row[3]) is not int:
            raise InputValidationError("event_id, user_id and value_cents must be integers",
                                       line=line_number)  # fmt: skip
        if row[2] not in KINDS:
            raise InputValidationError(f"unknown kind {row[2]!r}", line=line_number)
        rows.append(row)
    return rows


def read_hour(path: str, chunk_rows: int) -> Iterator[pd.DataFrame]:
    """An hour's events as DataFrames of `chunk_rows` rows (one, for small hours)."""
    rows = read_hour_rows(path)
    for start in range(0, len(rows), chunk_rows):
        yield events_frame(rows[start : start + chunk_rows])


def events_frame(rows: list[tuple[int, int, str, int, int]]) -> pd.DataFrame:
    event_ids, user_ids, kinds, values, moments = zip(*rows, strict=True)
    return pd.DataFrame(
        {
            "event_id": np.array(event_ids, dtype=np.int64),
            "user_id": np.array(user_ids, dtype=np.int64),
            "kind": np.array(kinds, dtype=object),
            "value_cents": np.array(values, dtype=np.int64),
            "occurred_at": pd.to_datetime(
                np.array(moments, dtype=np.int64), unit="us", utc=True
            ).as_unit("ns"),
        },
        columns=list(EVENT_COLUMNS),
    )


def file_fingerprint(path: str) -> str:
    """The sha256 of the file's bytes (the unchanged re-run finishes a partition on it)."""
    try:
        with open(path, "rb") as stream:
            return hashlib.sha256(stream.read()).hexdigest()
    except FileNotFoundError:
        raise TerminalError(f"no input: {path} does not exist") from None
