"""The dead letter read by cause: open entries grouped by their signature.

A dead letter of thousands of entries is read a cause at a time (`dead-letter groups`, the
`platform_health` table, `jobs_platform_quarantine_groups`). Two set-based queries, served
by `ix_jp_quarantine_signature`: the counts per cause and asset, then at most
`SAMPLES_PER_GROUP` sample entries per cause; never a scan of the entries in Python. Each
cause also carries its taught rule (`dead_letter.rules`) or, without one, the hint its
history gives (`dead_letter.hints`): two more grouped queries and one of the rules.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from jobs_platform.dead_letter.hints import Hint, cause_hints
from jobs_platform.dead_letter.rules import Rule, list_rules
from jobs_platform.store.rows import TableRow
from jobs_platform.store.schema import EntryStatus, quarantine

SAMPLES_PER_GROUP = 5
# Open entries: the dead letter's own (quarantined) and those a person released whose new
# run has not succeeded yet (requeued).
OPEN_ENTRY_STATUSES = (str(EntryStatus.QUARANTINED), str(EntryStatus.REQUEUED))
# A cause as the entries record it: signature, error class, error type.
Cause = tuple[str | None, str, str | None]


@dataclass(frozen=True)
class SignatureGroup:
    """One cause of the dead letter: its open entries, counted per asset."""

    signature: str | None  # None only for an entry no migration signed (never expected)
    error_class: str
    error_type: str | None
    count: int
    assets: Mapping[str, int]  # asset -> open entries, largest first
    first_failed_at: dt.datetime | None
    last_failed_at: dt.datetime | None
    samples: tuple[tuple[str, str], ...]  # (asset, partition), the latest failures first
    sample_message: str | None  # the latest failure's message, as recorded
    # What its history suggests teaching (`dead_letter.hints`); None once a rule covers it.
    hint: Hint | None = None
    rule: Rule | None = None  # the taught rule of the cause in the group's backfills

    @property
    def sample_partitions(self) -> list[str]:
        return [partition for _asset, partition in self.samples]


def signature_groups(
    connection: sa.Connection,
    *,
    asset: str | None = None,
    assets: Sequence[str] | None = None,
) -> list[SignatureGroup]:
    """One group per signature over the open (quarantined) entries, largest first.

    `asset` narrows to one backfill, `assets` to a code location's; without either, every
    entry of the warehouse. Ties: the most recent failure first, then the signature.
    """
    counts = _counts_by_cause_and_asset(connection, asset, assets)
    samples = _samples_by_cause(connection, asset, assets)
    hints = cause_hints(connection, asset=asset, assets=assets)
    groups: dict[Cause, dict[str, Any]] = {}
    for row in counts:
        cause = (row.signature, row.error_class, row.error_type)
        group = groups.setdefault(cause, {"count": 0, "assets": {}, "first": None, "last": None})
        group["count"] += row.entries
        group["assets"][row.asset] = row.entries
        group["first"] = _earliest(group["first"], row.first_failed_at)
        group["last"] = _latest(group["last"], row.last_failed_at)
    taught = list_rules(connection, signatures={cause[0] for cause in groups if cause[0]})
    result = []
    for cause, group in groups.items():
        sampled = samples.get(cause, [])
        rule = _rule_of(taught, cause[0], group["assets"])
        result.append(
            SignatureGroup(
                signature=cause[0],
                error_class=cause[1],
                error_type=cause[2],
                count=group["count"],
                assets=dict(sorted(group["assets"].items(), key=lambda item: (-item[1], item[0]))),
                first_failed_at=group["first"],
                last_failed_at=group["last"],
                samples=tuple((row.asset, row.partition) for row in sampled),
                sample_message=sampled[0].last_error if sampled else None,
                hint=None if rule is not None else hints.get(cause),
                rule=rule,
            )
        )
    never = dt.datetime.min.replace(tzinfo=dt.UTC)
    result.sort(key=lambda g: (g.signature or "", g.error_class, g.error_type or ""))
    result.sort(key=lambda g: (g.count, g.last_failed_at or never), reverse=True)
    return result


def _rule_of(
    rules: Sequence[Rule], signature: str | None, assets: Mapping[str, int]
) -> Rule | None:
    """The rule of `signature` set in the location of one of the group's backfills."""
    return next(
        (rule for rule in rules if rule.signature == signature and set(rule.assets) & set(assets)),
        None,
    )


def _open(asset: str | None, assets: Sequence[str] | None) -> list[sa.ColumnElement[bool]]:
    conditions = [quarantine.c.status == EntryStatus.QUARANTINED]
    if asset is not None:
        conditions.append(quarantine.c.asset == asset)
    if assets is not None:
        conditions.append(quarantine.c.asset.in_(list(assets)))
    return conditions


def _counts_by_cause_and_asset(
    connection: sa.Connection, asset: str | None, assets: Sequence[str] | None
) -> list[TableRow]:
    # Class and type are part of the signature's hash: grouping by them too costs nothing
    # and keeps an unsigned entry (NULL signature) apart from other causes.
    cause = (quarantine.c.signature, quarantine.c.error_class, quarantine.c.error_type)
    return list(
        connection.execute(
            sa.select(
                *cause,
                quarantine.c.asset,
                sa.func.count().label("entries"),
                sa.func.min(quarantine.c.first_failed_at).label("first_failed_at"),
                sa.func.max(quarantine.c.last_failed_at).label("last_failed_at"),
            )
            .where(*_open(asset, assets))
            .group_by(*cause, quarantine.c.asset)
        )
    )


def _samples_by_cause(
    connection: sa.Connection, asset: str | None, assets: Sequence[str] | None
) -> dict[tuple[str | None, str, str | None], list[TableRow]]:
    """Up to SAMPLES_PER_GROUP entries per cause, the latest failures first: one query,
    numbered per cause by a window function (PostgreSQL, SQLite >= 3.25)."""
    cause = (quarantine.c.signature, quarantine.c.error_class, quarantine.c.error_type)
    rank = (
        sa.func.row_number()
        .over(
            partition_by=cause,
            order_by=(quarantine.c.last_failed_at.desc().nulls_last(), quarantine.c.id.desc()),
        )
        .label("rank")
    )
    numbered = (
        sa.select(*cause, quarantine.c.asset, quarantine.c.partition, quarantine.c.last_error, rank)
        .where(*_open(asset, assets))
        .subquery("numbered")
    )
    rows = connection.execute(
        sa.select(numbered).where(numbered.c.rank <= SAMPLES_PER_GROUP).order_by(numbered.c.rank)
    )
    samples: dict[Cause, list[TableRow]] = {}
    for row in rows:
        samples.setdefault((row.signature, row.error_class, row.error_type), []).append(row)
    return samples


def open_signature_count(connection: sa.Connection) -> int:
    """How many causes the open entries of the warehouse have: the metric
    `jobs_platform_quarantine_groups`."""
    causes = (
        sa.select(quarantine.c.signature, quarantine.c.error_class, quarantine.c.error_type)
        .where(*_open(None, None))
        .distinct()
        .subquery("causes")
    )
    return int(connection.execute(sa.select(sa.func.count()).select_from(causes)).scalar_one())


def open_entries_by_asset(connection: sa.Connection) -> dict[str, int]:
    """Open entries per asset, for `/metrics` (`jobs_platform_quarantine_entries`)."""
    return dict(
        connection.execute(
            sa.select(quarantine.c.asset, sa.func.count())
            .where(quarantine.c.status.in_(OPEN_ENTRY_STATUSES))
            .group_by(quarantine.c.asset)
        ).all()
    )


def _earliest(a: dt.datetime | None, b: dt.datetime | None) -> dt.datetime | None:
    return b if a is None else a if b is None else min(a, b)


def _latest(a: dt.datetime | None, b: dt.datetime | None) -> dt.datetime | None:
    return b if a is None else a if b is None else max(a, b)
