"""The circuit breaker per backfill and failure signature.

Revision ID: 0009_circuits
Revises: 0008_backfill_holds
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_circuits"
down_revision = "0008_backfill_holds"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jp_circuits",
        sa.Column("asset", sa.String(255), primary_key=True),
        sa.Column("signature", sa.String(16), primary_key=True),
        sa.Column("error_class", sa.String(32), nullable=False),
        sa.Column("error_type", sa.String(255)),
        sa.Column("last_error", sa.Text),
        sa.Column("opened_at", sa.DateTime(timezone=True)),
        sa.Column("closed_at", sa.DateTime(timezone=True)),
        sa.Column("partitions", sa.Integer, nullable=False),
        sa.Column("times_opened", sa.Integer, nullable=False),
        sa.Column("probe_partition", sa.String(255)),
        sa.Column("probe_token", sa.BigInteger),
        sa.Column("probe_started_at", sa.DateTime(timezone=True)),
        sa.Column("next_probe_at", sa.DateTime(timezone=True)),
        sa.Column("probes_failed", sa.Integer, nullable=False),
        sa.Column("snoozes", sa.Integer, nullable=False),
        sa.Column("open_alerted_at", sa.DateTime(timezone=True)),
        sa.Column("close_alerted_at", sa.DateTime(timezone=True)),
    )
    op.create_table(
        "jp_circuit_failures",
        sa.Column("attempt_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("asset", sa.String(255), nullable=False),
        sa.Column("partition", sa.String(255), nullable=False),
        sa.Column("signature", sa.String(16), nullable=False),
        sa.Column("failed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("forgiven", sa.Boolean, nullable=False),
    )
    op.create_index(
        "ix_jp_circuit_failures_signature",
        "jp_circuit_failures",
        ["asset", "signature", "failed_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_jp_circuit_failures_signature", table_name="jp_circuit_failures")
    op.drop_table("jp_circuit_failures")
    op.drop_table("jp_circuits")
