"""jobs_platform: idempotent, retry-safe historical backfills on Dagster."""

from __future__ import annotations

import importlib

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
_WHERE = {
    "BackfillSpec": "jobs_platform.engine.spec",
    "PartitionInput": "jobs_platform.engine.spec",
    "Classification": "jobs_platform.errors",
    "RetryableError": "jobs_platform.errors",
    "TerminalError": "jobs_platform.errors",
    "classify": "jobs_platform.errors",
    "request_backfill": "jobs_platform.outbox",
    "backfill_asset": "jobs_platform.orchestration.backfill_asset",
}


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'jobs_platform' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
