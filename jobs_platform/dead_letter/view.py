"""How the dead letter shows an entry and a cause: JSON-ready values, a table.

Plain Python over a `jp_quarantine` row or a `dead_letter.triage.SignatureGroup`, shared by
`jobs-platform dead-letter`, the `platform_health` asset and the benches that time them;
no Dagster, so the command answers without importing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobs_platform.dead_letter.rules import Rule
from jobs_platform.dead_letter.triage import SignatureGroup
from jobs_platform.store.rows import TableRow
from jobs_platform.suggested_commands import suggested_command

LIST_FIELDS = (
    "asset", "partition", "status", "attempts", "error_class", "last_error",
    "first_failed_at", "last_failed_at", "signature",
)  # fmt: skip
GROUP_FIELDS = (
    "signature", "error_class", "error_type", "count", "assets", "first_failed_at",
    "last_failed_at", "sample_partitions", "sample_message", "hint",
)  # fmt: skip
RULE_FIELDS = (
    "signature", "classification", "reason", "set_by", "set_at", "location", "assets",
    "error_class", "error_type", "sample_message",
)  # fmt: skip


def entry_summary(row: TableRow) -> dict[str, Any]:
    """The entry's listed fields, times as ISO 8601 text."""
    return {name: plain(getattr(row, name)) for name in LIST_FIELDS}


def plain(value: Any) -> Any:
    """A date or time as ISO 8601 text; any other value as it is."""
    return value.isoformat() if hasattr(value, "isoformat") else value


def group_summary(group: SignatureGroup, module: str | None = None) -> dict[str, Any]:
    """A cause of the dead letter as `dead-letter groups --json` shows it: with its hint,
    the command that teaches it (`teach`) and its rule, each null when there is none."""
    summary = {name: plain(getattr(group, name)) for name in GROUP_FIELDS}
    summary["assets"] = dict(group.assets)
    summary["teach"] = group_teach_command(group, module)
    summary["rule"] = None if group.rule is None else rule_summary(group.rule)
    return summary


def rule_summary(rule: Rule) -> dict[str, Any]:
    """A taught rule as `dead-letter rules --json` shows it, times as ISO 8601 text."""
    summary = {name: plain(getattr(rule, name)) for name in RULE_FIELDS}
    summary["assets"] = list(rule.assets)
    return summary


def group_teach_command(group: SignatureGroup, module: str | None) -> str | None:
    """The command that teaches the class the group's hint suggests; None without a hint."""
    if group.hint is None or group.signature is None:
        return None
    return suggested_command(
        "dead-letter", "classify", *_location(module), "--group", group.signature,
        str(group.hint.teaches),
    )  # fmt: skip


def group_requeue_command(group: SignatureGroup, module: str | None) -> str:
    """The command that requeues every open entry of the cause, in the code location."""
    return suggested_command(
        "dead-letter", "requeue", *_location(module), "--group", group.signature or ""
    )


def _location(module: str | None) -> list[str]:
    # A run whose code location Dagster does not name suggests commands without `-m`.
    return ["-m", module] if module else []


def groups_markdown(
    groups: Sequence[SignatureGroup], module: str | None, *, limit: int = 20
) -> str:
    """The causes as a markdown table for the UI: the largest `limit`, each with its
    requeue command (cells are one line: pipes and newlines would break the table)."""
    if not groups:
        return "The dead letter is empty: no quarantined partitions."
    lines = [
        "| entries | signature | class | type | assets | last failed | sample | requeue | hint |",
        "|---:|---|---|---|---|---|---|---|---|",
    ]
    for group in groups[:limit]:
        assets = ", ".join(f"{asset} {count}" for asset, count in group.assets.items())
        cells = (
            str(group.count),
            f"`{group.signature}`",
            group.error_class,
            group.error_type or "",
            assets,
            plain(group.last_failed_at) or "",
            one_line(group.sample_message, 160),
            f"`{group_requeue_command(group, module)}`",
            _hint_cell(group, module),
        )
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    hidden = len(groups) - limit
    if hidden > 0:
        every = suggested_command("dead-letter", "groups", *_location(module))
        lines.append(f"\n{hidden} smaller cause(s) not shown here: `{every}`")
    return "\n".join(lines)


def _hint_cell(group: SignatureGroup, module: str | None) -> str:
    if group.rule is not None:
        return f"taught {group.rule.classification} by {group.rule.set_by}"
    teach = group_teach_command(group, module)
    return f"{group.hint}: `{teach}`" if teach is not None else ""


def one_line(text: str | None, limit: int = 300) -> str:
    """`text` on one line, cut to `limit` characters."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|")
