"""The change gate's refusals and their approvals; the replay of rejected rows.

The refusals of `expect=` and `audits=`, and a person's approvals (`jp_change_reviews`);
the code version that rejected each row, and the journeys of rows a later version
cleared (`jp_reject_history`).

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
    with op.batch_alter_table("jp_rejected_rows") as batch:
        batch.add_column(sa.Column("code_version", sa.String(255)))
    op.create_table(
        "jp_reject_history",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("asset", sa.String(255), nullable=False),
        sa.Column("partition", sa.String(255), nullable=False),
        sa.Column("row_number", sa.BigInteger, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("rejected_version", sa.String(255)),
        sa.Column("rejected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cleared_version", sa.String(255)),
        sa.Column("cleared_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ix_jp_reject_history_partition",
        "jp_reject_history",
        ["asset", "partition", "row_number"],
    )


def downgrade() -> None:
    op.drop_index("ix_jp_reject_history_partition", table_name="jp_reject_history")
    op.drop_table("jp_reject_history")
    with op.batch_alter_table("jp_rejected_rows") as batch:
        batch.drop_column("code_version")
    op.drop_index("ix_jp_change_reviews_partition", table_name="jp_change_reviews")
    op.drop_table("jp_change_reviews")
