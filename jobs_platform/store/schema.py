"""The framework's own tables, kept in the warehouse beside the job's target tables.

They live in the same database as the target tables on purpose: a chunk's rows, its
checkpoint and its fence check then commit in one transaction. They are created and
upgraded by the migrations in `jobs_platform/store/migrations/` (`jobs-platform db
upgrade`); a change here needs a new revision there, which the suite checks.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Iterable

import sqlalchemy as sa


class UtcDateTime(sa.types.TypeDecorator[dt.datetime]):
    """A timestamp stored in UTC and always read back timezone-aware (SQLite drops the zone)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(
        self, value: dt.datetime | None, dialect: sa.Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are ambiguous; pass a UTC-aware datetime")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(
        self, value: dt.datetime | None, dialect: sa.Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


framework_metadata = sa.MetaData()
# Alembic's record of the framework's revision. Not alembic's default `alembic_version`:
# a warehouse may well hold the user's own.
VERSION_TABLE = "jp_alembic_version"
# A stage table's name: the chunk being written (`upsert`), the keys an attempt has read
# (`sweep`). TEMPORARY, per connection, and no part of the warehouse's schema.
STAGE_PREFIX = "jp_stage_"


def is_framework_table(name: str) -> bool:
    """Whether `name` (schema-qualified or not) is one of the tables `db upgrade` migrates."""
    name = name.rpartition(".")[2]
    return name in framework_metadata.tables or name == VERSION_TABLE


checkpoints = sa.Table(
    "jp_checkpoints",
    framework_metadata,
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
    framework_metadata,
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
    # `status` and `platform_health` count partitions by state and read duration
    # percentiles at their rank: at 10,000 partitions per asset, from this index alone.
    sa.Index("ix_jp_partitions_status", "asset", "status", "duration_seconds"),
)

leases = sa.Table(
    "jp_leases",
    framework_metadata,
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
    framework_metadata,
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
    # What the attempt ran and read: the redrive compares them with today's (a fix shipped,
    # the input corrected). The fingerprint is set once the attempt computed it.
    sa.Column("code_version", sa.String(255)),
    sa.Column("fingerprint", sa.String(128)),
    # The signature of the taught rule that decided the attempt's class
    # (`jp_classification_rules`); NULL when the built-in table decided it.
    sa.Column("rule", sa.String(16)),
    sa.Index("ix_jp_attempts_partition", "asset", "partition", "episode"),
)


# The values of `jp_quarantine.status`: the dead letter moves entries between them
# (`dead_letter.entries`, `dead_letter.releases`), and `store.health` counts its
# partitions by them.
class EntryStatus(enum.StrEnum):
    """Where a dead-letter entry stands."""

    QUARANTINED = "quarantined"  # the partition failed for good; its gate refuses all work
    REQUEUED = "requeued"  # a person released it; a run (key requeue-<id>) starts a new episode
    RESOLVED = "resolved"  # the requeued partition then succeeded


quarantine = sa.Table(
    "jp_quarantine",
    framework_metadata,
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
    # The cause, grouped by (`dead_letter.signature`): a dead letter is read and requeued by it.
    sa.Column("signature", sa.String(16)),
    # What its last failing attempt ran and read, for the redrive's set-based comparisons.
    sa.Column("code_version", sa.String(255)),
    sa.Column("fingerprint", sa.String(128)),
    # One entry per episode: the hook and the runner may both report the same failure.
    sa.UniqueConstraint("asset", "partition", "episode", name="uq_jp_quarantine_episode"),
    # The gate, `dead-letter list` and the requeue sensor look entries up by status.
    sa.Index("ix_jp_quarantine_status", "status", "asset", "partition"),
    # `dead-letter groups` and requeue by group count and select open entries by cause.
    sa.Index("ix_jp_quarantine_signature", "status", "signature"),
)

# Every release of a quarantine entry: who (`cli`, `ui`, `redrive`) and why. The redrive
# counts its own per partition, across episodes, to bound itself and grow its cool-down.
requeues = sa.Table(
    "jp_requeues",
    framework_metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("entry_id", sa.BigInteger, nullable=False),
    sa.Column("asset", sa.String(255), nullable=False),
    sa.Column("partition", sa.String(255), nullable=False),
    sa.Column("by", sa.String(16), nullable=False),
    sa.Column("reason", sa.String(64), nullable=False),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Index("ix_jp_requeues_partition", "asset", "partition", "by"),
)

# Rows a partition rejected under `bad_rows=RejectRows(...)` (docs/bad-rows.md): one per input row,
# so a chunk resumed after a crash writes its rejects over themselves, never twice. A chunk's
# rejects commit with its rows; an attempt replaces those of the chunks it writes again.
rejected_rows = sa.Table(
    "jp_rejected_rows",
    framework_metadata,
    sa.Column("asset", sa.String(255), primary_key=True),
    sa.Column("partition", sa.String(255), primary_key=True),
    # The 1-based position of the row in the partition's input, as the reader yielded it.
    sa.Column("row_number", sa.BigInteger, primary_key=True, autoincrement=False),
    # The chunk it was read in: what a later attempt replaces when it writes that chunk.
    sa.Column("chunk_index", sa.Integer, nullable=False),
    sa.Column("column_name", sa.String(255)),
    sa.Column("sqlstate", sa.String(5)),
    sa.Column("reason", sa.Text, nullable=False),
    # A JSON object of the row's values, each truncated (never a whole payload).
    sa.Column("row_values", sa.Text),
    sa.Column("rejected_at", UtcDateTime, nullable=False),
    # The backfill's code_version when it was rejected: a new one replays it (`rejects_replayed`).
    sa.Column("code_version", sa.String(255)),
)

# Each reject a later write of its chunk cleared: the row's journey, kept once it leaves
# `jp_rejected_rows` (rejected under `rejected_version`, written under `cleared_version`).
# A row rejected again is open again in `jp_rejected_rows`, under the new version.
reject_history = sa.Table(
    "jp_reject_history",
    framework_metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("asset", sa.String(255), nullable=False),
    sa.Column("partition", sa.String(255), nullable=False),
    sa.Column("row_number", sa.BigInteger, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("rejected_version", sa.String(255)),
    sa.Column("rejected_at", UtcDateTime, nullable=False),
    sa.Column("cleared_version", sa.String(255)),
    sa.Column("cleared_at", UtcDateTime, nullable=False),
    sa.Index("ix_jp_reject_history_partition", "asset", "partition", "row_number"),
)

# Each refusal of the change gate (`expect=`, `audits=`; docs/bad-rows.md): the diff the
# partition's publish would have made, and the audits that failed, as evidence for the
# person who reads `dead-letter show`. `accept-change` approves one refusal's diff
# (`accepted_by`, `accepted_at`); the attempt that publishes it stamps `published_at`, so
# an approval holds once, and only for a diff with the same `diff_hash`.
change_reviews = sa.Table(
    "jp_change_reviews",
    framework_metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("asset", sa.String(255), nullable=False),
    sa.Column("partition", sa.String(255), nullable=False),
    sa.Column("attempt_id", sa.BigInteger),
    sa.Column("diff_hash", sa.String(64), nullable=False),
    # JSON: {"diff": ChangeDiff.as_json(), "broken": [...], "audits": [...]}.
    sa.Column("evidence", sa.Text, nullable=False),
    sa.Column("refused_at", UtcDateTime, nullable=False),
    sa.Column("accepted_by", sa.String(64)),
    sa.Column("accepted_at", UtcDateTime),
    sa.Column("published_at", UtcDateTime),
    sa.Index("ix_jp_change_reviews_partition", "asset", "partition"),
)

# What each code location serves, per backfill: what `jobs-platform status` needs to answer
# without importing Dagster or the location (`store.catalog`). Written at deploy (`db
# upgrade`) and by each `platform_health` materialization; keyed by the location, since
# several locations may share a warehouse and each writes only its own rows.
backfill_catalog = sa.Table(
    "jp_backfill_catalog",
    framework_metadata,
    sa.Column("location", sa.String(255), primary_key=True),
    sa.Column("asset", sa.String(255), primary_key=True),
    # The order the location declares its backfills in: the order status lists them.
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("partitions_kind", sa.String(32), nullable=False),
    sa.Column("partition_count", sa.Integer, nullable=False),
    # A JSON array of every partition key, as of `updated_at`: `missing` is exact with it
    # (10,000 daily keys are ~130 kB, read in milliseconds). Empty for a time-window
    # backfill whose keys sort as their times do: its window says them (below).
    sa.Column("partition_keys", sa.Text, nullable=False),
    # The window of a time-window backfill (`store.health.KeyWindow`), as of `updated_at`:
    # its `partition_count` keys run from `first_key` to `last_key`. Null otherwise.
    sa.Column("first_key", sa.String(255)),
    sa.Column("last_key", sa.String(255)),
    sa.Column("max_partitions_per_run", sa.Integer),
    sa.Column("target_table", sa.String(255)),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)

# Classification rules a person taught (`jobs-platform dead-letter classify`), read by
# `dead_letter.rules` where a failure is recorded. One row per backfill the code location
# served when the rule was set: an attempt knows its asset, not its location, and several
# locations may share a warehouse, each with backfills of its own.
classification_rules = sa.Table(
    "jp_classification_rules",
    framework_metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("location", sa.String(255), nullable=False),
    sa.Column("asset", sa.String(255), nullable=False),
    sa.Column("signature", sa.String(16), nullable=False),
    # `terminal` or `retryable`: the class a failure of this signature is recorded with.
    sa.Column("classification", sa.String(32), nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("set_by", sa.String(255), nullable=False),
    sa.Column("set_at", UtcDateTime, nullable=False),
    # The group as it was when the rule was set: its class by the table, type and a message.
    sa.Column("error_class", sa.String(32)),
    sa.Column("error_type", sa.String(255)),
    sa.Column("sample_message", sa.Text),
    # One rule per cause and backfill; the lookup of a failure goes by this key.
    sa.UniqueConstraint("asset", "signature", name="uq_jp_classification_rules_asset"),
    sa.Index("ix_jp_classification_rules_location", "location", "signature"),
)

# A paused backfill (`jobs-platform backfill pause`): one row while it is paused, deleted on
# resume. The attempt gate reads it on every launch path (`steering.pauses`).
backfill_pauses = sa.Table(
    "jp_backfill_pauses",
    framework_metadata,
    sa.Column("asset", sa.String(255), primary_key=True),
    # The OS user who paused it, as `dead-letter requeue` records its person.
    sa.Column("paused_by", sa.String(255), nullable=False),
    sa.Column("paused_at", UtcDateTime, nullable=False),
    sa.Column("reason", sa.Text),
)

# The partitions a run held back (paused, not ready) without an attempt: the holds sensor
# launches each again once its backfill is resumed or its input is ready, then forgets it
# (`steering.holds`). One row per partition: a later run holding it again updates it.
backfill_holds = sa.Table(
    "jp_backfill_holds",
    framework_metadata,
    sa.Column("asset", sa.String(255), primary_key=True),
    sa.Column("partition", sa.String(255), primary_key=True),
    # `steering.holds.HoldReason`: `paused`, `not_ready`.
    sa.Column("reason", sa.String(32), nullable=False),
    # When it was first held for this reason: what `max_wait` is measured from.
    sa.Column("since", UtcDateTime, nullable=False),
    # The last run that held it, and when.
    sa.Column("run_id", sa.String(64)),
    sa.Column("held_at", UtcDateTime, nullable=False),
    # When the sensor last asked whether its input is ready (null: never).
    sa.Column("checked_at", UtcDateTime),
    # When it was reported as not ready past its `max_wait` (once; null: not yet).
    sa.Column("reported_at", UtcDateTime),
    # The run key of the run the sensor requested for it, and when (null: none yet).
    sa.Column("launch_key", sa.String(255)),
    sa.Column("launched_at", UtcDateTime),
    # The sensor walks the held partitions of each asset by reason, oldest-checked first.
    sa.Index("ix_jp_backfill_holds_reason", "reason", "asset", "checked_at"),
)


def _delivery_ledger(name: str, alerted: str) -> sa.Table:
    """A ledger of deliveries: one row per alerted thing (`alerted`, its id) and sink."""
    return sa.Table(
        name,
        framework_metadata,
        sa.Column(alerted, sa.BigInteger, primary_key=True),
        sa.Column("sink", sa.String(64), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("tries", sa.Integer, nullable=False),
        sa.Column("last_error", sa.Text),
        sa.Column("updated_at", UtcDateTime, nullable=False),
        # When a failed delivery may be tried again: a failing sink backs off per entry
        # across ticks instead of within one. Null until a send fails.
        sa.Column("next_try_at", UtcDateTime),
    )


# The deliveries of quarantine alerts, one row per dead-letter entry and sink.
alert_ledger = _delivery_ledger("jp_alert_ledger", "entry_id")

# Alerts about a backfill as a whole (a circuit opened, a partition not ready past its
# wait), each raised once (`alerts.notices.raise_notice`).
alert_notices = sa.Table(
    "jp_alert_notices",
    framework_metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("asset", sa.String(255), nullable=False),
    sa.Column("key", sa.String(255), nullable=False),
    sa.Column("summary", sa.Text, nullable=False),
    sa.Column("details", sa.Text, nullable=False),  # a JSON object of strings, ints and nulls
    sa.Column("raised_at", UtcDateTime, nullable=False),
    # Raised once each: a repeat of the same (kind, asset, key) inserts nothing.
    sa.UniqueConstraint("kind", "asset", "key", name="uq_jp_alert_notices_kind_asset_key"),
    # The dead-letter sensor delivers the recent ones (`alerts.notices.due_notices`).
    sa.Index("ix_jp_alert_notices_raised_at", "raised_at"),
)

# The deliveries of notices, one row per notice and sink: `jp_alert_ledger`'s columns,
# keyed by the notice instead of the quarantine entry.
notice_ledger = _delivery_ledger("jp_notice_ledger", "notice_id")


# The circuit breaker per cause (`steering.circuits`): one row per backfill and failure
# signature (`dead_letter.signature`), open while `opened_at` is set and `closed_at` is not.
# The decision lives here, not in a process, so every host and launch path obeys it.
circuits = sa.Table(
    "jp_circuits",
    framework_metadata,
    sa.Column("asset", sa.String(255), primary_key=True),
    sa.Column("signature", sa.String(16), primary_key=True),
    sa.Column("error_class", sa.String(32), nullable=False),
    sa.Column("error_type", sa.String(255)),
    sa.Column("last_error", sa.Text),
    sa.Column("opened_at", UtcDateTime),
    sa.Column("closed_at", UtcDateTime),
    # How many distinct partitions failed with the signature inside the window when it opened.
    sa.Column("partitions", sa.Integer, nullable=False, default=0),
    sa.Column("times_opened", sa.Integer, nullable=False, default=0),
    # The one partition allowed to try while open, by the lease token it tries under.
    sa.Column("probe_partition", sa.String(255)),
    sa.Column("probe_token", sa.BigInteger),
    sa.Column("probe_started_at", UtcDateTime),
    sa.Column("next_probe_at", UtcDateTime),
    sa.Column("probes_failed", sa.Integer, nullable=False, default=0),
    sa.Column("snoozes", sa.Integer, nullable=False, default=0),
    # Set once the opening (closing) was announced: each is alerted once.
    sa.Column("open_alerted_at", UtcDateTime),
    sa.Column("close_alerted_at", UtcDateTime),
)

# Every retryable, crash or unknown failure, by signature: what the breaker counts, and the
# failures it forgives (`forgiven`: not counted against the partition's budget, because the
# backfill's circuit for that cause was open, or opened on them).
circuit_failures = sa.Table(
    "jp_circuit_failures",
    framework_metadata,
    sa.Column("attempt_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("asset", sa.String(255), nullable=False),
    sa.Column("partition", sa.String(255), nullable=False),
    sa.Column("signature", sa.String(16), nullable=False),
    sa.Column("failed_at", UtcDateTime, nullable=False),
    sa.Column("forgiven", sa.Boolean, nullable=False, default=False),
    sa.Index("ix_jp_circuit_failures_signature", "asset", "signature", "failed_at"),
)


# The values of `jp_outbox.status`: the outbox moves requests between them
# (`outbox.queue`), and `store.outbox_backlog` counts the requests by them.
class OutboxStatus(enum.StrEnum):
    """Where a backfill request stands."""

    PENDING = "pending"
    """`request_backfill` wrote it; it commits (or vanishes) with the caller's transaction."""
    CLAIMED = "claimed"
    """A sensor tick took it (`claim_pending`) and requested its runs; every later tick takes
    it again (`reclaim_unlaunched`) and requests the runs Dagster does not have yet."""
    LAUNCHED = "launched"
    """A tick found every run of the request in the Dagster instance (`mark_launched`); final."""
    REJECTED = "rejected"
    """The sensor found it invalid (`mark_rejected`, reason in `error`); final, never retried."""


# Backfill requests written by application code in its own transaction (jobs_platform.outbox).
outbox = sa.Table(
    "jp_outbox",
    framework_metadata,
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


# Any constant works; it only has to be the same for every process creating tables.
_CREATE_TABLES_LOCK_ID = 7_415_902_311


def create_user_tables(engine: sa.Engine, *tables: sa.Table) -> list[sa.Table]:
    """Create a backfill's target tables when missing: a deploy step, like `db upgrade`.

    A backfill's tables are the user's: create them with your own migrations, or call this
    once at deploy time. It never alters a table that exists. The framework's own tables
    are not created here; `jobs-platform db upgrade` migrates them. Safe when many
    processes start at once: on PostgreSQL a transaction-scoped advisory lock serialises
    the creators (concurrent CREATE TABLE races on the catalog); SQLite's BEGIN IMMEDIATE
    already does. Returns the tables it created (a table referenced by a foreign key
    comes before the tables referencing it).
    """
    created = []
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(
                sa.text("SELECT pg_advisory_xact_lock(:lock_id)"),
                {"lock_id": _CREATE_TABLES_LOCK_ID},
            )
        for table in in_creation_order(tables):
            # Looked up under the lock, so that of many concurrent creators only the one
            # that created a table reports it.
            if not sa.inspect(connection).has_table(table.name, schema=table.schema):
                table.create(connection)
                created.append(table)
    return created


def in_creation_order(tables: Iterable[sa.Table]) -> list[sa.Table]:
    """Each table once, by name, a table referenced by a foreign key before those that
    reference it: the same DDL, in the same order, every time."""
    by_name: dict[str, sa.Table] = {}
    for table in tables:
        by_name.setdefault(table.fullname, table)
    return sa.schema.sort_tables([by_name[name] for name in sorted(by_name)])
