"""The hourly bench's input: seeded by streaming, read back row for row, refused when bad."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from benchmarks.hourly_events import (
    EVENT_ID_HOUR_STRIDE,
    hour_file,
    hour_keys,
    read_hour,
    read_hour_rows,
    seed_events,
)
from benchmarks.hourly_partitions import backfill_policy
from jobs_platform import InputValidationError


def test_the_seed_writes_one_file_per_hour_that_reads_back_in_its_hour(tmp_path):
    landing = str(tmp_path)

    written = seed_events(landing, 26, 7)

    keys = hour_keys(26)
    assert keys[0] == "2025-01-01-00:00" and keys[25] == "2025-01-02-01:00"
    assert written == sum(Path(hour_file(landing, key)).stat().st_size for key in keys)
    frame = next(read_hour(hour_file(landing, keys[25]), chunk_rows=10_000))
    assert len(frame) == 7
    assert frame["event_id"].tolist() == [25 * EVENT_ID_HOUR_STRIDE + i + 1 for i in range(7)]
    start = dt.datetime(2025, 1, 2, 1, tzinfo=dt.UTC)
    assert frame["occurred_at"].between(start, start + dt.timedelta(minutes=59)).all()


def test_the_same_arguments_seed_the_same_bytes(tmp_path):
    seed_events(str(tmp_path / "a"), 3, 5)
    seed_events(str(tmp_path / "b"), 3, 5)

    for key in hour_keys(3):
        first = Path(hour_file(str(tmp_path / "a"), key)).read_bytes()
        assert first == Path(hour_file(str(tmp_path / "b"), key)).read_bytes()


@pytest.mark.parametrize(
    "line",
    [
        '{"event_id":1,"user_id":2,"kind":"view","value_cents":3}',  # no time
        '{"event_id":"1","user_id":2,"kind":"view","value_cents":3,"occurred_at":"2025-01-01T00:00Z"}',
        '{"event_id":1,"user_id":2,"kind":"shout","value_cents":3,"occurred_at":"2025-01-01T00:00Z"}',
        '{"event_id":1,"user_id":2,"kind":"view","value_cents":3,"occurred_at":"2025-01-01T00:00"}',
        "not json",
    ],
)
def test_a_bad_line_is_refused_naming_its_line(tmp_path, line):
    path = tmp_path / "hour.jsonl"
    good = (
        '{"event_id":9,"user_id":2,"kind":"view","value_cents":3,'
        '"occurred_at":"2025-01-01T00:00:00Z"}'
    )
    path.write_text(f"{good}\n{line}\n")

    with pytest.raises(InputValidationError, match="line 2"):
        read_hour_rows(str(path))


def test_a_policy_is_single_run_or_multi_run_of_n():
    assert backfill_policy("single_run").max_partitions_per_run is None
    assert backfill_policy("multi_run:24").max_partitions_per_run == 24
    with pytest.raises(ValueError, match="multi_run:N"):
        backfill_policy("multi_run:0")
