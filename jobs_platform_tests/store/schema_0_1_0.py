"""The framework's tables exactly as jobs_platform 0.1.0 declared them, frozen.

Copied from `jobs_platform/store/schema.py` as of 0.1.0 (before the jp_quarantine status
index), so tests can build a warehouse the way 0.1.0 did (`create_all`) and check that
revision 0001 is that schema. Never edit it to follow the current models.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from jobs_platform.store.db import warehouse_engine
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


AT = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)

# One row in every table 0.1.0 had, in the states the framework leaves them.
ROWS_0_1_0 = {
    "jp_checkpoints": [
        {
            "asset": "orders", "partition": "2024-01-02", "fingerprint": "f1",
            "chunk_index": 0, "chunk_hash": "h0", "row_count": 10, "token": 1,
            "committed_at": AT,
        }
    ],
    "jp_partitions": [
        {
            "asset": "orders", "partition": "2024-01-02", "status": "done", "episode": 1,
            "fingerprint": "f1", "row_count": 10, "duration_seconds": 1.5, "run_id": "r1",
            "updated_at": AT,
        }
    ],
    "jp_leases": [
        {
            "asset": "orders", "partition": "2024-01-02", "token": 1, "holder": None,
            "run_id": "r1", "attempt_id": 1, "acquired_at": AT, "expires_at": AT,
        }
    ],
    "jp_attempts": [
        {
            "id": 1, "asset": "orders", "partition": "2024-01-02", "episode": 1, "attempt": 1,
            "run_id": "r1", "step_retry": 0, "token": 1, "holder": "host:1", "correlation_id": None,
            "outcome": "succeeded", "error_class": None, "error_type": None, "message": None,
            "traceback": None, "started_at": AT, "ended_at": AT,
        },
        {
            "id": 2, "asset": "orders", "partition": "2024-01-04", "episode": 1, "attempt": 1,
            "run_id": "r2", "step_retry": 0, "token": 1, "holder": "host:2",
            "correlation_id": "ticket-1", "outcome": "failed", "error_class": "terminal",
            "error_type": "InputValidationError", "message": "line 3: not JSON",
            "traceback": "Traceback …", "started_at": AT, "ended_at": AT,
        },
    ],
    "jp_quarantine": [
        {
            "id": 1, "asset": "orders", "partition": "2024-01-04", "episode": 1,
            "status": "quarantined", "attempts": 1, "error_class": "terminal",
            "error_type": "InputValidationError", "last_error": "line 3: not JSON",
            "first_failed_at": AT, "last_failed_at": AT, "quarantined_at": AT,
            "requeued_at": None, "requeue_launched_at": None, "resolved_at": None,
        }
    ],
    "jp_alert_ledger": [
        {
            "entry_id": 1, "sink": "log", "status": "sent", "tries": 1, "last_error": None,
            "updated_at": AT,
        }
    ],
    "jp_outbox": [
        {
            "id": 1, "schema_version": 1, "asset": "orders", "partitions": '["2024-01-05"]',
            "reason": "late data", "correlation_id": "ticket-2", "status": "pending",
            "error": None, "created_at": AT, "claimed_at": None, "launched_at": None,
            "run_key": None,
        }
    ],
}  # fmt: skip


def build_0_1_0_warehouse(url: str) -> sa.Engine:
    """A warehouse as 0.1.0 left it: its `create_all`, no version table, a row in every table."""
    engine = warehouse_engine(url)
    with engine.begin() as connection:
        metadata_0_1_0.create_all(connection)
        for name, rows in ROWS_0_1_0.items():
            connection.execute(metadata_0_1_0.tables[name].insert(), rows)
        if connection.dialect.name == "postgresql":
            # The rows carry their ids, as 0.1.0 wrote them; its sequences had moved on too.
            for name in ("jp_attempts", "jp_quarantine", "jp_outbox"):
                connection.execute(
                    sa.text("SELECT setval(pg_get_serial_sequence(:table, 'id'), :last)"),
                    {"table": name, "last": len(ROWS_0_1_0[name])},
                )
    return engine
