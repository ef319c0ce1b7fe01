"""jobs_platform: idempotent, retry-safe historical backfills on Dagster."""

from jobs_platform.engine.spec import BackfillSpec, PartitionInput
from jobs_platform.errors import Classification, RetryableError, TerminalError, classify
from jobs_platform.outbox import request_backfill

__all__ = [
    "BackfillSpec",
    "Classification",
    "PartitionInput",
    "RetryableError",
    "TerminalError",
    "backfill_asset",
    "classify",
    "request_backfill",
]


def __getattr__(name: str):
    # Imported on first use, so that the pure core (store, engine, errors) never loads
    # Dagster: importing jobs_platform.store must stay cheap and Dagster-free.
    if name == "backfill_asset":
        from jobs_platform.orchestration.backfill_asset import backfill_asset

        return backfill_asset
    raise AttributeError(f"module 'jobs_platform' has no attribute {name!r}")
