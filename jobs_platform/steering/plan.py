"""`jobs-platform plan`: what a launch would do to each partition of a range, and why.

Pure: given the facts (`plan_facts.read_facts`), the fingerprints of the input now and the
backfill's settings, the rows. Every decision is one the attempt path makes, asked of the
same function, so a plan cannot drift from a launch:

- the gate (`engine.attempt.gate`): an open dead-letter entry is refused, a partition whose
  upstream is not done is blocked;
- the redrive (`dead_letter.redrive.cooldown_ends`): a refused entry that an outage spent
  is released once its cool-down ends, so it is `cooling_down` until then;
- readiness (`engine.holding`): `ready=` is asked, as the gate asks it
  (`plan_readiness`), about each partition the launch would act on;
- the lease (`store.leases`, as `plan_facts` reads it): a live holder's partition is busy;
- the circuit breaker (`steering.circuit_rule`, as `plan_circuits` reads the circuits): an
  open circuit snoozes every partition but its probe;
- the budget at the start (`engine.decisions.decide` on the count `plan_budget` reads):
  crashes that spent it are quarantined by the launch without reading the input;
- the unchanged input (`engine.finalize.unchanged_since_done`): a done partition whose
  fingerprint holds finishes without reading; the redrive's `code_changed` says why not.

The order is the attempt's: the gate (quarantined, then blocked), then the pause and
readiness, then the lease, then the circuits, then the budget, then the partition's own
state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from jobs_platform.dead_letter.redrive import code_changed, cooldown_ends
from jobs_platform.engine.attempt import Gate, gate
from jobs_platform.engine.decisions import NextStep, RetryBudget
from jobs_platform.engine.decisions import decide as settle_rule
from jobs_platform.engine.finalize import unchanged_since_done
from jobs_platform.errors import Classification, Verdict
from jobs_platform.steering.plan_circuits import CircuitState
from jobs_platform.steering.plan_facts import PartitionFacts
from jobs_platform.steering.plan_holds import Holds
from jobs_platform.steering.plan_row import Action, PlanRow, Reason
from jobs_platform.store.partitions import PartitionStatus


@dataclass(frozen=True)
class Backfill:
    """What `plan` needs of the backfill itself and of the settings its attempts run under."""

    asset: str
    version: str = ""  # its code_version ("" when it has none)
    fingerprinted: bool = False  # whether it has a `fingerprint=`
    redrive: bool = True  # whether the redrive serves it
    first_cooldown_seconds: float = 900.0
    max_redrives: int = 3
    budget: RetryBudget | None = None  # the attempt budget (None: a spent one is not asked)


def plan_rows(
    backfill: Backfill,
    keys: Sequence[str],
    facts: PartitionFacts,
    fingerprints: Mapping[str, str],
    holds: Holds = Holds(),  # noqa: B008 (frozen: one shared empty value is safe)
    circuits: CircuitState = CircuitState(),  # noqa: B008 (frozen, as `holds`)
) -> list[PlanRow]:
    """One row per key, in order: what a launch now would do to it.

    `fingerprints` are the stored-form fingerprints of the input now (with the code
    version: `BackfillSpec.stored_fingerprint`) of the done partitions, for a backfill with
    a `fingerprint=`. Under open `circuits` the first partition to reach them is their
    probe, when one is due; every other is snoozed.
    """
    rows = []
    probe_due = bool(circuits.open) and circuits.snoozing is None
    for key in keys:
        row = held_back(backfill, key, facts, holds)
        if row is None and circuits.open:
            if probe_due:
                probe_due = False
                row = dataclasses.replace(
                    started(backfill, key, facts, fingerprints),
                    note="the probe of the open circuit(s): its success closes them",
                )
            else:
                row = _snoozed(key, circuits)
        rows.append(row or started(backfill, key, facts, fingerprints))
    return rows


def with_downstream(
    rows: Sequence[PlanRow], downstream: Mapping[str, Sequence[str]]
) -> list[PlanRow]:
    """`rows`, each that runs with the partitions of other backfills it feeds (`downstream`,
    by key): they are stale once it runs. A row that skips recomputes nothing."""
    return [
        dataclasses.replace(row, downstream=tuple(downstream[row.partition]))
        if row.action is Action.RUN and downstream.get(row.partition)
        else row
        for row in rows
    ]


def decide(
    backfill: Backfill,
    key: str,
    facts: PartitionFacts,
    fingerprints: Mapping[str, str],
    holds: Holds,
) -> PlanRow:
    """What a launch does to one partition, and why, with no circuit open (its downstream
    and the circuits left to `plan_rows`)."""
    return held_back(backfill, key, facts, holds) or started(backfill, key, facts, fingerprints)


def held_back(backfill: Backfill, key: str, facts: PartitionFacts, holds: Holds) -> PlanRow | None:
    """The row of a partition held back before its lease is held (the gate, the pause,
    readiness, a live lease), or None: the launch takes its lease."""
    entry = facts.open_entries.get(key)
    waiting_on = facts.waiting_on.get(key, {})
    closed = gate(quarantined=entry is not None, waiting_on=waiting_on)
    if closed is Gate.QUARANTINED and entry is not None:
        until = None
        if backfill.redrive:
            until = cooldown_ends(
                entry,
                earlier_cooldown_redrives=facts.cooldown_redrives.get(key, 0),
                redrives=facts.redrives.get(key, 0),
                first_cooldown_seconds=backfill.first_cooldown_seconds,
                max_redrives=backfill.max_redrives,
            )
        if until is not None:
            return PlanRow(key, Action.SKIP, Reason.COOLING_DOWN, until=until)
        return PlanRow(key, Action.SKIP, Reason.QUARANTINED)
    if closed is Gate.BLOCKED:
        name, upstream_key = next(iter(waiting_on))
        return PlanRow(key, Action.SKIP, Reason.BLOCKED, upstream=f"{name}/{upstream_key}")
    # The steering gate (`engine.holding`), after the quarantine and upstream gates.
    if holds.paused:
        return PlanRow(key, Action.SKIP, Reason.PAUSED)
    not_ready = holds.not_ready.get(key)
    if not_ready is not None:
        note = None
        if not_ready.error is not None:
            note = f"ready= raised {not_ready.error}: a launch fails it before any attempt"
        return PlanRow(
            key,
            Action.SKIP,
            Reason.NOT_READY,
            since=not_ready.since,
            past_max_wait=not_ready.past_max_wait,
            note=note,
        )
    lease = facts.live_leases.get(key)
    if lease is not None:
        return PlanRow(key, Action.SKIP, Reason.IN_FLIGHT, run_id=lease.run_id)
    return None


def started(
    backfill: Backfill, key: str, facts: PartitionFacts, fingerprints: Mapping[str, str]
) -> PlanRow:
    """The row of a partition whose attempt would start: the budget its start settles,
    then its own state."""
    failures = facts.failures_at_start.get(key)
    budget = backfill.budget
    if failures is not None and budget is not None and spent_at_start(failures, budget):
        return PlanRow(key, Action.SKIP, Reason.BUDGET_SPENT, failures=failures)
    state = facts.states.get(key)
    if state is None:
        return PlanRow(key, Action.RUN, Reason.MISSING)
    if state.status != PartitionStatus.DONE:
        return PlanRow(key, Action.RUN, Reason.FAILED_DUE)
    return _done(backfill, key, state.fingerprint, facts, fingerprints)


def _snoozed(key: str, circuits: CircuitState) -> PlanRow:
    """Snoozed by the open circuit the gate stops at: the first that snoozes, or (its probe
    taken by an earlier partition of the launch) the first."""
    circuit = circuits.snoozing or circuits.open[0]
    return PlanRow(
        key,
        Action.SKIP,
        Reason.CIRCUIT_OPEN,
        signature=circuit.signature,
        next_probe_at=circuit.next_probe_at,
        probe=circuit.probe_partition,
    )


# What an attempt's start settles with when abandoned attempts are all it knows of
# (`engine.attempt._record_start`): a crash.
_SPENT_BY_CRASHES = Verdict(Classification.CRASH, None, "attempt budget spent by crashes")


def spent_at_start(failures: int, budget: RetryBudget) -> bool:
    """Whether a launch's start quarantines a partition with `failures` counted failures
    (its abandoned attempts among them), by the settle rule itself."""
    decision = settle_rule(_SPENT_BY_CRASHES, failures, budget)
    return decision.next_step is NextStep.QUARANTINE


def with_changes(
    rows: Sequence[PlanRow], changes: Mapping[str, Mapping[str, object]]
) -> list[PlanRow]:
    """`rows`, each that runs with its expected change (`changes`, by key)."""
    return [
        dataclasses.replace(row, change=changes[row.partition])
        if row.action is Action.RUN and row.partition in changes
        else row
        for row in rows
    ]


def noted(rows: Sequence[PlanRow], keys: Collection[str], note: str) -> list[PlanRow]:
    """`rows`, those of `keys` with `note` (e.g. `ready` not asked about them)."""
    return [dataclasses.replace(row, note=note) if row.partition in keys else row for row in rows]


def _done(
    backfill: Backfill,
    key: str,
    done_fingerprint: str | None,
    facts: PartitionFacts,
    fingerprints: Mapping[str, str],
) -> PlanRow:
    if code_changed(facts.done_code_versions.get(key), backfill.version):
        return PlanRow(key, Action.RUN, Reason.CODE_CHANGED)
    if not backfill.fingerprinted:
        return PlanRow(key, Action.RUN, Reason.NO_FINGERPRINT)
    now = fingerprints.get(key)
    if now is not None and unchanged_since_done(done_fingerprint, now):
        return PlanRow(key, Action.SKIP, Reason.DONE_UNCHANGED)
    return PlanRow(key, Action.RUN, Reason.INPUT_CHANGED)
