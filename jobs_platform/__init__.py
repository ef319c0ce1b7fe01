"""jobs_platform: idempotent, retry-safe historical backfills on Dagster.

What a code location imports: everything else in the package may change.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_BACKFILL_POLICY",
    "BackfillSpec",
    "Classification",
    "InputValidationError",
    "JobsPlatformResource",
    "PartitionInput",
    "RetryableError",
    "Settings",
    "TerminalError",
    "UtcDateTime",
    "backfill_asset",
    "classify",
    "create_user_tables",
    "platform_definitions",
    "request_backfill",
]

# Where each public name lives. Every name is imported on first use: the CLI, the pure
# core (store, engine, errors) and each Dagster process then load only what they use
# (pandas and Dagster cost seconds of CPU to import, and `jobs-platform dead-letter list`
# needs neither).
_HOMES = {
    "BackfillSpec": "jobs_platform.engine.spec",
    "PartitionInput": "jobs_platform.engine.spec",
    "Classification": "jobs_platform.errors",
    "InputValidationError": "jobs_platform.errors",
    "RetryableError": "jobs_platform.errors",
    "TerminalError": "jobs_platform.errors",
    "classify": "jobs_platform.errors",
    "Settings": "jobs_platform.settings",
    "UtcDateTime": "jobs_platform.store.schema",
    "create_user_tables": "jobs_platform.store.schema",
    "request_backfill": "jobs_platform.outbox",
    "DEFAULT_BACKFILL_POLICY": "jobs_platform.orchestration.backfill_asset",
    "backfill_asset": "jobs_platform.orchestration.backfill_asset",
    "JobsPlatformResource": "jobs_platform.orchestration.resources",
    "platform_definitions": "jobs_platform.orchestration.platform",
}


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'jobs_platform' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
