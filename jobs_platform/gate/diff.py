"""What publishing a partition's stage would do to its table, counted before it does.

`change_diff` compares the staged rows (`PartitionStage.latest`) with the backfill's
table: a staged key absent from the table is `inserted`, one whose values differ (IS
DISTINCT FROM, so NULLs compare) is `updated`, the rest `unchanged`; a row of the
partition (its `partition_scope`) whose key is not staged is `swept`. A few keys of each
kind, the first by key order, are kept as a sample. The same function serves the gate's
finalize and a `plan` made before launch.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa

if TYPE_CHECKING:
    from jobs_platform.gate.stage import PartitionStage

__all__ = ["SAMPLE_KEYS", "ChangeDiff", "change_diff"]

SAMPLE_KEYS = 10  # keys kept per kind: enough to look one up, never a whole partition
KINDS = ("inserted", "updated", "swept")


class GatedBackfill(Protocol):
    """What the diff reads of a backfill (an `engine.spec.BackfillSpec` is one)."""

    @property
    def table(self) -> sa.Table: ...
    @property
    def key(self) -> tuple[str, ...]: ...
    @property
    def partition_scope(self) -> Callable[[sa.Table, str], sa.ColumnElement[bool]]: ...


@dataclass(frozen=True)
class ChangeDiff:
    """The effect a partition's publish would have: counts, and a sample of keys per kind.

    `rows_before` is the partition's row count in the table before; `samples` maps
    `inserted`, `updated` and `swept` to a few keys each, as `{column: value}`.
    """

    rows_before: int
    inserted: int
    updated: int
    unchanged: int
    swept: int
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def rows_after(self) -> int:
        """The partition's row count once published."""
        return self.rows_before - self.swept + self.inserted

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "rows_after": self.rows_after}

    def digest(self) -> str:
        """A stable hash of the diff: an approval holds for this diff and no other."""
        text = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def summary(self) -> str:
        """One line: `inserted 0, updated 400, unchanged 600, swept 0 (of 1000 rows)`."""
        return (
            f"inserted {self.inserted}, updated {self.updated}, unchanged {self.unchanged}, "
            f"swept {self.swept} (of {self.rows_before} rows)"
        )


def change_diff(
    connection: sa.Connection, spec: GatedBackfill, partition: str, stage: PartitionStage
) -> ChangeDiff:
    """The diff of `stage` against `spec.table`'s rows of `partition`; writes nothing."""
    target, key = spec.table, spec.key
    staged = stage.latest().subquery("staged")
    same_key = sa.and_(*[target.c[name] == staged.c[name] for name in key])
    absent = target.c[key[0]].is_(None)  # key columns are never NULL in the table
    values = [name for name in stage.columns if name not in key]
    differs = sa.or_(sa.false(), *[target.c[n].is_distinct_from(staged.c[n]) for n in values])
    changed = sa.and_(~absent, differs)
    inserted, updated, staged_rows = connection.execute(
        sa.select(
            sa.func.count().filter(absent), sa.func.count().filter(changed), sa.func.count()
        ).select_from(staged.outerjoin(target, same_key))
    ).one()
    scope = spec.partition_scope(target, partition)
    unstaged = ~sa.exists().where(*[stage.table.c[n] == target.c[n] for n in key])
    # Two counts, not one with a FILTER: a NOT EXISTS in a filter is run once per row,
    # where in WHERE it is one anti-join.
    rows_before = connection.execute(
        sa.select(sa.func.count()).select_from(target).where(scope)
    ).scalar_one()
    swept = connection.execute(
        sa.select(sa.func.count()).select_from(target).where(scope, unstaged)
    ).scalar_one()
    order = [staged.c[name] for name in key]
    samples = {
        "inserted": _keys(
            connection,
            sa.select(*order).select_from(staged.outerjoin(target, same_key)).where(absent),
            key,
        ),
        "updated": _keys(
            connection,
            sa.select(*order).select_from(staged.join(target, same_key)).where(differs),
            key,
        ),
        "swept": _keys(
            connection, sa.select(*[target.c[n] for n in key]).where(scope, unstaged), key
        ),
    }
    return ChangeDiff(
        rows_before=rows_before,
        inserted=inserted,
        updated=updated,
        unchanged=staged_rows - inserted - updated,
        swept=swept,
        samples=samples,
    )


def _keys(
    connection: sa.Connection, query: sa.Select[tuple[Any, ...]], key: tuple[str, ...]
) -> list[dict[str, Any]]:
    columns = query.selected_columns
    rows = connection.execute(query.order_by(*columns).limit(SAMPLE_KEYS))
    return [{name: plain(value) for name, value in zip(key, row, strict=True)} for row in rows]


def plain(value: Any) -> Any:
    """A value as JSON holds it: numbers and text as they are, dates in ISO form."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dt.date | dt.datetime | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return str(value)
