"""What each code location serves, per backfill: `jobs-platform status` reads it without
loading the location.

Revision ID: 0006_backfill_catalog
Revises: 0005_rejected_rows
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_backfill_catalog"
down_revision = "0005_rejected_rows"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jp_backfill_catalog",
        sa.Column("location", sa.String(255), primary_key=True),
        sa.Column("asset", sa.String(255), primary_key=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("partitions_kind", sa.String(32), nullable=False),
        sa.Column("partition_count", sa.Integer, nullable=False),
        sa.Column("partition_keys", sa.Text, nullable=False),
        sa.Column("max_partitions_per_run", sa.Integer),
        sa.Column("target_table", sa.String(255)),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("jp_backfill_catalog")
