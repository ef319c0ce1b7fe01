"""The framework's tables exactly as jobs_platform 0.1.0 declared them, frozen.

Copied from `jobs_platform/store/schema.py` as of 0.1.0 (before the jp_quarantine status
index), so tests can build a warehouse the way 0.1.0 did (`create_all`) and check that
revision 0001 is that schema. Never edit it to follow the current models.
"""

from __future__ import annotations

import sqlalchemy as sa

from jobs_platform.store.schema import UtcDateTime

metadata_0_1_0 = sa.MetaData()

checkpoints = sa.Table(
    "jp_checkpoints",
    metadata_0_1_0,
    sa.Column("asset", sa.String(255), primary_key=True),
    sa.Column("partition", sa.String(255), primary_key=True),
    sa.Column("fingerprint", sa.String(128), primary_key=True),
    sa.Column("chunk_index", sa.Integer, primary_key=True),
    # The chunk's content hash: a chunk is skipped only when it is the very same data.
    sa.Column("chunk_hash", sa.String(64), nullable=False),
    sa.Column("row_count", sa.Integer, nullable=False),
    sa.Column("token", sa.BigInteger, nullable=False),
    sa.Column("committed_at", UtcDateTime, nullable=False),
)

partitions = sa.Table(
    "jp_partitions",
    metadata_0_1_0,
    sa.Column("asset", sa.String(255), primary_key=True),
    sa.Column("partition", sa.String(255), primary_key=True),
    sa.Column("status", sa.String(32), nullable=False),
    # Requeueing a quarantined partition starts a new episode: its attempt count starts over.
    sa.Column("episode", sa.Integer, nullable=False, server_default="1"),
    sa.Column("fingerprint", sa.String(128)),
    sa.Column("row_count", sa.BigInteger),
    sa.Column("duration_seconds", sa.Float),
    sa.Column("run_id", sa.String(64)),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)

leases = sa.Table(
    "jp_leases",
    metadata_0_1_0,
    sa.Column("asset", sa.String(255), primary_key=True),
    sa.Column("partition", sa.String(255), primary_key=True),
    # Fencing token: strictly increasing per partition, a new one on every acquisition.
    sa.Column("token", sa.BigInteger, nullable=False),
    sa.Column("holder", sa.String(255)),
    sa.Column("run_id", sa.String(64)),
    sa.Column("attempt_id", sa.BigInteger),
    sa.Column("acquired_at", UtcDateTime),
    sa.Column("expires_at", UtcDateTime, nullable=False),
)

attempts = sa.Table(
    "jp_attempts",
    metadata_0_1_0,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
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
    sa.Column("started_at", UtcDateTime, nullable=False),
    sa.Column("ended_at", UtcDateTime),
    sa.Index("ix_jp_attempts_partition", "asset", "partition", "episode"),
)

quarantine = sa.Table(
    "jp_quarantine",
    metadata_0_1_0,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("asset", sa.String(255), nullable=False),
    sa.Column("partition", sa.String(255), nullable=False),
    sa.Column("episode", sa.Integer, nullable=False),
    sa.Column("status", sa.String(32), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("error_class", sa.String(32), nullable=False),
    sa.Column("error_type", sa.String(255)),
    sa.Column("last_error", sa.Text),
    sa.Column("first_failed_at", UtcDateTime),
    sa.Column("last_failed_at", UtcDateTime),
    sa.Column("quarantined_at", UtcDateTime, nullable=False),
    sa.Column("requeued_at", UtcDateTime),
    # Set when a run for the requeued partition was launched (by the CLI or the sensor).
    sa.Column("requeue_launched_at", UtcDateTime),
    sa.Column("resolved_at", UtcDateTime),
    # One entry per episode: the hook and the runner may both report the same failure.
    sa.UniqueConstraint("asset", "partition", "episode", name="uq_jp_quarantine_episode"),
)

alert_ledger = sa.Table(
    "jp_alert_ledger",
    metadata_0_1_0,
    sa.Column("entry_id", sa.BigInteger, primary_key=True),
    sa.Column("sink", sa.String(64), primary_key=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("tries", sa.Integer, nullable=False),
    sa.Column("last_error", sa.Text),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)

# Backfill requests written by application code in its own transaction (jobs_platform.outbox).
outbox = sa.Table(
    "jp_outbox",
    metadata_0_1_0,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("schema_version", sa.Integer, nullable=False),
    sa.Column("asset", sa.String(255), nullable=False),
    sa.Column("partitions", sa.Text, nullable=False),  # a JSON array of partition keys
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("correlation_id", sa.String(255)),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("error", sa.Text),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("claimed_at", UtcDateTime),
    sa.Column("launched_at", UtcDateTime),
    sa.Column("run_key", sa.String(64)),
    # The sensor's claim walks (status, id); the queue statistics count by status.
    sa.Index("ix_jp_outbox_status", "status", "id"),
)
