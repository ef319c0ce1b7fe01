"""jobs_platform: idempotent, retry-safe historical backfills on Dagster."""

from __future__ import annotations

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


# Every name is imported on first use: the CLI, the pure core (store, engine, errors) and
# each Dagster process then load only what they use (pandas and Dagster cost seconds of
# CPU to import on a loaded machine, and `jobs-platform dead-letter list` needs neither).
def __getattr__(name: str):
    if name in ("BackfillSpec", "PartitionInput"):
        from jobs_platform.engine import spec

        return getattr(spec, name)
    if name in ("Classification", "RetryableError", "TerminalError", "classify"):
        from jobs_platform import errors

        return getattr(errors, name)
    if name == "request_backfill":
        from jobs_platform.outbox import request_backfill

        return request_backfill
    if name == "backfill_asset":
        from jobs_platform.orchestration.backfill_asset import backfill_asset

        return backfill_asset
    raise AttributeError(f"module 'jobs_platform' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
