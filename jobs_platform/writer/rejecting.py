"""The bad rows strategy of `bad_rows=RejectRows(...)`: one attempt's account of its rejects.

The chunk loop hands it each chunk (`writer.bad_rows.BadRows`). A chunk the warehouse
rejected is written again without the rejected rows (`writer.rejecting_upsert`), and each chunk's
rejects commit in its transaction, with its rows and checkpoint.

Row numbers: a row's number is its 1-based position in the partition's input as the
reader yielded it, the rows the reader rejected (`PartitionInput.reject`) counting too. The
reader rejects a row before it yields the chunk that would have held it, so the rows of a
chunk take the numbers of its span that the reader did not reject, in order; every attempt
reads the same input the same way, so a resumed chunk has the same numbers again.

Limits: more than `max_rows` rows rejected stops the attempt at the chunk that passes it,
before that chunk commits (the chunks before it stay, as when any later chunk fails);
`max_fraction` is of the whole input, known once the last chunk is read, so it is judged
then, before the partition is marked done. Either way the partition is quarantined,
terminal, naming how many rows were rejected and the first few.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import sqlalchemy as sa

from jobs_platform.errors import TerminalError
from jobs_platform.store.handle import Store
from jobs_platform.writer import rejects as reject_store
from jobs_platform.writer.bad_rows import Fence
from jobs_platform.writer.rejected_value import RejectedValue
from jobs_platform.writer.rejecting_upsert import (
    WarehouseReject,
    caused_by_one_row,
    upsert_rejecting_rows,
)
from jobs_platform.writer.rejects import RejectedRow, shown_values
from jobs_platform.writer.sweep import SeenKeys
from jobs_platform.writer.upsert import UpsertCounts

__all__ = ["ROW_LABEL", "RejectingRows", "TooManyRejectedRows"]

# The name of a chunk's index under the policy: its rows' input row numbers.
ROW_LABEL = "row"
# Rejected rows a materialization's metadata shows (all of them: `dead-letter rows`).
SHOWN_REJECTS = 20
# Rows a quarantine message names (the rest are counted).
_NAMED_IN_MESSAGE = 3


class TooManyRejectedRows(TerminalError):
    """More rows were rejected than the backfill's `RejectRows` allows: quarantined whole."""


class RejectingRows:
    """Numbers a partition's rows, collects the rows rejected and holds them to the limits.

    `max_rows` and `max_fraction` are the backfill's `RejectRows`; `drain` hands over the
    rows the reader rejected since it was last called (`PartitionInput.reject`).
    """

    def __init__(
        self,
        *,
        max_rows: int | None,
        max_fraction: float | None,
        drain: Callable[[], list[RejectedRow]],
        store: Store,
        asset: str,
        partition: str,
        log: logging.Logger | logging.LoggerAdapter[logging.Logger],
        version: str = "",
    ) -> None:
        self.max_rows, self.max_fraction, self.drain = max_rows, max_fraction, drain
        self.store, self.asset, self.partition, self.log = store, asset, partition, log
        self.version = version  # the backfill's code_version: kept with each reject
        self.next_row = 1  # the number the next input row gets
        self.total = 0  # rows rejected by the chunks committed or resumed so far
        self.pending: list[RejectedRow] = []  # the current chunk's, not yet committed
        self._named: list[RejectedRow] = []  # the first few committed, for a message

    def numbered(self, chunk: pd.DataFrame) -> pd.DataFrame:
        """`chunk` labelled by input row numbers; the reader's rejections before it are pending."""
        self.pending = self.drain()
        rejected = np.array([reject.row for reject in self.pending], dtype=np.int64)
        span = np.arange(self.next_row, self.next_row + len(chunk) + len(rejected), dtype=np.int64)
        numbers = np.setdiff1d(span, rejected, assume_unique=False)[: len(chunk)]
        self.next_row = max(int(span[-1]) + 1 if len(span) else self.next_row, _after(rejected))
        self._hold_to_max_rows()
        return chunk.set_axis(pd.Index(numbers, name=ROW_LABEL), axis=0)

    def resumed(
        self, connection: sa.Connection, chunk_index: int, chunk: pd.DataFrame
    ) -> pd.DataFrame:
        """A chunk committed by an earlier attempt: its stored rejects count, none anew.

        Returns the chunk without the rows it rejected: they were never written, so their
        keys are not seen (a stale stored version is swept; an invalid key never sent).
        """
        self.pending = reject_store.chunk_rejects(
            connection, self.asset, self.partition, chunk_index
        )
        self._hold_to_max_rows()
        rejected = chunk.index.intersection([reject.row for reject in self.pending])
        self._committed()
        return chunk.drop(index=rejected)

    def rejects(self, rejected: RejectedValue) -> bool:
        """Whether one row caused `rejected`: then the chunk is written again without it."""
        return caused_by_one_row(rejected)

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
        """Write the chunk without the rows the warehouse rejects; past `max_rows`, raise."""
        result = upsert_rejecting_rows(
            connection, table, key, chunk, most=self._room(), rejected_whole=rejected
        )
        self._rejected_by_warehouse(chunk, result.rejected)  # past max_rows: raises
        labels = [row.label for row in result.rejected]
        # Rejected rows were not written: their keys are not seen (a stale stored
        # version of one is swept at finalize: the partition converges to its input).
        seen_keys.add(chunk.drop(index=labels))
        self.log.info(
            "%s/%s chunk %d: %d rows rejected, found in %d statements",
            self.asset,
            self.partition,
            chunk_index,
            len(labels),
            result.statements,
        )
        return result.counts

    def record(self, connection: sa.Connection, chunk_index: int, *, written_before: bool) -> None:
        """Write the chunk's rejects in its transaction, replacing an earlier attempt's.

        They count from here on: if the transaction fails, so does the attempt.
        """
        if self.pending or written_before:
            now = self.store.now(connection)
            self._write(connection, chunk_index, written_before=written_before, at=now)
        self._committed()

    def finish(self, connection: sa.Connection, chunks: int, fence: Fence) -> None:
        """Rows the reader rejected after its last chunk, kept as a chunk of their own
        (fenced); then, the whole input read, more than `max_fraction` of it gives up."""
        if self._trailing():
            with connection.begin():
                now = self.store.now(connection)
                self._write(connection, chunks, written_before=False, at=now)
                fence(connection)
            self._committed()
        self._hold_to_max_fraction()

    def summary(self) -> tuple[int, Sequence[RejectedRow]]:
        """The partition's rejects as stored: how many, and the first `SHOWN_REJECTS`."""
        with self.store.connect() as connection:
            count = reject_store.rejected_count(connection, self.asset, self.partition)
            shown = reject_store.partition_rejects(
                connection, self.asset, self.partition, limit=SHOWN_REJECTS
            )
        return count, shown

    def _trailing(self) -> list[RejectedRow]:
        """Rows the reader rejected after its last chunk: pending, to be written on their own."""
        self.pending = self.drain()
        self.next_row = max(self.next_row, _after(np.array([r.row for r in self.pending])))
        self._hold_to_max_rows()
        return self.pending

    def _room(self) -> int | None:
        """How many more rows this chunk may rejected before the partition is given up."""
        if self.max_rows is None:
            return None
        return self.max_rows - self.total - len(self.pending)

    def _rejected_by_warehouse(
        self, chunk: pd.DataFrame, rejected: Sequence[WarehouseReject]
    ) -> None:
        """Add the rows the warehouse rejected (labelled by row number) to the chunk's."""
        for row in rejected:
            number = int(row.label)  # type: ignore[call-overload]  # a row number, typed object
            values: dict[str, object] = chunk.loc[number].to_dict()
            self.pending.append(
                RejectedRow(
                    row=number,
                    reason=row.reason,
                    column=row.column,
                    sqlstate=row.sqlstate,
                    values=shown_values(values),
                )
            )
        self.pending.sort(key=lambda reject: reject.row)
        self._hold_to_max_rows()

    def _write(
        self, connection: sa.Connection, chunk_index: int, *, written_before: bool, at: dt.datetime
    ) -> None:
        """Write the chunk's rejects in its transaction, replacing an earlier attempt's."""
        if written_before:
            clearing = reject_store.Clearing(self.version, at)
            reject_store.forget_chunk(connection, self.asset, self.partition, chunk_index, clearing)
        reject_store.record_rejects(
            connection,
            asset=self.asset,
            partition=self.partition,
            chunk_index=chunk_index,
            rejects=self.pending,
            at=at,
            version=self.version,
        )

    def _committed(self) -> None:
        """The chunk's rejects count from now on."""
        self.total += len(self.pending)
        self._named += self.pending[: _NAMED_IN_MESSAGE - len(self._named)]
        self.pending = []

    def _hold_to_max_fraction(self) -> None:
        """Once the whole input is read: more than `max_fraction` of it rejected gives up."""
        fraction, input_rows = self.max_fraction, self.next_row - 1
        if fraction is not None and self.total > fraction * input_rows:
            limit = f"max_fraction={fraction} of {input_rows} input rows"
            raise self._too_many(limit)

    def _hold_to_max_rows(self) -> None:
        room = self._room()
        if room is not None and room < 0:
            raise self._too_many(f"max_rows={self.max_rows}")

    def _too_many(self, limit: str) -> TooManyRejectedRows:
        count = self.total + len(self.pending)
        named = (self._named + self.pending)[:_NAMED_IN_MESSAGE]
        shown = "; ".join(reject.summary() for reject in named)
        more = f"; and {count - len(named)} more" if count > len(named) else ""
        return TooManyRejectedRows(
            f"{count} rows rejected, more than {limit} allows (bad_rows=RejectRows): {shown}{more}"
        )


def _after(row_numbers: np.ndarray) -> int:
    return int(row_numbers.max()) + 1 if len(row_numbers) else 0
