"""User tables with one static partition per tenant, for tests of what a backfill declares
(its reader's parameters, its chain)."""

from __future__ import annotations

import dagster as dg
import sqlalchemy as sa

PARTITION = "tenant-a"
partitions = dg.StaticPartitionsDefinition([PARTITION])


def rows_of_tenant(table: sa.Table, partition: str) -> sa.ColumnElement[bool]:
    return table.c.tenant == partition


def tenant_table(metadata: sa.MetaData, name: str) -> sa.Table:
    """A table of `metadata` keyed by (tenant, n), with a label."""
    return sa.Table(
        name,
        metadata,
        sa.Column("tenant", sa.String(16), primary_key=True),
        sa.Column("n", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("label", sa.String(16), nullable=False),
    )
