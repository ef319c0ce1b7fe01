"""What a backfill is, independent of the orchestrator that runs it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import pandas as pd
import sqlalchemy as sa

from jobs_platform.settings import Settings

DEFAULT_CHUNK_ROWS = 10_000


@dataclass(frozen=True)
class PartitionInput:
    """What a backfill's reader gets: which partition, how big a chunk, where things are."""

    asset: str
    partition_key: str
    chunk_rows: int
    settings: Settings
    warehouse: sa.Engine
    log: logging.Logger | logging.LoggerAdapter[logging.Logger] = field(
        default_factory=lambda: logging.getLogger("jobs_platform")
    )


ChunkReader = Callable[[PartitionInput], Iterable[pd.DataFrame]]
Fingerprinter = Callable[[PartitionInput], str]
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
    """

    asset: str
    table: sa.Table
    key: tuple[str, ...]
    read_chunks: ChunkReader
    partition_scope: PartitionScope
    fingerprint: Fingerprinter | None = None
    upstream: tuple[str, ...] = ()
    version: str = ""

    def __post_init__(self) -> None:
        missing = [name for name in self.key if name not in self.table.columns]
        if not self.key or missing:
            raise ValueError(
                f"backfill {self.asset!r}: key {list(self.key)} must name columns of "
                f"table {self.table.name!r} (missing: {missing})"
            )
