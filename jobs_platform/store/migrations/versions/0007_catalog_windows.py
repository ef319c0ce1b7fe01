"""The catalog holds a time-window backfill's window (its first and last key) instead of
every key: `jobs-platform status` counts an hourly backfill of 100,000 partitions in the
database, by the keys' range.

Revision ID: 0007_catalog_windows
Revises: 0006_backfill_catalog
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_catalog_windows"
down_revision = "0006_backfill_catalog"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Rows written before keep their keys (and no window): still read as they were.
    op.add_column("jp_backfill_catalog", sa.Column("first_key", sa.String(255)))
    op.add_column("jp_backfill_catalog", sa.Column("last_key", sa.String(255)))


def downgrade() -> None:
    with op.batch_alter_table("jp_backfill_catalog") as batch:
        batch.drop_column("last_key")
        batch.drop_column("first_key")
