"""Reading one chunk ahead (`engine.read_ahead`): order, rejects, errors and the thread's end."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pandas as pd
import pytest

from jobs_platform.engine.read_ahead import read_ahead
from jobs_platform.engine.spec import RejectCollector
from jobs_platform.writer.rejects import RejectedRow


def frame(*values: int) -> pd.DataFrame:
    return pd.DataFrame({"id": list(values)})


def rejected(row: int) -> RejectedRow:
    return RejectedRow(row=row, reason="bad", values={})


class Reader:
    """A reader of `count` one-row chunks that rejects row 0 before each, counting reads."""

    def __init__(self, count: int, rejects: RejectCollector, fail_at: int | None = None):
        self.count, self.rejects, self.fail_at = count, rejects, fail_at
        self.read = 0
        self.closed = threading.Event()

    def chunks(self) -> Iterator[pd.DataFrame]:
        try:
            for index in range(self.count):
                self.rejects.add(rejected(index * 10))
                if index == self.fail_at:
                    raise ValueError(f"line {index}: broken")
                self.read += 1
                yield frame(index)
            self.rejects.add(rejected(999))  # after the last chunk
        finally:
            self.closed.set()


def test_chunks_come_in_order_each_with_the_rows_rejected_before_it():
    reader_rejects, rejects = RejectCollector(), RejectCollector()
    reader = Reader(3, reader_rejects)
    seen = []

    for chunk in read_ahead(reader.chunks(), reader_rejects, rejects):
        seen.append((chunk["id"].tolist(), [row.row for row in rejects.drain()]))

    assert seen == [([0], [0]), ([1], [10]), ([2], [20])]
    assert [row.row for row in rejects.drain()] == [999]


def test_the_reader_is_never_more_than_one_chunk_ahead():
    reader_rejects = RejectCollector()
    reader = Reader(5, reader_rejects)
    chunks = read_ahead(reader.chunks(), reader_rejects, RejectCollector())

    for taken in range(1, 6):
        next(chunks)
        # Let the thread run as far as it may.
        threading.Event().wait(0.05)
        assert reader.read <= taken + 1
    chunks.close()


def test_a_reader_error_is_raised_where_its_chunk_would_come():
    reader_rejects = RejectCollector()
    reader = Reader(5, reader_rejects, fail_at=2)
    taken = []

    with pytest.raises(ValueError, match="line 2: broken"):
        for chunk in read_ahead(reader.chunks(), reader_rejects, RejectCollector()):
            taken.append(chunk["id"].tolist())

    assert taken == [[0], [1]]


def test_closing_early_ends_the_thread_and_closes_the_reader():
    reader_rejects = RejectCollector()
    reader = Reader(100, reader_rejects)
    before = threading.active_count()
    chunks = read_ahead(reader.chunks(), reader_rejects, RejectCollector())

    next(chunks)
    chunks.close()

    assert reader.closed.is_set()
    assert reader.read <= 2
    assert threading.active_count() == before
