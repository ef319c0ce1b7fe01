"""How the dead letter shows a quarantine entry: its fields as JSON-ready values.

Plain Python over a `jp_quarantine` row, shared by `jobs-platform dead-letter` and the
bench that times its listing; no Dagster, so the command answers without importing it.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

LIST_FIELDS = (
    "asset", "partition", "status", "attempts", "error_class", "last_error",
    "first_failed_at", "last_failed_at",
)  # fmt: skip


def entry_summary(row: sa.Row) -> dict[str, Any]:
    """The entry's listed fields, times as ISO 8601 text."""
    return {name: plain(getattr(row, name)) for name in LIST_FIELDS}


def plain(value: Any) -> Any:
    """A date or time as ISO 8601 text; any other value as it is."""
    return value.isoformat() if hasattr(value, "isoformat") else value
