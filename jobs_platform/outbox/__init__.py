"""The transactional outbox: request backfills in the same transaction as a state change.

Plain SQLAlchemy, no Dagster: `request_backfill` is called from application code. The
Dagster side that drains it is `jobs_platform.outbox.sensor`, over the claims of
`jobs_platform.outbox.queue`.
"""

from jobs_platform.outbox.payload import (
    KNOWN_SCHEMA_VERSIONS,
    MAX_PARTITIONS_PER_REQUEST,
    OUTBOX_SCHEMA_VERSION,
    InvalidRequest,
    parse_partitions,
)
from jobs_platform.outbox.queue import OutboxNotInstalled
from jobs_platform.outbox.store import request_backfill
from jobs_platform.store.schema import OutboxStatus

__all__ = [
    "KNOWN_SCHEMA_VERSIONS",
    "MAX_PARTITIONS_PER_REQUEST",
    "OUTBOX_SCHEMA_VERSION",
    "InvalidRequest",
    "OutboxNotInstalled",
    "OutboxStatus",
    "parse_partitions",
    "request_backfill",
]
