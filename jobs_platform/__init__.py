"""jobs_platform: idempotent, retry-safe historical backfills on Dagster.

What a code location imports: everything else in the package may change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = [
    "DEFAULT_BACKFILL_POLICY",
    "AlertsResource",
    "ChangeContract",
    "InputValidationError",
    "JobsPlatformResource",
    "PartitionInput",
    "RejectRows",
    "RetryableError",
    "TerminalError",
    "UtcDateTime",
    "audits",
    "backfill_asset",
    "backfill_chains",
    "create_user_tables",
    "platform_definitions",
    "request_backfill",
]

# Where each public name lives. Every name is imported on first use: the CLI, the pure
# core (store, engine, errors) and each Dagster process then load only what they use
# (pandas and Dagster cost seconds of CPU to import, and `jobs-platform dead-letter list`
# needs neither).
_HOMES = {
    "ChangeContract": "jobs_platform.gate.contract",
    "audits": "jobs_platform.gate",
    "PartitionInput": "jobs_platform.engine.spec",
    "RejectRows": "jobs_platform.engine.spec",
    "InputValidationError": "jobs_platform.errors",
    "RetryableError": "jobs_platform.errors",
    "TerminalError": "jobs_platform.errors",
    "UtcDateTime": "jobs_platform.store.schema",
    "create_user_tables": "jobs_platform.store.schema",
    "request_backfill": "jobs_platform.outbox",
    "AlertsResource": "jobs_platform.alerts.resource",
    "DEFAULT_BACKFILL_POLICY": "jobs_platform.orchestration.backfill_asset",
    "backfill_asset": "jobs_platform.orchestration.backfill_asset",
    "backfill_chains": "jobs_platform.orchestration.chains",
    "JobsPlatformResource": "jobs_platform.orchestration.resources",
    "platform_definitions": "jobs_platform.orchestration.platform",
}

# The same names for a type checker, which never runs `__getattr__`: a user's mypy or
# pyright sees each with its real signature (the package ships `py.typed`). Kept equal
# to `_HOMES` by test_public_api.py.
if TYPE_CHECKING:
    from jobs_platform.alerts.resource import AlertsResource
    from jobs_platform.engine.spec import PartitionInput, RejectRows
    from jobs_platform.errors import InputValidationError, RetryableError, TerminalError
    from jobs_platform.gate import audits
    from jobs_platform.gate.contract import ChangeContract
    from jobs_platform.orchestration.backfill_asset import DEFAULT_BACKFILL_POLICY, backfill_asset
    from jobs_platform.orchestration.chains import backfill_chains
    from jobs_platform.orchestration.platform import platform_definitions
    from jobs_platform.orchestration.resources import JobsPlatformResource
    from jobs_platform.outbox import request_backfill
    from jobs_platform.store.schema import UtcDateTime, create_user_tables


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'jobs_platform' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
