"""Pause and readiness: the partitions a backfill holds back, and why.

Revision ID: 0008_backfill_holds
Revises: 0007_catalog_windows
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_backfill_holds"
down_revision = "0007_catalog_windows"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jp_backfill_pauses",
        sa.Column("asset", sa.String(255), primary_key=True),
        sa.Column("paused_by", sa.String(255), nullable=False),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text),
    )
    op.create_table(
        "jp_backfill_holds",
        sa.Column("asset", sa.String(255), primary_key=True),
        sa.Column("partition", sa.String(255), primary_key=True),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("run_id", sa.String(64)),
        sa.Column("held_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("checked_at", sa.DateTime(timezone=True)),
        sa.Column("reported_at", sa.DateTime(timezone=True)),
        sa.Column("launch_key", sa.String(255)),
        sa.Column("launched_at", sa.DateTime(timezone=True)),
    )
    op.create_index(
        "ix_jp_backfill_holds_reason", "jp_backfill_holds", ["reason", "asset", "checked_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_jp_backfill_holds_reason", table_name="jp_backfill_holds")
    op.drop_table("jp_backfill_holds")
    op.drop_table("jp_backfill_pauses")
