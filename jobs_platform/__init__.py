"""jobs_platform: idempotent, retry-safe historical backfills on Dagster."""

from jobs_platform.engine.spec import BackfillSpec, PartitionInput
from jobs_platform.errors import Classification, RetryableError, TerminalError, classify
from jobs_platform.orchestration.backfill_asset import backfill_asset

__all__ = [
    "BackfillSpec",
    "Classification",
    "PartitionInput",
    "RetryableError",
    "TerminalError",
    "backfill_asset",
    "classify",
]
