"""How an attempt at a partition came out: one closed set of values, one per outcome.

`Outcome` is the partition done (`PartitionReport`) or one of the ways it did not finish
(`Unfinished`), each a frozen dataclass holding only the facts that outcome has. The step
of the path that knows the facts builds it once; consumers take it apart with `match`
(`outcome_events`, `tracing`, `orchestration.dagster_results`), so a new outcome is a type
error wherever it is not handled. A `Decision` is carried only where one was made: a
failure, a busy lease, a retry not due yet. The gate's refusal, a blocked partition and a
held one decide nothing (quarantined stays quarantined; blocked runs again with its
upstream; held runs again once resumed or ready).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TypeAlias, assert_never

from jobs_platform.engine.decisions import Decision
from jobs_platform.errors import Verdict
from jobs_platform.gate.audits import AuditResult
from jobs_platform.steering.holds import HoldReason
from jobs_platform.writer.rejects import RejectedRow
from jobs_platform.writer.upsert import UpsertCounts


@dataclass(frozen=True)
class PartitionReport:
    """Done: what a successful attempt did (becomes the materialization's metadata)."""

    asset: str
    partition: str
    attempt: int  # the attempt's number within its episode (1 for the first)
    input_rows: int
    counts: UpsertCounts
    rows_swept: int
    chunks_written: int
    chunks_resumed: int
    duration_seconds: float
    fingerprint: str
    unchanged_input: bool = False  # done before with this input: nothing read or written
    rows_rejected: int = 0  # input rows rejected under `bad_rows=RejectRows(...)`
    rejected_sample: tuple[RejectedRow, ...] = ()  # the first of them, in input order
    audits: tuple[AuditResult, ...] = ()  # each audit's result on the staged rows (`audits=`)


@dataclass(frozen=True)
class _Unfinished:
    """What every outcome but done says: which partition, and why it did not finish."""

    asset: str
    partition: str
    error: BaseException  # why, as people are shown it (and the cause of a retry request)

    @property
    def message(self) -> str:
        return str(self.error)


@dataclass(frozen=True)
class Refused(_Unfinished):
    """The gate refused it: quarantined already, terminal until requeued; nothing recorded.

    `error` is the `TerminalError` naming its entry.
    """

    entry_id: int  # its open quarantine entry
    entry_class: str  # the error class that entry records
    failures: int  # the attempts that entry counts


@dataclass(frozen=True)
class Blocked(_Unfinished):
    """A partition it reads is not done: not attempted, nothing recorded; it runs again
    with its upstream. `error` (`UpstreamNotDone`) names what it waits for."""


@dataclass(frozen=True)
class Held(_Unfinished):
    """Held back by its backfill's steering: paused, or its input not ready. Not attempted,
    nothing spent, not a failure of its input; the holds sensor launches it again once the
    backfill is resumed or the input is ready. `error` (`HeldBack`) says why, and by whom."""

    reason: HoldReason
    since: dt.datetime  # held for this reason since


@dataclass(frozen=True)
class Busy(_Unfinished):
    """Not attempted now, for free: another live worker holds its lease (`error`, the
    `LeaseBusy`), or its backfill's circuit for a cause is open and another partition
    probes it (`steering.circuits.CircuitOpen`). Snoozed, nothing recorded or spent."""

    decision: Decision  # the snooze


@dataclass(frozen=True)
class NotDue(_Unfinished):
    """Its retry delay has not passed (`retry_schedule`): not attempted in this step try,
    nothing recorded or spent."""

    decision: Decision  # what it waits for (a retry or a snooze), due in `delay_seconds`


@dataclass(frozen=True)
class BudgetSpent(_Unfinished):
    """Earlier attempts that never reported (crashes) spent the budget: quarantined before
    a new attempt started."""

    verdict: Verdict  # what those attempts were taken for (a crash)
    failures: int  # the episode's counted failures
    entry_id: int | None  # its quarantine entry


@dataclass(frozen=True)
class Failed(_Unfinished):
    """It raised (`error`), and what follows was decided (`settle`, which records it
    when the warehouse can be written).

    `attempt` is its number in the episode, in the history; None when it failed before
    any attempt started (the schema check, the gate, the lease or the start raised), and
    nothing could be recorded.
    """

    verdict: Verdict
    decision: Decision
    attempt: int | None
    failures: int  # the episode's counted failures (before an attempt: this step's tries)
    entry_id: int | None = None  # its quarantine entry, when quarantined


Unfinished: TypeAlias = Refused | Blocked | Held | Busy | NotDue | BudgetSpent | Failed
Outcome: TypeAlias = PartitionReport | Unfinished


def waits(outcome: Outcome) -> bool:
    """Whether the partition is tried again after a delay: a retry or a snooze."""
    match outcome:
        case Busy(decision=decision) | NotDue(decision=decision) | Failed(decision=decision):
            return decision.waits
        case PartitionReport() | Refused() | Blocked() | Held() | BudgetSpent():
            return False
        case _:
            assert_never(outcome)
