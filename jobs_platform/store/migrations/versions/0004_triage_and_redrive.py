"""Triage and redrive: each entry's signature, what attempts ran and read, a requeue log.

Revision ID: 0004_triage_and_redrive
Revises: 0003_partitions_status_index
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from jobs_platform.dead_letter.entries import sign_unsigned_entries

revision = "0004_triage_and_redrive"
down_revision = "0003_partitions_status_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jp_attempts") as batch:
        batch.add_column(sa.Column("code_version", sa.String(255)))
        batch.add_column(sa.Column("fingerprint", sa.String(128)))
    with op.batch_alter_table("jp_quarantine") as batch:
        batch.add_column(sa.Column("signature", sa.String(16)))
        batch.add_column(sa.Column("code_version", sa.String(255)))
        batch.add_column(sa.Column("fingerprint", sa.String(128)))
    op.create_index("ix_jp_quarantine_signature", "jp_quarantine", ["status", "signature"])
    op.create_table(
        "jp_requeues",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("entry_id", sa.BigInteger, nullable=False),
        sa.Column("asset", sa.String(255), nullable=False),
        sa.Column("partition", sa.String(255), nullable=False),
        sa.Column("by", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_jp_requeues_partition", "jp_requeues", ["asset", "partition", "by"])
    _sign_existing_entries()


def _sign_existing_entries() -> None:
    # Entries quarantined before signatures existed get theirs, so groups count them too.
    # A signature is computed in Python: a printed script (`db upgrade --sql`) cannot, and
    # the next `jobs-platform db upgrade` signs what it left (`store.migrate`).
    if context.is_offline_mode():
        op.execute(
            "-- entries quarantined before 0004 are signed by the next "
            "`jobs-platform db upgrade` (online)"
        )
        return
    # Reads and writes only columns this revision has: safe to run at this revision.
    sign_unsigned_entries(op.get_bind())


def downgrade() -> None:
    op.drop_index("ix_jp_requeues_partition", table_name="jp_requeues")
    op.drop_table("jp_requeues")
    op.drop_index("ix_jp_quarantine_signature", table_name="jp_quarantine")
    with op.batch_alter_table("jp_quarantine") as batch:
        batch.drop_column("fingerprint")
        batch.drop_column("code_version")
        batch.drop_column("signature")
    with op.batch_alter_table("jp_attempts") as batch:
        batch.drop_column("fingerprint")
        batch.drop_column("code_version")
