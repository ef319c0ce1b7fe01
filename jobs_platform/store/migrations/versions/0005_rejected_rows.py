"""Rows rejected under `bad_rows=RejectRows(...)`: one per rejected input row.

Revision ID: 0005_rejected_rows
Revises: 0004_triage_and_redrive
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_rejected_rows"
down_revision = "0004_triage_and_redrive"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jp_rejected_rows",
        sa.Column("asset", sa.String(255), primary_key=True),
        sa.Column("partition", sa.String(255), primary_key=True),
        sa.Column("row_number", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("chunk_index", sa.Integer, nullable=False),
        sa.Column("column_name", sa.String(255)),
        sa.Column("sqlstate", sa.String(5)),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("row_values", sa.Text),
        sa.Column("rejected_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("jp_rejected_rows")
