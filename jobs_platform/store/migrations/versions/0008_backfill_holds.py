"""Pause and readiness: the partitions a backfill holds back, and why.

Revision ID: 0008_backfill_holds
Revises: 0007_catalog_windows
Create Date: 2026-12-06
"""

from __future__ import annotations

revision = "0008_backfill_holds"
down_revision = "0007_catalog_windows"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
