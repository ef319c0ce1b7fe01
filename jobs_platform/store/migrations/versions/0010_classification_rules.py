"""Classification rules an operator teaches, per code location and signature.

Revision ID: 0010_classification_rules
Revises: 0009_circuits
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_classification_rules"
down_revision = "0009_circuits"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jp_classification_rules",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("location", sa.String(255), nullable=False),
        sa.Column("asset", sa.String(255), nullable=False),
        sa.Column("signature", sa.String(16), nullable=False),
        sa.Column("classification", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("set_by", sa.String(255), nullable=False),
        sa.Column("set_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("error_class", sa.String(32)),
        sa.Column("error_type", sa.String(255)),
        sa.Column("sample_message", sa.Text),
        sa.UniqueConstraint("asset", "signature", name="uq_jp_classification_rules_asset"),
    )
    op.create_index(
        "ix_jp_classification_rules_location",
        "jp_classification_rules",
        ["location", "signature"],
    )
    with op.batch_alter_table("jp_attempts") as batch:
        batch.add_column(sa.Column("rule", sa.String(16)))


def downgrade() -> None:
    with op.batch_alter_table("jp_attempts") as batch:
        batch.drop_column("rule")
    op.drop_index("ix_jp_classification_rules_location", table_name="jp_classification_rules")
    op.drop_table("jp_classification_rules")
