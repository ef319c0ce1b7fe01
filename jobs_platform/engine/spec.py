"""What a backfill is, independent of the orchestrator that runs it."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Concatenate

import pandas as pd
import sqlalchemy as sa

from jobs_platform.errors import InputValidationError
from jobs_platform.gate.audits import Audit
from jobs_platform.gate.contract import ChangeContract
from jobs_platform.writer.rejects import RejectedRow, shown_values

DEFAULT_CHUNK_ROWS = 10_000
# A reader's reason for rejecting a row is kept to this many characters.
REASON_CHARS = 500


@dataclass(frozen=True)
class RejectRows:
    """Reject bad rows and commit the rest of the partition (docs/bad-rows.md), within limits.

    A row the warehouse rejects (a data exception, or a not-null, check or foreign-key
    violation, caused by that row) or the reader rejects (`PartitionInput.reject`) is kept
    in the warehouse instead of being written. More than `max_rows` of them, or more than
    `max_fraction` of the partition's input rows, and the partition is quarantined as it
    would be without the policy. A limit left as None does not apply; one must be given.
    """

    max_rows: int | None = None
    max_fraction: float | None = None

    def __post_init__(self) -> None:
        if self.max_rows is None and self.max_fraction is None:
            raise ValueError("RejectRows needs a limit: max_rows=N, max_fraction=F or both")
        if self.max_rows is not None and (
            isinstance(self.max_rows, bool)
            or not isinstance(self.max_rows, int)
            or self.max_rows < 0
        ):
            raise ValueError(f"max_rows must be a whole number >= 0, got {self.max_rows!r}")
        if self.max_fraction is not None and not 0 <= self.max_fraction <= 1:
            raise ValueError(f"max_fraction must be between 0 and 1, got {self.max_fraction!r}")


class RejectCollector:
    """The rows a reader rejected, kept for the engine until it writes their chunk."""

    def __init__(self) -> None:
        self._pending: list[RejectedRow] = []

    def add(self, reject: RejectedRow) -> None:
        self._pending.append(reject)

    def drain(self) -> list[RejectedRow]:
        """The rows rejected since the last drain (the reader yields a chunk after them)."""
        drained, self._pending = self._pending, []
        return drained


@dataclass(frozen=True)
class PartitionInput:
    """What a backfill's reader (and its fingerprint) gets: which partition of which asset,
    how many rows a chunk should hold, the warehouse engine and a log.

    Nothing of the framework's settings: where a reader's input lives and its credentials
    come from the reader's own resources and `config`, as in any `@dg.asset`.
    """

    asset: str
    partition_key: str
    chunk_rows: int
    warehouse: sa.Engine
    log: logging.Logger | logging.LoggerAdapter[logging.Logger] = field(
        default_factory=lambda: logging.getLogger("jobs_platform")
    )
    bad_rows: RejectRows | None = None
    rejects: RejectCollector = field(default_factory=RejectCollector, repr=False, compare=False)

    @property
    def rejects_rows(self) -> bool:
        """Whether this backfill rejects bad rows (`bad_rows=RejectRows(...)`)."""
        return self.bad_rows is not None

    def reject(
        self, row_number: int, reason: str, values: Mapping[str, object] | None = None
    ) -> None:
        """The reader rejects row `row_number` (1-based position in this partition's input,
        counting the rows it yielded and the rows it rejected) and yields it in no chunk.

        Under `bad_rows=RejectRows(...)` the row is rejected (its values kept truncated);
        without the policy the partition stops here, terminal, as for any invalid input.
        """
        if self.bad_rows is None:
            raise InputValidationError(f"row {row_number}: {reason}")
        shown = reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 3] + "..."
        self.rejects.add(RejectedRow(row=row_number, reason=shown, values=shown_values(values)))


# A reader and a fingerprint take the PartitionInput first; the orchestrator binds any
# further parameters (resources, config) before the engine calls them with it alone.
ChunkReader = Callable[Concatenate[PartitionInput, ...], Iterable[pd.DataFrame]]
Fingerprinter = Callable[Concatenate[PartitionInput, ...], str]
ReadyCheck = Callable[Concatenate[PartitionInput, ...], bool]
"""Whether a partition's input is ready (`backfill_asset(..., ready=fn)`)."""
PartitionScope = Callable[[sa.Table, str], sa.ColumnElement[bool]]
UpstreamReads = Callable[[str], Sequence[tuple[str, str]]]
"""The (backfill, partition) pairs a partition of a backfill reads, by its partition key."""


def reads_nothing(partition: str) -> Sequence[tuple[str, str]]:
    """The upstream reads of a backfill that reads no other backfill."""
    return ()


@dataclass(frozen=True)
class BackfillSpec:
    """A backfill: read a partition's input in chunks and upsert it into `table` by `key`.

    `partition_scope(table, partition)` selects the rows that belong to a partition, so
    that rows no longer in the input can be swept. `fingerprint(input)` cheaply
    identifies the input (e.g. a file hash): a done partition whose fingerprint is unchanged
    finishes without reading its input again; bump `version` after changing the reader so
    that it is recomputed. Without a fingerprint, chunks are matched on their content.
    `asset` is its asset key's user string (`acme/events` for `key_prefix=["acme"]`), the
    name it has in every framework row; `upstream` names the assets it reads (its `deps`).
    `redrive` lets the dead letter's redrive requeue its entries once their cause is gone.
    `ready(input)` says whether a partition's input is there yet: one that is not is held,
    not attempted (`steering.readiness`), and reported once held longer than `max_wait`.
    """

    asset: str
    table: sa.Table
    key: tuple[str, ...]
    read_chunks: ChunkReader
    partition_scope: PartitionScope
    fingerprint: Fingerprinter | None = None
    upstream: tuple[str, ...] = ()
    version: str = ""
    redrive: bool = True
    ready: ReadyCheck | None = None
    max_wait: dt.timedelta | None = None

    def stored_fingerprint(self, fingerprint: str) -> str:
        """The input fingerprint as attempts and entries keep it: with the code version, so
        that a new version is new input to the checkpoints."""
        return f"{fingerprint}@{self.version}" if self.version else fingerprint

    bad_rows: RejectRows | None = None  # None: one bad row quarantines the partition
    # The change gate (docs/bad-rows.md): None and no audits write straight to the table.
    expect: ChangeContract | None = None
    audits: tuple[Audit, ...] = ()

    @property
    def gated(self) -> bool:
        """Whether a partition is staged and judged before it is published."""
        return self.expect is not None or bool(self.audits)

    def __post_init__(self) -> None:
        missing = [name for name in self.key if name not in self.table.columns]
        if not self.key or missing:
            raise ValueError(
                f"backfill {self.asset!r}: key {list(self.key)} must name columns of "
                f"table {self.table.name!r} (missing: {missing})"
            )
        names = [audit.name for audit in self.audits]
        if len(set(names)) != len(names):
            raise ValueError(
                f"backfill {self.asset!r}: two audits share a name ({sorted(names)}); "
                "give a `sql` audit a name of its own"
            )
