"""Notices: alerts about a backfill as a whole, not one dead-letter entry; a delivery's next try.

A notice says a circuit opened or closed, or a partition is not ready past its wait.
`jp_alert_notices` holds each notice once; `jp_notice_ledger` its deliveries, one row per
sink, as `jp_alert_ledger` holds a quarantine entry's. Both ledgers gain `next_try_at`: a
failing sink backs off per entry across ticks, so it never holds up another sink.

Revision ID: 0011_alert_notices
Revises: 0010_classification_rules
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_alert_notices"
down_revision = "0010_classification_rules"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Rows written before have never failed under a next try: null means "due now".
    op.add_column("jp_alert_ledger", sa.Column("next_try_at", sa.DateTime(timezone=True)))
    op.create_table(
        "jp_alert_notices",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("asset", sa.String(255), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("details", sa.Text, nullable=False),
        sa.Column("raised_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("kind", "asset", "key", name="uq_jp_alert_notices_kind_asset_key"),
    )
    op.create_index("ix_jp_alert_notices_raised_at", "jp_alert_notices", ["raised_at"])
    op.create_table(
        "jp_notice_ledger",
        sa.Column("notice_id", sa.BigInteger, primary_key=True),
        sa.Column("sink", sa.String(64), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("tries", sa.Integer, nullable=False),
        sa.Column("last_error", sa.Text),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_try_at", sa.DateTime(timezone=True)),
    )


def downgrade() -> None:
    op.drop_table("jp_notice_ledger")
    op.drop_index("ix_jp_alert_notices_raised_at", table_name="jp_alert_notices")
    op.drop_table("jp_alert_notices")
    with op.batch_alter_table("jp_alert_ledger") as batch:
        batch.drop_column("next_try_at")
