"""Classification a person teaches: one rule per failure signature, per code location.

The built-in table (`errors.classify`) is written in advance. A person who has read a
group of the dead letter knows better: "this `unknown` error is permanent" or "this
`terminal` error is a file that lands later". `jobs-platform dead-letter classify` records
that as a rule, and from then on a failure with that signature, in a backfill of that code
location, is recorded with the rule's class. The table's verdict applies again once the
rule is removed.

The rule is applied where a failure is recorded (`engine.failure.record_failure`), one
indexed query per failed attempt, so `classify` itself stays pure and database-free. The
failure is signed with the table's class, as the dead letter signs it: the rule's
signature is the group's a person read in `dead-letter groups`. The attempt's history
names the rule that decided it (`jp_attempts.rule`).

What a rule never changes:
- a lost lease or an interruption: the framework's own account of the attempt, which says
  nothing about the input;
- a crash: recorded by the next worker for an attempt that never reported, with no
  exception of its own to sign. A rule on "the process died" would hide a memory or
  deadline problem that needs a fix, not a class;
- a failure before the attempt exists (the schema check, the gate, the lease): nothing is
  recorded, and the warehouse the rules live in may be what failed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from jobs_platform.dead_letter.signature import failure_signature
from jobs_platform.errors import Classification, Verdict
from jobs_platform.store.clock import Clock
from jobs_platform.store.rows import TableRow, upsert_row
from jobs_platform.store.schema import classification_rules, quarantine

# The classes a person may teach.
TAUGHT_CLASSES = (Classification.TERMINAL, Classification.RETRYABLE)
# The table's classes a rule may replace: the verdicts about the failure's own exception.
RULED_CLASSES = frozenset(
    {Classification.RETRYABLE, Classification.TERMINAL, Classification.UNKNOWN}
)


# What setting a rule again replaces: everything but its key (asset, signature).
_SET_AGAIN = (
    "location", "classification", "reason", "set_by", "set_at",
    "error_class", "error_type", "sample_message",
)  # fmt: skip


@dataclass(frozen=True)
class Rule:
    """A rule as `dead-letter rules` lists it: one cause, one code location."""

    signature: str
    classification: str
    reason: str | None
    set_by: str
    set_at: dt.datetime
    location: str
    assets: tuple[str, ...]  # the backfills the location served when the rule was set
    error_class: str | None  # the class the table gives the cause
    error_type: str | None
    sample_message: str | None


@dataclass(frozen=True)
class Taught:
    """A failure's verdict, and the signature of the rule that decided it (None: the table)."""

    verdict: Verdict
    rule: str | None = None


def taught_verdict(
    connection: sa.Connection,
    asset: str,
    partition: str,
    verdict: Verdict,
    error_type: str,
    message: str,
) -> Taught:
    """The verdict of a failure once the rules of its backfill are applied.

    `verdict` is the table's, `error_type` and `message` what the history records. The
    failure is signed as the dead letter signs it, then looked up by its backfill and
    signature (the unique key: one query).
    """
    if verdict.classification not in RULED_CLASSES:
        return Taught(verdict)
    signature = failure_signature(
        verdict.classification, error_type, message, asset=asset, partition=partition
    )
    taught = connection.execute(
        sa.select(classification_rules.c.classification).where(
            classification_rules.c.asset == asset,
            classification_rules.c.signature == signature,
        )
    ).scalar_one_or_none()
    if taught is None:
        return Taught(verdict)
    classification = Classification(taught)
    return Taught(
        Verdict(
            classification,
            verdict.retry_after if classification is Classification.RETRYABLE else None,
            f"taught {classification} by rule {signature} (the table said "
            f"{verdict.classification}: {verdict.reason})",
            sqlstate=verdict.sqlstate,
            raised_in=verdict.raised_in,
        ),
        signature,
    )


class ClassificationRules:
    """The rules' writes, stamped on one clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def teach(
        self,
        connection: sa.Connection,
        *,
        location: str,
        assets: Sequence[str],
        signature: str,
        classification: Classification,
        reason: str | None,
        by: str,
        error_class: str | None,
        error_type: str | None,
        sample_message: str | None,
    ) -> dt.datetime:
        """Set the location's rule for `signature` over its backfills `assets`; returns
        when. Setting it again replaces it (its class, reason, who and when)."""
        if classification not in TAUGHT_CLASSES:
            raise ValueError(f"a rule teaches terminal or retryable, not {classification}")
        now = self.clock.now(connection)
        connection.execute(sa.delete(classification_rules).where(*_of(location, signature)))
        for asset in assets:
            # Keyed by (asset, signature): a backfill that moved to this location from
            # another one takes this location's rule.
            upsert_row(
                connection,
                classification_rules,
                {
                    "location": location,
                    "asset": asset,
                    "signature": signature,
                    "classification": str(classification),
                    "reason": reason,
                    "set_by": by,
                    "set_at": now,
                    "error_class": error_class,
                    "error_type": error_type,
                    "sample_message": sample_message,
                },
                key=("asset", "signature"),
                update=_SET_AGAIN,
            )
        return now


def forget(connection: sa.Connection, location: str, signature: str) -> int:
    """Remove the location's rule for `signature`; returns the backfills it covered."""
    return connection.execute(
        sa.delete(classification_rules).where(*_of(location, signature))
    ).rowcount


def list_rules(
    connection: sa.Connection,
    *,
    location: str | None = None,
    signatures: Iterable[str] | None = None,
) -> list[Rule]:
    """The rules, one per location and signature, the latest set first."""
    query = sa.select(classification_rules)
    if location is not None:
        query = query.where(classification_rules.c.location == location)
    if signatures is not None:
        query = query.where(classification_rules.c.signature.in_(list(signatures)))
    rows: dict[tuple[str, str], list[TableRow]] = {}
    for row in connection.execute(query.order_by(classification_rules.c.asset)):
        rows.setdefault((row.location, row.signature), []).append(row)
    rules = [_rule(covered) for covered in rows.values()]
    return sorted(
        rules, key=lambda rule: (rule.set_at, rule.location, rule.signature), reverse=True
    )


def signatures_starting(
    connection: sa.Connection, prefix: str, assets: Sequence[str], location: str
) -> list[str]:
    """The signatures starting with `prefix` of the backfills `assets` (an entry in the
    dead letter, whatever its status) or of the location's rules, sorted."""
    of_entries = (
        sa.select(quarantine.c.signature)
        .where(
            quarantine.c.asset.in_(list(assets)),
            quarantine.c.signature.startswith(prefix, autoescape=True),
        )
        .distinct()
    )
    of_rules = (
        sa.select(classification_rules.c.signature)
        .where(
            classification_rules.c.location == location,
            classification_rules.c.signature.startswith(prefix, autoescape=True),
        )
        .distinct()
    )
    found = set(connection.execute(of_entries).scalars()) | set(
        connection.execute(of_rules).scalars()
    )
    return sorted(signature for signature in found if signature)


def _of(location: str, signature: str) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        classification_rules.c.location == location,
        classification_rules.c.signature == signature,
    )


def _rule(rows: Sequence[TableRow]) -> Rule:
    first = rows[0]
    return Rule(
        signature=first.signature,
        classification=first.classification,
        reason=first.reason,
        set_by=first.set_by,
        set_at=first.set_at,
        location=first.location,
        assets=tuple(row.asset for row in rows),
        error_class=first.error_class,
        error_type=first.error_type,
        sample_message=first.sample_message,
    )
