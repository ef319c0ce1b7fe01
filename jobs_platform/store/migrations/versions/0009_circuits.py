"""The circuit breaker per backfill and failure signature.

Revision ID: 0009_circuits
Revises: 0008_backfill_holds
Create Date: 2026-12-06
"""

from __future__ import annotations

revision = "0009_circuits"
down_revision = "0008_backfill_holds"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
