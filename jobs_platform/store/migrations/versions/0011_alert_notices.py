"""Alerts about a backfill as a whole (a circuit opened or closed, a partition not ready past its wait), not about one dead-letter entry.

Revision ID: 0011_alert_notices
Revises: 0010_classification_rules
Create Date: 2026-12-06
"""

from __future__ import annotations

revision = "0011_alert_notices"
down_revision = "0010_classification_rules"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
