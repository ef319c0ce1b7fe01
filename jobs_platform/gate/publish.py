"""Publish a partition's stage into its table: merge the staged rows, sweep the rest.

Runs inside the gated finalize's one fenced transaction (`engine.gated_finalize`), after
the diff held: the merge and the sweep commit with the done record, or not at all. Like
the direct path's upsert, the merge rewrites only rows whose values differ, so
publishing the same stage twice changes nothing the second time.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from jobs_platform.gate.diff import GatedBackfill
from jobs_platform.gate.stage import PartitionStage

__all__ = ["publish_stage"]


def publish_stage(
    connection: sa.Connection, spec: GatedBackfill, partition: str, stage: PartitionStage
) -> int:
    """Merge the stage into `spec.table` and sweep the partition's unstaged rows; returns
    the rows swept. Inside the caller's transaction."""
    target, key, columns = spec.table, spec.key, stage.columns
    insert = (postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert)(
        target
    )
    # `WHERE true` keeps SQLite from reading ON CONFLICT as part of the SELECT.
    statement = insert.from_select(columns, stage.latest().where(sa.true()))
    values = [name for name in columns if name not in key]
    if values:
        statement = statement.on_conflict_do_update(
            index_elements=list(key),
            set_={name: statement.excluded[name] for name in values},
            where=sa.or_(*[target.c[n].is_distinct_from(statement.excluded[n]) for n in values]),
        )
    else:
        statement = statement.on_conflict_do_nothing(index_elements=list(key))
    connection.execute(statement)
    unstaged = ~sa.exists().where(*[stage.table.c[n] == target.c[n] for n in key])
    return connection.execute(
        sa.delete(target).where(spec.partition_scope(target, partition), unstaged),
        execution_options={"preserve_rowcount": True},
    ).rowcount
