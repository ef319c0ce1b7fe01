"""One attempt's account of the rows it sets aside under `bad_rows=RejectRows(...)`.

Row numbers: a row's number is its 1-based position in the partition's input as the
reader yielded it, the rows the reader refused (`PartitionInput.reject`) counting too. The
reader refuses a row before it yields the chunk that would have held it, so the rows of a
chunk take the numbers of its span that the reader did not refuse, in order; every attempt
reads the same input the same way, so a resumed chunk has the same numbers again.

Limits: more than `max_rows` rows refused stops the attempt at the chunk that passes it,
before that chunk commits (the chunks before it stay, as when any later chunk fails);
`max_fraction` is of the whole input, known once the last chunk is read, so it is judged
then, before the partition is marked done. Either way the partition is quarantined,
terminal, naming how many rows were refused and the first few.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import numpy as np
import pandas as pd
import sqlalchemy as sa

from jobs_platform.engine.spec import RejectCollector, RejectRows
from jobs_platform.errors import TerminalError
from jobs_platform.writer import rejects as reject_store
from jobs_platform.writer.rejects import RejectedRow, shown_values
from jobs_platform.writer.set_aside import RefusedRow

__all__ = ["ROW_LABEL", "RowsSetAside", "TooManyRejectedRows"]

# The name of a chunk's index under the policy: its rows' input row numbers.
ROW_LABEL = "row"
# Rows a quarantine message names (the rest are counted).
_NAMED_IN_MESSAGE = 3


class TooManyRejectedRows(TerminalError):
    """More rows were refused than the backfill's `RejectRows` allows: quarantined whole."""


class RowsSetAside:
    """Numbers a partition's rows, collects the rows set aside and holds them to the limits."""

    def __init__(
        self, policy: RejectRows, collector: RejectCollector, asset: str, partition: str
    ) -> None:
        self.policy, self.collector = policy, collector
        self.asset, self.partition = asset, partition
        self.next_row = 1  # the number the next input row gets
        self.total = 0  # rows set aside by the chunks committed or resumed so far
        self.pending: list[RejectedRow] = []  # the current chunk's, not yet committed
        self._named: list[RejectedRow] = []  # the first few committed, for a message

    def numbered(self, chunk: pd.DataFrame) -> pd.DataFrame:
        """`chunk` labelled by input row numbers; the reader's refusals before it are pending."""
        self.pending = self.collector.drain()
        refused = np.array([reject.row for reject in self.pending], dtype=np.int64)
        span = np.arange(self.next_row, self.next_row + len(chunk) + len(refused), dtype=np.int64)
        numbers = np.setdiff1d(span, refused, assume_unique=False)[: len(chunk)]
        self.next_row = max(int(span[-1]) + 1 if len(span) else self.next_row, _after(refused))
        self._hold_to_max_rows()
        return chunk.set_axis(pd.Index(numbers, name=ROW_LABEL), axis=0)

    def trailing(self) -> list[RejectedRow]:
        """Rows the reader refused after its last chunk: pending, to be written on their own."""
        self.pending = self.collector.drain()
        self.next_row = max(self.next_row, _after(np.array([r.row for r in self.pending])))
        self._hold_to_max_rows()
        return self.pending

    def room(self) -> int | None:
        """How many more rows this chunk may set aside before the partition is given up."""
        if self.policy.max_rows is None:
            return None
        return self.policy.max_rows - self.total - len(self.pending)

    def refused_by_warehouse(self, chunk: pd.DataFrame, refused: Sequence[RefusedRow]) -> None:
        """Add the rows the warehouse refused (labelled by row number) to the chunk's."""
        for row in refused:
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

    def write(
        self, connection: sa.Connection, chunk_index: int, *, written_before: bool, at: dt.datetime
    ) -> None:
        """Write the chunk's rejects in its transaction, replacing an earlier attempt's."""
        if written_before:
            reject_store.forget_chunk(connection, self.asset, self.partition, chunk_index)
        reject_store.record_rejects(
            connection,
            asset=self.asset,
            partition=self.partition,
            chunk_index=chunk_index,
            rejects=self.pending,
            at=at,
        )

    def committed(self) -> None:
        """The chunk committed: its rejects count from now on."""
        self.total += len(self.pending)
        self._named += self.pending[: _NAMED_IN_MESSAGE - len(self._named)]
        self.pending = []

    def resumed(
        self, connection: sa.Connection, chunk_index: int, chunk: pd.DataFrame
    ) -> pd.DataFrame:
        """A chunk committed by an earlier attempt: its stored rejects count, none anew.

        Returns the chunk without the rows it set aside: they were never written, so their
        keys are not seen (a stale stored version is swept; an invalid key never sent).
        """
        self.pending = reject_store.chunk_rejects(
            connection, self.asset, self.partition, chunk_index
        )
        self._hold_to_max_rows()
        set_aside = chunk.index.intersection([reject.row for reject in self.pending])
        self.committed()
        return chunk.drop(index=set_aside)

    def hold_to_max_fraction(self) -> None:
        """Once the whole input is read: more than `max_fraction` of it refused gives up."""
        fraction, input_rows = self.policy.max_fraction, self.next_row - 1
        if fraction is not None and self.total > fraction * input_rows:
            limit = f"max_fraction={fraction} of {input_rows} input rows"
            raise self._too_many(limit)

    def _hold_to_max_rows(self) -> None:
        room = self.room()
        if room is not None and room < 0:
            raise self._too_many(f"max_rows={self.policy.max_rows}")

    def _too_many(self, limit: str) -> TooManyRejectedRows:
        refused = self.total + len(self.pending)
        named = (self._named + self.pending)[:_NAMED_IN_MESSAGE]
        shown = "; ".join(reject.summary() for reject in named)
        more = f"; and {refused - len(named)} more" if refused > len(named) else ""
        return TooManyRejectedRows(
            f"{refused} rows refused, more than {limit} allows (bad_rows=RejectRows): {shown}{more}"
        )


def _after(row_numbers: np.ndarray) -> int:
    return int(row_numbers.max()) + 1 if len(row_numbers) else 0
