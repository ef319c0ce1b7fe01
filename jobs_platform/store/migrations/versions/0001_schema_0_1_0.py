"""The framework's tables as jobs_platform 0.1.0 created them.

A warehouse that 0.1.0 set up with `create_all` holds exactly this schema: stamp it
(`jobs-platform db upgrade` does when it finds the tables without a version) and upgrade.
Written out rather than taken from `framework_metadata`, which moves on with later
revisions; the timestamps are `UtcDateTime`'s storage type, DATETIME WITH TIME ZONE.

Revision ID: 0001_schema_0_1_0
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_schema_0_1_0"
down_revision = None
branch_labels = None
depends_on = None

# SQLite gives only INTEGER PRIMARY KEY columns an automatic rowid id.
_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")
_TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "jp_checkpoints",
        sa.Column("asset", sa.String(255), primary_key=True),
        sa.Column("partition", sa.String(255), primary_key=True),
        sa.Column("fingerprint", sa.String(128), primary_key=True),
        sa.Column("chunk_index", sa.Integer, primary_key=True),
        sa.Column("chunk_hash", sa.String(64), nullable=False),
        sa.Column("row_count", sa.Integer, nullable=False),
        sa.Column("token", sa.BigInteger, nullable=False),
        sa.Column("committed_at", _TIMESTAMP, nullable=False),
    )
    op.create_table(
        "jp_partitions",
        sa.Column("asset", sa.String(255), primary_key=True),
        sa.Column("partition", sa.String(255), primary_key=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("episode", sa.Integer, nullable=False, server_default="1"),
        sa.Column("fingerprint", sa.String(128)),
        sa.Column("row_count", sa.BigInteger),
        sa.Column("duration_seconds", sa.Float),
        sa.Column("run_id", sa.String(64)),
        sa.Column("updated_at", _TIMESTAMP, nullable=False),
    )
    op.create_table(
        "jp_leases",
        sa.Column("asset", sa.String(255), primary_key=True),
        sa.Column("partition", sa.String(255), primary_key=True),
        sa.Column("token", sa.BigInteger, nullable=False),
        sa.Column("holder", sa.String(255)),
        sa.Column("run_id", sa.String(64)),
        sa.Column("attempt_id", sa.BigInteger),
        sa.Column("acquired_at", _TIMESTAMP),
        sa.Column("expires_at", _TIMESTAMP, nullable=False),
    )
    op.create_table(
        "jp_attempts",
        sa.Column("id", _ID, primary_key=True),
        sa.Column("asset", sa.String(255), nullable=False),
        sa.Column("partition", sa.String(255), nullable=False),
        sa.Column("episode", sa.Integer, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("run_id", sa.String(64)),
        sa.Column("step_retry", sa.Integer),
        sa.Column("token", sa.BigInteger),
        sa.Column("holder", sa.String(255)),
        sa.Column("correlation_id", sa.String(255)),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("error_class", sa.String(32)),
        sa.Column("error_type", sa.String(255)),
        sa.Column("message", sa.Text),
        sa.Column("traceback", sa.Text),
        sa.Column("started_at", _TIMESTAMP, nullable=False),
        sa.Column("ended_at", _TIMESTAMP),
    )
    op.create_index("ix_jp_attempts_partition", "jp_attempts", ["asset", "partition", "episode"])
    op.create_table(
        "jp_quarantine",
        sa.Column("id", _ID, primary_key=True),
        sa.Column("asset", sa.String(255), nullable=False),
        sa.Column("partition", sa.String(255), nullable=False),
        sa.Column("episode", sa.Integer, nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("error_class", sa.String(32), nullable=False),
        sa.Column("error_type", sa.String(255)),
        sa.Column("last_error", sa.Text),
        sa.Column("first_failed_at", _TIMESTAMP),
        sa.Column("last_failed_at", _TIMESTAMP),
        sa.Column("quarantined_at", _TIMESTAMP, nullable=False),
        sa.Column("requeued_at", _TIMESTAMP),
        sa.Column("requeue_launched_at", _TIMESTAMP),
        sa.Column("resolved_at", _TIMESTAMP),
        sa.UniqueConstraint("asset", "partition", "episode", name="uq_jp_quarantine_episode"),
    )
    op.create_table(
        "jp_alert_ledger",
        sa.Column("entry_id", sa.BigInteger, primary_key=True),
        sa.Column("sink", sa.String(64), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("tries", sa.Integer, nullable=False),
        sa.Column("last_error", sa.Text),
        sa.Column("updated_at", _TIMESTAMP, nullable=False),
    )
    op.create_table(
        "jp_outbox",
        sa.Column("id", _ID, primary_key=True),
        sa.Column("schema_version", sa.Integer, nullable=False),
        sa.Column("asset", sa.String(255), nullable=False),
        sa.Column("partitions", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("correlation_id", sa.String(255)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("created_at", _TIMESTAMP, nullable=False),
        sa.Column("claimed_at", _TIMESTAMP),
        sa.Column("launched_at", _TIMESTAMP),
        sa.Column("run_key", sa.String(64)),
    )
    op.create_index("ix_jp_outbox_status", "jp_outbox", ["status", "id"])


def downgrade() -> None:
    for table in (
        "jp_outbox",
        "jp_alert_ledger",
        "jp_quarantine",
        "jp_attempts",
        "jp_leases",
        "jp_partitions",
        "jp_checkpoints",
    ):
        op.drop_table(table)
