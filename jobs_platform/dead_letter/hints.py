"""What the dead letter suggests a person teach: a cause that looks permanent or transient.

`dead-letter groups` marks a group with a `hint` when its history contradicts the built-in
table, and names the command that teaches the table otherwise (`dead-letter classify`):

- `looks_permanent`: a `retryable` or `unknown` cause that failed identically on many
  partitions. At least `PERMANENT_AFTER_PARTITIONS` of its open entries spent their whole
  budget (a retryable or unknown failure is quarantined only once the budget is spent),
  and every failed attempt of each entry's episode had the cause's class and type.
  Retrying it again would spend another budget per partition to learn nothing.
- `looks_transient`: a `terminal` cause whose redrives succeeded. At least
  `TRANSIENT_AFTER_REDRIVES` of its entries were released by the redrive because their
  input changed or their cool-down passed, and succeeded since (resolved). A release
  because the code changed does not count: a fix says the code was wrong, not the
  failure transient.

Each is one grouped query over the causes shown, served by the entries' and attempts'
indexes; never a scan of the entries in Python.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import sqlalchemy as sa

from jobs_platform.dead_letter.releases import RequeuedBy
from jobs_platform.errors import Classification
from jobs_platform.store.attempts import AttemptOutcome
from jobs_platform.store.schema import EntryStatus, attempts, quarantine, requeues

# "Many partitions": three budgets spent the same way is a pattern, not a coincidence;
# and it is few enough that the hint comes before the whole backfill has paid.
PERMANENT_AFTER_PARTITIONS = 3
# Two partitions healed by a redrive without a code change: one could be a corrected row.
TRANSIENT_AFTER_REDRIVES = 2
# A cause as the entries record it: signature, error class, error type.
Cause = tuple[str | None, str, str | None]


class Hint(enum.StrEnum):
    """What a group's history suggests about its class."""

    LOOKS_PERMANENT = "looks_permanent"  # retryable/unknown, full budgets failed identically
    LOOKS_TRANSIENT = "looks_transient"  # terminal, yet its redriven entries succeeded

    @property
    def teaches(self) -> Classification:
        """The class the hint suggests a rule give the cause."""
        if self is Hint.LOOKS_PERMANENT:
            return Classification.TERMINAL
        return Classification.RETRYABLE


def cause_hints(
    connection: sa.Connection,
    *,
    asset: str | None = None,
    assets: Sequence[str] | None = None,
) -> dict[Cause, Hint]:
    """The hint of each open cause that has one (narrowed as `triage.signature_groups`)."""
    hints = {cause: Hint.LOOKS_PERMANENT for cause in _permanent(connection, asset, assets)}
    hints.update({cause: Hint.LOOKS_TRANSIENT for cause in _transient(connection, asset, assets)})
    return hints


def _narrowed(asset: str | None, assets: Sequence[str] | None) -> list[sa.ColumnElement[bool]]:
    conditions = []
    if asset is not None:
        conditions.append(quarantine.c.asset == asset)
    if assets is not None:
        conditions.append(quarantine.c.asset.in_(list(assets)))
    return conditions


def _permanent(
    connection: sa.Connection, asset: str | None, assets: Sequence[str] | None
) -> list[Cause]:
    other_failure = (
        sa.select(attempts.c.id)
        .where(
            attempts.c.asset == quarantine.c.asset,
            attempts.c.partition == quarantine.c.partition,
            attempts.c.episode == quarantine.c.episode,
            attempts.c.outcome == AttemptOutcome.FAILED,
            sa.or_(
                attempts.c.error_class.is_distinct_from(quarantine.c.error_class),
                attempts.c.error_type.is_distinct_from(quarantine.c.error_type),
            ),
        )
        .exists()
    )
    cause = (quarantine.c.signature, quarantine.c.error_class, quarantine.c.error_type)
    rows = connection.execute(
        sa.select(*cause)
        .where(
            quarantine.c.status == EntryStatus.QUARANTINED,
            quarantine.c.error_class.in_(
                [str(Classification.RETRYABLE), str(Classification.UNKNOWN)]
            ),
            quarantine.c.attempts > 0,  # an entry of attempts that never ran says nothing
            ~other_failure,
            *_narrowed(asset, assets),
        )
        .group_by(*cause)
        .having(sa.func.count(sa.distinct(quarantine.c.partition)) >= PERMANENT_AFTER_PARTITIONS)
    )
    return [(row.signature, row.error_class, row.error_type) for row in rows]


def _transient(
    connection: sa.Connection, asset: str | None, assets: Sequence[str] | None
) -> list[Cause]:
    # Imported here: the redrive imports the alerts, whose message imports the triage,
    # which imports this module.
    from jobs_platform.dead_letter.redrive import RedriveReason

    terminal = quarantine.c.error_class == str(Classification.TERMINAL)
    cause = (quarantine.c.signature, quarantine.c.error_class, quarantine.c.error_type)
    open_causes = (
        sa.select(*cause)
        .where(quarantine.c.status == EntryStatus.QUARANTINED, terminal, *_narrowed(asset, assets))
        .distinct()
        .subquery("open_causes")
    )
    healed = connection.execute(
        sa.select(*cause)
        .join(requeues, requeues.c.entry_id == quarantine.c.id)
        .join(
            open_causes,
            sa.and_(
                open_causes.c.signature == quarantine.c.signature,
                open_causes.c.error_type.is_not_distinct_from(quarantine.c.error_type),
            ),
        )
        .where(
            terminal,
            quarantine.c.status == EntryStatus.RESOLVED,
            requeues.c.by == str(RequeuedBy.REDRIVE),
            requeues.c.reason.in_([str(RedriveReason.INPUT_CHANGED), str(RedriveReason.COOLDOWN)]),
            *_narrowed(asset, assets),
        )
        .group_by(*cause)
        .having(sa.func.count(sa.distinct(quarantine.c.id)) >= TRANSIENT_AFTER_REDRIVES)
    )
    return [(row.signature, row.error_class, row.error_type) for row in healed]
