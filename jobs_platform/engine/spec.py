"""What a backfill is, independent of the orchestrator that runs it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Concatenate

import pandas as pd
import sqlalchemy as sa

DEFAULT_CHUNK_ROWS = 10_000


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


# A reader and a fingerprint take the PartitionInput first; the orchestrator binds any
# further parameters (resources, config) before the engine calls them with it alone.
ChunkReader = Callable[Concatenate[PartitionInput, ...], Iterable[pd.DataFrame]]
Fingerprinter = Callable[Concatenate[PartitionInput, ...], str]
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

    def stored_fingerprint(self, fingerprint: str) -> str:
        """The input fingerprint as attempts and entries keep it: with the code version, so
        that a new version is new input to the checkpoints."""
        return f"{fingerprint}@{self.version}" if self.version else fingerprint

    def __post_init__(self) -> None:
        missing = [name for name in self.key if name not in self.table.columns]
        if not self.key or missing:
            raise ValueError(
                f"backfill {self.asset!r}: key {list(self.key)} must name columns of "
                f"table {self.table.name!r} (missing: {missing})"
            )
