"""The change a gated backfill's launch would make to a partition, for `plan`.

Under `expect=ChangeContract(...)` or `audits=` an attempt stages its partition, then its
finalize diffs the stage against the table (`gate.diff.change_diff`), judges the diff by
the contract and the staged rows by the audits, and publishes or refuses
(`engine.gated_finalize`). `plan` does the same up to the verdict, and publishes nothing:
it reads the partition's input, stages it in a stage of its own, asks the same functions,
and rolls the whole transaction back. The table, the attempt's own stage and the
checkpoints are never touched.

Reading a partition's input is the expensive part of a launch, so `plan` asks for as many
partitions as `DIFF_BUDGET_SECONDS` allows, in the range's order, and says which it did
not reach.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import sqlalchemy as sa

from jobs_platform.gate.audits import Audit, evaluate_audits
from jobs_platform.gate.contract import ChangeContract
from jobs_platform.gate.diff import ChangeDiff, GatedBackfill, change_diff
from jobs_platform.gate.stage import PartitionStage, partition_stage
from jobs_platform.writer.upsert import last_row_per_key

if TYPE_CHECKING:
    import pandas as pd

DIFF_BUDGET_SECONDS = 30.0
"""How long one plan reads inputs for, in all, to diff the partitions it would run: a
gated day of a million rows takes seconds to read and stage."""

# The stage's name is a hash of this and the partition: never the attempt's own stage.
_PLAN_STAGE = "plan\x1f"


class Gated(GatedBackfill, Protocol):
    """What the plan reads of a gated backfill (an `engine.spec.BackfillSpec` is one)."""

    @property
    def asset(self) -> str: ...
    @property
    def expect(self) -> ChangeContract | None: ...
    @property
    def audits(self) -> Sequence[Audit]: ...


@dataclass(frozen=True)
class ExpectedChange:
    """What publishing a partition would do, and whether the gate would refuse it."""

    diff: ChangeDiff
    broken: tuple[str, ...]  # the contract's bounds it breaks, and the blocking audits failed
    approved: bool  # a person accepted exactly this diff (`dead-letter accept-change`)

    @property
    def refused(self) -> bool:
        """Whether the gate's finalize would refuse it (and quarantine the partition)."""
        return bool(self.broken) and not self.approved

    def as_dict(self) -> dict[str, object]:
        diff = self.diff
        return {
            "inserted": diff.inserted,
            "updated": diff.updated,
            "unchanged": diff.unchanged,
            "swept": diff.swept,
            "rows_before": diff.rows_before,
            "refused": self.refused,
            "broken": list(self.broken),
        }


def expected_change(
    connection: sa.Connection,
    spec: Gated,
    partition: str,
    chunks: Iterable[pd.DataFrame],
    approved: Callable[[sa.Connection, ChangeDiff], bool] = lambda connection, diff: False,
) -> ExpectedChange:
    """Stage `chunks` (the partition's input, as its reader yields it), diff and judge it as
    the gate's finalize does, and roll everything back. `approved` says whether a person
    accepted a diff (`ChangeReviews.approval_of`)."""
    transaction = connection.begin()
    try:
        stage = _plan_stage(spec, partition)
        stage.prepare(connection)
        for index, chunk in enumerate(chunks):
            # The last row of a key wins within a chunk, as the attempt's chunk loop has it.
            stage.write(connection, last_row_per_key(chunk, spec.key), index)
        stage.analyze(connection)
        diff = change_diff(connection, spec, partition, stage)
        bounds = spec.expect.broken_bounds(diff) if spec.expect is not None else []
        failed = [
            f"audit {audit.name}: {audit.offending} offending row(s)"
            for audit in evaluate_audits(connection, spec.audits, stage)
            if audit.refuses
        ]
        # An approval is of the diff; a blocking audit's failure is fixed in the data.
        accepted = bool(bounds) and not failed and approved(connection, diff)
        broken = [*bounds, *failed]
        return ExpectedChange(diff, tuple(broken), accepted)
    finally:
        transaction.rollback()  # the plan writes nothing: not even its own stage


def _plan_stage(spec: Gated, partition: str) -> PartitionStage:
    return partition_stage(spec.table, spec.key, f"{_PLAN_STAGE}{spec.asset}", partition)
