"""What `jobs-platform plan` says: one row per partition (`run` or `skip`, one reason, the
details the reason has), and the plan as a whole (its rows, totals, estimate and notes).

The rules that decide each row are `steering.plan`'s; this module only holds what they
say, and how it reads as JSON.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from jobs_platform.steering.estimate import Estimate


class Action(enum.StrEnum):
    """What a launch does to a partition."""

    RUN = "run"  # an attempt reads its input and writes it
    SKIP = "skip"  # no attempt reads it: held back, or nothing to do


class Reason(enum.StrEnum):
    """Why a launch runs or skips a partition (one per row)."""

    MISSING = "missing"  # run: no attempt of it has ended yet
    FAILED_DUE = "failed_due"  # run: its last attempt failed, or a requeue released it
    INPUT_CHANGED = "input_changed"  # run: done, but its input's fingerprint differs now
    CODE_CHANGED = "code_changed"  # run: done by another code_version than the backfill's
    NO_FINGERPRINT = "no_fingerprint"  # run: done, but without `fingerprint=` only reading tells
    DONE_UNCHANGED = "done_unchanged"  # skip: done from the input its fingerprint names now
    QUARANTINED = "quarantined"  # skip: in the dead letter, waiting for a person
    COOLING_DOWN = "cooling_down"  # skip: in the dead letter until the redrive's cool-down ends
    IN_FLIGHT = "in_flight"  # skip: a live worker holds its lease (in run `run_id`)
    BLOCKED = "blocked"  # skip: a partition it reads (`upstream`) is not done
    NOT_READY = "not_ready"  # skip: its readiness check says its input has not landed
    BUDGET_SPENT = "budget_spent"  # skip: crashes spent its budget; a launch quarantines it
    CIRCUIT_OPEN = "circuit_open"  # skip: an open circuit snoozes it until a probe succeeds
    PAUSED = "paused"  # skip: the backfill is paused


@dataclass(frozen=True)
class PlanRow:
    """One partition of the plan: what a launch does, why, and the details the reason has."""

    partition: str
    action: Action
    reason: Reason
    until: dt.datetime | None = None  # cooling_down: when the redrive releases it
    run_id: str | None = None  # in_flight: the run holding its lease
    upstream: str | None = None  # blocked: the first upstream partition not done (name/key)
    since: dt.datetime | None = None  # not_ready: when a run first held it for its input
    past_max_wait: bool = False  # not_ready: held longer than the backfill's `max_wait`
    failures: int | None = None  # budget_spent: the attempts it is quarantined after
    signature: str | None = None  # circuit_open: the cause whose circuit snoozes it
    next_probe_at: dt.datetime | None = None  # circuit_open: when the next probe may try
    probe: str | None = None  # circuit_open: the partition probing it now
    change: Mapping[str, object] | None = None  # run, gated: its expected diff (`plan_diff`)
    note: str | None = None  # what the reason alone does not say (`ready` raised, not asked)
    downstream: tuple[str, ...] = ()  # partitions of other backfills it would recompute

    def as_dict(self) -> dict[str, object]:
        row: dict[str, object] = {
            "partition": self.partition,
            "action": str(self.action),
            "reason": str(self.reason),
        }
        if self.until is not None:
            row["until"] = self.until.isoformat()
        if self.run_id is not None or self.reason is Reason.IN_FLIGHT:
            row["run_id"] = self.run_id
        if self.upstream is not None:
            row["upstream"] = self.upstream
        if self.reason is Reason.NOT_READY:
            row["since"] = self.since.isoformat() if self.since is not None else None
            row["past_max_wait"] = self.past_max_wait
        if self.failures is not None:
            row["failures"] = self.failures
        if self.reason is Reason.CIRCUIT_OPEN:
            row["signature"] = self.signature
            row["next_probe_at"] = self.next_probe_at.isoformat() if self.next_probe_at else None
            row["probe"] = self.probe
        if self.change is not None:
            row["change"] = dict(self.change)
        if self.note is not None:
            row["note"] = self.note
        row["downstream"] = list(self.downstream)
        return row


@dataclass(frozen=True)
class Plan:
    """The rows, in the order asked, their totals and the estimate of the runs."""

    asset: str
    rows: tuple[PlanRow, ...]
    estimate: Estimate
    notes: tuple[str, ...] = field(default=())

    @property
    def totals(self) -> dict[str, object]:
        actions = Counter(str(row.action) for row in self.rows)
        return {
            "partitions": len(self.rows),
            "run": actions[Action.RUN],
            "skip": actions[Action.SKIP],
            "by_reason": dict(Counter(str(row.reason) for row in self.rows).most_common()),
            "downstream": sum(len(row.downstream) for row in self.rows if row.action is Action.RUN),
        }

    @property
    def to_run(self) -> int:
        return sum(1 for row in self.rows if row.action is Action.RUN)

    def as_dict(self) -> dict[str, object]:
        return {
            "asset": self.asset,
            "partitions": [row.as_dict() for row in self.rows],
            "totals": self.totals,
            "estimate": self.estimate.as_dict(),
            "notes": list(self.notes),
        }
