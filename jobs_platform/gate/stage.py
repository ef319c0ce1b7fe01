"""A partition's stage: a real table holding the rows an attempt read, before they count.

Under `expect=` or `audits=` the chunks are written here, not to the backfill's table,
each with its checkpoint in the same transaction. The stage is a real table, not a
TEMPORARY one, so that it outlives a worker killed mid-stage: the next attempt resumes
after the chunks committed here. Its name is derived from a hash of the backfill and the
partition (`jp_stage_gate_<hash>`), never from their text, and SQLAlchemy quotes it.

Each staged row carries the chunk it was read in (`CHUNK_COLUMN`). A key read again by a
later chunk is kept twice; the later row wins (`PartitionStage.latest`), as it does in
the direct path. When an attempt writes chunk N, the rows of chunks N and later left by
an earlier attempt are deleted first: they came from an input that differs from N on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlalchemy as sa

__all__ = ["CHUNK_COLUMN", "GATE_STAGE_PREFIX", "PartitionStage", "partition_stage"]

from jobs_platform.store.schema import STAGE_PREFIX
from jobs_platform.writer.upsert import insert_frame

if TYPE_CHECKING:  # the CLI reads refusals without importing pandas
    import pandas as pd

# A stage's prefix marks it as no part of the warehouse's schema; "gate_" tells this real
# table from the TEMPORARY stages of the writer.
GATE_STAGE_PREFIX = f"{STAGE_PREFIX}gate_"
# The chunk a staged row was read in; not a column of any backfill's table.
CHUNK_COLUMN = "_jp_chunk"


@dataclass(frozen=True)
class PartitionStage:
    """The stage of one partition of one backfill; `table` is the stage itself."""

    table: sa.Table
    target: sa.Table
    key: tuple[str, ...]

    @property
    def write_key(self) -> tuple[str, ...]:
        """The stage's own key: a row per key and chunk."""
        return (*self.key, CHUNK_COLUMN)

    @property
    def columns(self) -> list[str]:
        """The backfill's columns, as the stage holds them."""
        return [column.name for column in self.target.columns]

    def prepare(self, connection: sa.Connection) -> bool:
        """Create the stage unless it exists; True when it was created (it is empty)."""
        if sa.inspect(connection).has_table(self.table.name, schema=self.table.schema):
            return False
        self.table.create(connection)
        return True

    def rows_of(self, chunk: pd.DataFrame, chunk_index: int) -> pd.DataFrame:
        """`chunk` as the stage takes it: labelled with its chunk."""
        return chunk.assign(**{CHUNK_COLUMN: chunk_index})

    def write(self, connection: sa.Connection, chunk: pd.DataFrame, chunk_index: int) -> int:
        """Stage one chunk (its keys unique), after what an earlier attempt staged from it on.

        A plain COPY, no merge: once those rows are deleted, no staged row has this chunk's
        index, so none of its (key, chunk) pairs can exist. Returns the rows staged.
        """
        self.clear_from(connection, chunk_index)
        insert_frame(connection, self.table, self.rows_of(chunk, chunk_index))
        return len(chunk)

    def clear_from(self, connection: sa.Connection, chunk_index: int) -> None:
        """Delete the rows an earlier attempt staged from `chunk_index` on."""
        connection.execute(sa.delete(self.table).where(self.table.c[CHUNK_COLUMN] >= chunk_index))

    def analyze(self, connection: sa.Connection) -> None:
        """Give the planner the stage's statistics before it is diffed and published.

        A table just filled has none until autovacuum gets to it; without them PostgreSQL
        may probe the stage once per row of the partition instead of hashing it once.
        """
        if connection.dialect.name == "postgresql":
            name = connection.dialect.identifier_preparer.format_table(self.table)
            connection.execute(sa.text(f"ANALYZE {name}"))

    def latest(self) -> sa.Select[tuple[object, ...]]:
        """The staged rows, the last chunk's row of each key: what would be published."""
        stage, later = self.table, self.table.alias("later")
        overridden = sa.exists().where(
            *[later.c[name] == stage.c[name] for name in self.key],
            later.c[CHUNK_COLUMN] > stage.c[CHUNK_COLUMN],
        )
        return sa.select(*[stage.c[name] for name in self.columns]).where(~overridden)

    def drop(self, connection: sa.Connection) -> None:
        """Drop the stage (after its partition was published or refused)."""
        self.table.drop(connection, checkfirst=True)


def partition_stage(
    target: sa.Table, key: Sequence[str], asset: str, partition: str
) -> PartitionStage:
    """The stage of `asset`'s `partition`, in the schema of its table `target`."""
    digest = hashlib.sha256(f"{asset}\x1f{partition}".encode()).hexdigest()[:32]
    table = sa.Table(
        f"{GATE_STAGE_PREFIX}{digest}",
        sa.MetaData(),
        sa.Column(CHUNK_COLUMN, sa.Integer, nullable=False),
        *[_staged_column(column) for column in target.columns],
        *_checks_of(target),
        # The key first: the diff, the audits and the publish look staged rows up by key.
        sa.PrimaryKeyConstraint(*key, CHUNK_COLUMN),
        # `clear_from` deletes a range of chunks by this one.
        sa.Index(f"{GATE_STAGE_PREFIX}{digest}_chunk", CHUNK_COLUMN),
        schema=target.schema,
    )
    return PartitionStage(table, target, tuple(key))


def _staged_column(column: sa.Column[object]) -> sa.Column[object]:
    """The column as the stage holds it: its type, NOT NULL and server default, so that a
    row the table would reject is rejected as it is staged, by row (`bad_rows=`)."""
    default = column.server_default
    return sa.Column(
        column.name,
        column.type,
        nullable=column.nullable,
        server_default=(
            sa.DefaultClause(default.arg) if isinstance(default, sa.DefaultClause) else None
        ),
    )


def _checks_of(target: sa.Table) -> list[sa.CheckConstraint]:
    """The table's CHECK constraints written as SQL text, under their names (a reject's
    reason names the same constraint as in the direct path). One written as an expression
    names the table's columns through the table: it is left to the publish."""
    found = [c for c in target.constraints if isinstance(c, sa.CheckConstraint)]
    for column in target.columns:
        found += [c for c in column.constraints if isinstance(c, sa.CheckConstraint)]
    return [
        sa.CheckConstraint(check.sqltext.text, name=check.name)
        for check in found
        if isinstance(check.sqltext, sa.TextClause)
    ]
