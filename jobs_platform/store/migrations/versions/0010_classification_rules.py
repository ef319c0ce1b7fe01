"""Classification rules an operator teaches, per code location and signature.

Revision ID: 0010_classification_rules
Revises: 0009_circuits
Create Date: 2026-12-06
"""

from __future__ import annotations

revision = "0010_classification_rules"
down_revision = "0009_circuits"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
