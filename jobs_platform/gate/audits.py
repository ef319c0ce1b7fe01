"""Partition audits: SQL checks over a partition's staged rows, run before it is published.

`audits=[...]` on a backfill (`from jobs_platform import audits`):

    audits=[
        audits.not_null("amount"),
        audits.unique(["order_id", "line"]),
        audits.accepted_values("currency", ["EUR", "USD"]),
        audits.row_count(1, 50_000, blocking=False),
        audits.sql("negative_amounts", "SELECT id, amount FROM staged WHERE amount < 0"),
    ]

Each audit finds the offending rows among the rows the publish would write (`staged`,
the last row of each key). A blocking audit (the default) that finds any refuses the
partition, as a broken `expect=` contract does; a non-blocking one is recorded and the
partition is published. `sql` takes a query of the user's own code, never input: the
staged rows are a common table expression named `staged`, so the query names no table
of the framework's and nothing is formatted into it. Its `:name` parameters are bound
from `params`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from jobs_platform.gate.diff import plain

if TYPE_CHECKING:
    from jobs_platform.gate.stage import PartitionStage

__all__ = [
    "Audit",
    "AuditResult",
    "accepted_values",
    "evaluate_audits",
    "not_null",
    "row_count",
    "sql",
    "unique",
]

SAMPLE_ROWS = 5  # offending rows kept per audit: enough to see the fault
STAGED = "staged"  # the name a `sql` audit reads the staged rows by
_NAME = re.compile(r"^[A-Za-z0-9_]+$")  # an asset check's name, as Dagster takes it

OffendingRows = Callable[[sa.CTE], sa.Select[Any]]


@dataclass(frozen=True)
class Audit:
    """One check over a partition's staged rows, built by `not_null`, `unique`, … below."""

    name: str
    description: str
    offending_rows: OffendingRows
    blocking: bool = True
    # row_count's bounds: a count of the staged rows, not rows that offend.
    row_bounds: tuple[int | None, int | None] | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(
                f"audit name {self.name!r} must be letters, digits and underscores (it names "
                "the backfill's asset check)"
            )


@dataclass(frozen=True)
class AuditResult:
    """What one audit found on one partition's staged rows."""

    name: str
    description: str
    blocking: bool
    passed: bool
    offending: int  # rows that offend (row_count: the rows staged)
    sample: tuple[dict[str, Any], ...] = ()

    @property
    def refuses(self) -> bool:
        """Whether it stops the partition's publish."""
        return self.blocking and not self.passed

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "blocking": self.blocking,
            "passed": self.passed,
            "offending": self.offending,
            "sample": list(self.sample),
        }


def not_null(column: str, *, blocking: bool = True) -> Audit:
    """No staged row has NULL in `column`."""
    return Audit(
        f"not_null_{column}",
        f"{column} is never NULL",
        lambda staged: sa.select(staged).where(staged.c[column].is_(None)),
        blocking,
    )


def unique(columns: str | Sequence[str], *, blocking: bool = True) -> Audit:
    """No two staged rows share the values of `columns`."""
    names = [columns] if isinstance(columns, str) else list(columns)
    if not names:
        raise ValueError("unique() needs at least one column")

    def offending(staged: sa.CTE) -> sa.Select[Any]:
        grouped = [staged.c[name] for name in names]
        return (
            sa.select(*grouped, sa.func.count().label("rows"))
            .group_by(*grouped)
            .having(sa.func.count() > 1)
        )

    return Audit(
        f"unique_{'_'.join(names)}", f"({', '.join(names)}) is unique", offending, blocking
    )


def accepted_values(column: str, values: Sequence[Any], *, blocking: bool = True) -> Audit:
    """Every staged row's `column` is one of `values` (NULL is left to `not_null`)."""
    accepted = list(values)
    if not accepted:
        raise ValueError("accepted_values() needs at least one value")
    return Audit(
        f"accepted_values_{column}",
        f"{column} is one of {accepted!r}",
        lambda staged: sa.select(staged).where(
            staged.c[column].is_not(None), staged.c[column].not_in(accepted)
        ),
        blocking,
    )


def row_count(lo: int | None = None, hi: int | None = None, *, blocking: bool = True) -> Audit:
    """The partition stages between `lo` and `hi` rows (either may be left out)."""
    if lo is None and hi is None:
        raise ValueError("row_count() needs lo, hi or both")
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"row_count() needs lo <= hi, got ({lo}, {hi})")
    return Audit(
        "row_count",
        f"between {lo if lo is not None else '-'} and {hi if hi is not None else '-'} rows",
        lambda staged: sa.select(sa.func.count()).select_from(staged),
        blocking,
        row_bounds=(lo, hi),
    )


def sql(
    name: str, query: str, *, params: Mapping[str, Any] | None = None, blocking: bool = True
) -> Audit:
    """The rows `query` returns offend; it reads the staged rows as `staged`.

    Example: `sql("negative_amounts", "SELECT id, amount FROM staged WHERE amount < 0")`.
    """
    bound = dict(params or {})

    def offending(staged: sa.CTE) -> sa.Select[Any]:
        rows = sa.text(query).bindparams(**bound).columns().subquery("offending")
        return sa.select(sa.literal_column("*")).select_from(rows).add_cte(staged)

    return Audit(name, query.strip(), offending, blocking)


def evaluate_audits(
    connection: sa.Connection, audits: Sequence[Audit], stage: PartitionStage
) -> list[AuditResult]:
    """Run each audit over `stage`'s rows (what the publish would write); writes nothing."""
    staged = stage.latest().cte(STAGED)
    return [_evaluate(connection, audit, staged) for audit in audits]


def _evaluate(connection: sa.Connection, audit: Audit, staged: sa.CTE) -> AuditResult:
    query = audit.offending_rows(staged)
    if audit.row_bounds is not None:
        rows: int = connection.execute(query).scalar_one()
        lo, hi = audit.row_bounds
        passed = (lo is None or rows >= lo) and (hi is None or rows <= hi)
        return AuditResult(
            audit.name, audit.description, audit.blocking, passed, rows, ({"rows": rows},)
        )
    found = query.subquery("found")
    count: int = connection.execute(sa.select(sa.func.count()).select_from(found)).scalar_one()
    sample = tuple(
        {name: plain(value) for name, value in row._mapping.items()}
        for row in connection.execute(sa.select(found).limit(SAMPLE_ROWS))
    )
    return AuditResult(audit.name, audit.description, audit.blocking, count == 0, count, sample)
