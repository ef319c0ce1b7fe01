"""The change gate's refusals and their approvals (`expect=`, `audits=`).

Revision ID: 0012_change_gate
Revises: 0011_alert_notices
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_change_gate"
down_revision = "0011_alert_notices"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jp_change_reviews",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("asset", sa.String(255), nullable=False),
        sa.Column("partition", sa.String(255), nullable=False),
        sa.Column("attempt_id", sa.BigInteger),
        sa.Column("diff_hash", sa.String(64), nullable=False),
        sa.Column("evidence", sa.Text, nullable=False),
        sa.Column("refused_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("accepted_by", sa.String(64)),
        sa.Column("accepted_at", sa.DateTime(timezone=True)),
        sa.Column("published_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_jp_change_reviews_partition", "jp_change_reviews", ["asset", "partition"])


def downgrade() -> None:
    op.drop_index("ix_jp_change_reviews_partition", table_name="jp_change_reviews")
    op.drop_table("jp_change_reviews")
