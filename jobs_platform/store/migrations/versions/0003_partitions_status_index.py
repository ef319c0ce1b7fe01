"""Index partitions by state: `status` and `platform_health` count by it at 10,000 partitions.

Revision ID: 0003_partitions_status_index
Revises: 0002_quarantine_status_index
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0003_partitions_status_index"
down_revision = "0002_quarantine_status_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # The health figures count partitions by (asset, status) and read duration
    # percentiles at their rank, from this index alone.
    op.create_index(
        "ix_jp_partitions_status",
        "jp_partitions",
        ["asset", "status", "duration_seconds"],
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_index("ix_jp_partitions_status", table_name="jp_partitions")
