"""What the chunk loop does with a bad row: a strategy it is handed, `BadRows`.

The loop (`engine.runner`, `engine.chunk_commit`) writes every chunk the same way and
asks its strategy at a few points only. By default it is handed `FAIL_ON_BAD_ROW`, which
does nothing: a row the warehouse rejects fails its chunk, and the partition is
quarantined whole (terminal). Under `bad_rows=RejectRows(...)` it is handed a
`writer.rejecting.RejectingRows`, which writes the chunk again without the rows the
warehouse rejects and keeps them, with the rows the reader rejected, within the limits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import pandas as pd
import sqlalchemy as sa

from jobs_platform.writer.rejected_value import RejectedValue
from jobs_platform.writer.rejects import RejectedRow
from jobs_platform.writer.sweep import SeenKeys
from jobs_platform.writer.upsert import UpsertCounts

__all__ = ["FAIL_ON_BAD_ROW", "BadRows", "FailOnBadRow", "Fence"]

# Checks, in the caller's transaction, that the attempt still holds its lease.
Fence = Callable[[sa.Connection], None]


class BadRows(Protocol):
    """The hooks the chunk loop calls, in the order it calls them."""

    def numbered(self, chunk: pd.DataFrame) -> pd.DataFrame:
        """The chunk as it is written: its rows labelled as this strategy needs them."""
        ...

    def resumed(
        self, connection: sa.Connection, chunk_index: int, chunk: pd.DataFrame
    ) -> pd.DataFrame:
        """A chunk an earlier attempt committed: the rows of it that were written."""
        ...

    def rejects(self, rejected: RejectedValue) -> bool:
        """Whether the chunk the warehouse rejected is written again without the bad row."""
        ...

    def upsert_rejecting(
        self,
        connection: sa.Connection,
        table: sa.Table,
        key: Sequence[str],
        chunk: pd.DataFrame,
        *,
        chunk_index: int,
        rejected: RejectedValue,
        seen_keys: SeenKeys,
    ) -> UpsertCounts:
        """Write a chunk `rejects` took, in the caller's transaction, without its bad rows."""
        ...

    def record(self, connection: sa.Connection, chunk_index: int, *, written_before: bool) -> None:
        """In the chunk's transaction: keep the rows it rejected, replacing an earlier try's."""
        ...

    def finish(self, connection: sa.Connection, chunks: int, fence: Fence) -> None:
        """After the last chunk, before finalize: the rows rejected after it, the limits."""
        ...

    def summary(self) -> tuple[int, Sequence[RejectedRow]]:
        """For the partition's report: how many rows it rejected, and the first of them."""
        ...


class FailOnBadRow:
    """The default: no row is rejected, so a bad row fails its chunk (and the partition)."""

    def numbered(self, chunk: pd.DataFrame) -> pd.DataFrame:
        return chunk

    def resumed(
        self, connection: sa.Connection, chunk_index: int, chunk: pd.DataFrame
    ) -> pd.DataFrame:
        return chunk

    def rejects(self, rejected: RejectedValue) -> bool:
        return False

    def upsert_rejecting(
        self,
        connection: sa.Connection,
        table: sa.Table,
        key: Sequence[str],
        chunk: pd.DataFrame,
        *,
        chunk_index: int,
        rejected: RejectedValue,
        seen_keys: SeenKeys,
    ) -> UpsertCounts:
        raise rejected  # never called: `rejects` takes no chunk

    def record(self, connection: sa.Connection, chunk_index: int, *, written_before: bool) -> None:
        return None

    def finish(self, connection: sa.Connection, chunks: int, fence: Fence) -> None:
        return None

    def summary(self) -> tuple[int, Sequence[RejectedRow]]:
        return 0, ()


FAIL_ON_BAD_ROW = FailOnBadRow()
