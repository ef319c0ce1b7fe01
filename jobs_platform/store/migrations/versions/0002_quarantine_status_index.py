"""Index quarantine entries by status: the gate, `dead-letter list` and the requeue sensor.

Revision ID: 0002_quarantine_status_index
Revises: 0001_schema_0_1_0
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0002_quarantine_status_index"
down_revision = "0001_schema_0_1_0"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # IF NOT EXISTS: warehouses that unreleased builds between 0.1.0 and the migrations
    # created with `create_all` already have it (they are adopted as the 0.1.0 baseline).
    op.create_index(
        "ix_jp_quarantine_status",
        "jp_quarantine",
        ["status", "asset", "partition"],
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index("ix_jp_quarantine_status", table_name="jp_quarantine")
