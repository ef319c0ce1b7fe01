"""A ranged step's retries, partition by partition: the schedule kept in the run's events.

The rule is the core's (`engine.retry_schedule`); this keeps its state between the tries
of a step, which run in new processes, maybe on other machines, while the warehouse may
be down. It lives in Dagster's instance, in the run's own events:

- a try that asks to be retried logs, for every partition that waits (a retry, a snooze,
  or one that gave up), an `AssetObservation` of that partition: when it is due again and
  why, shown on the partition in the UI, and read back by the step's next try;
- a partition that finished in an earlier try of the step has its `AssetMaterialization`
  in the run already: the next tries do not attempt it again.

Who waits for the retry time is the executor's question (`executors.retries_wait_in_the_step`).
Under Dagster's multiprocess executor the next try sleeps it at its start, and Dagster is
asked for no delay: its run loop then blocks on the sleeping step's process, where a step
waiting for its delay with no process of its own would spin a core. So the schedule is
logged for a step of one partition too, and its next try reads it only to know how long to
sleep. Under the in-process executor (which sleeps its waits) and Celery (where a sleeping
task would hold a worker slot), Dagster waits the delay; a step of one partition then logs
nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import assert_never

import dagster as dg

from jobs_platform.engine.decisions import WAITING_STEPS, Decision, NextStep
from jobs_platform.engine.events import Lifecycle
from jobs_platform.engine.outcomes import (
    Blocked,
    BudgetSpent,
    Busy,
    Failed,
    Held,
    NotDue,
    Outcome,
    PartitionReport,
    Refused,
    Unfinished,
)
from jobs_platform.engine.retry_schedule import (
    Due,
    RetrySchedule,
    Waiting,
    due_now,
    schedule_retry,
)
from jobs_platform.store.holders import HolderIdentity
from jobs_platform.store.leases import this_holder

# The observation's metadata: "retry/…" for people, the rest for the next try.
_PREFIX = "jobs_platform/retry/"
_STEP_TRY = _PREFIX + "step_try"
# What the schedule says a blocked partition waits for: its upstream (due at once).
_BLOCKED = str(Lifecycle.BLOCKED)
# The longest a try sleeps at a time while it waits for its retry time: Dagster terminates
# a step by interrupting its main thread, which a shorter sleep notices sooner.
SLEEP_SLICE_SECONDS = 0.5


def monotonic_clock() -> str:
    """Whose monotonic clock this process reads: one per host and kernel boot."""
    identity = HolderIdentity.parse(this_holder())
    return f"{identity.host}:{identity.boot_id}" if identity else ""


@dataclass
class StepTry:
    """One try of a backfill step: which partitions it attempts, and what it leaves.

    `waits_in_next_try`: a retry of the step sleeps its retry time at its start, and
    Dagster restarts it at once (`executors.retries_wait_in_the_step`).
    """

    context: dg.AssetExecutionContext
    assets: Sequence[str]
    partitions: Sequence[str]
    waits_in_next_try: bool = False
    previous: RetrySchedule | None = None
    done_before: set[tuple[str, str]] = field(default_factory=set)
    began: float = field(default_factory=time.monotonic)
    clock: str = field(default_factory=monotonic_clock)
    # The rest of the retry time this try sleeps before it attempts anything.
    to_sleep: float = 0.0
    slept: float = 0.0
    _waiting: list[Waiting] = field(default_factory=list)

    @classmethod
    def begin(
        cls,
        context: dg.AssetExecutionContext,
        assets: Sequence[str],
        partitions: Sequence[str],
        *,
        waits_in_next_try: bool = False,
    ) -> StepTry:
        step = cls(context, assets, partitions, waits_in_next_try=waits_in_next_try)
        ranged = len(partitions) > 1
        if context.retry_number == 0 or not (ranged or waits_in_next_try):
            return step
        schedule = _previous_schedule(context, assets, partitions)
        if schedule is not None:
            step.to_sleep = schedule.left_to_sleep(step.clock, step.began)
        if ranged:
            # A step of one partition keeps its tries as before: the step's retry number.
            step.previous = schedule
            step.done_before = _materialized_in_run(context, assets, partitions)
        return step

    def sleep_until_due(self, sleep: Callable[[float], None] = time.sleep) -> None:
        """Sleep what is left of the retry time, in slices a termination interrupts.

        Dagster interrupts the step's main thread to stop it: the
        `DagsterExecutionInterruptedError` that raises ends the sleep.
        """
        if self.to_sleep <= 0:
            return
        self.context.log.info(
            f"waiting {self.to_sleep:.1f}s for the retry time of its first partition due"
        )
        until = self.began + self.to_sleep
        while (left := until - time.monotonic()) > 0:
            sleep(min(left, SLEEP_SLICE_SECONDS))
        self.slept, self.to_sleep = self.to_sleep, 0.0
        self.began = time.monotonic()

    @property
    def waited(self) -> float:
        if self.previous is None:
            return 0.0
        return self.previous.waited(self.clock, self.began, slept=self.slept)

    def due(self, asset: str, partition: str) -> Due:
        return due_now(
            self.previous,
            asset,
            partition,
            waited=self.waited,
            step_retry=self.context.retry_number,
        )

    def not_due_decision(self, due: Due) -> Decision:
        """What a partition not due is told: how long from now (`due` counts from the try's
        start; the partitions before it in this try took some of that)."""
        elapsed = time.monotonic() - self.began
        return Decision(NextStep(due.next_step), max(0.0, due.remaining_seconds - elapsed))

    def ended(self, outcome: Outcome, due: Due) -> None:
        """Note how a partition ended in this try (attempted, skipped, or blocked).

        A try it made counts; one it was not due for, or blocked in, does not.
        """
        match outcome:
            case PartitionReport() | Refused() | BudgetSpent():
                return  # done, or quarantined: the gate refuses it from now on
            case Blocked():
                self._note(outcome, _BLOCKED, 0.0, due.tries_before, attempted=False)
            case Held():
                return  # not attempted; the holds sensor launches it again
            case NotDue(decision=decision):
                # Counted from the try's start, as `due` was (what it was told counts from
                # when it was told).
                self._note(outcome, decision.next_step, due.remaining_seconds, due.tries_before)
            case Busy(decision=decision) | Failed(decision=decision):
                if decision.next_step is NextStep.QUARANTINE:
                    return
                tries = due.tries_before + 1
                self._note(
                    outcome, decision.next_step, decision.delay_seconds, tries, attempted=True
                )
            case _:
                assert_never(outcome)

    def _note(
        self,
        outcome: Unfinished,
        next_step: str,
        delay_seconds: float,
        tries: int,
        *,
        attempted: bool = False,
    ) -> None:
        """`outcome`'s partition waits `delay_seconds` for `next_step`, after `tries` tries."""
        self._waiting.append(
            Waiting(
                outcome.asset,
                outcome.partition,
                delay_seconds=delay_seconds,
                decided_at=time.monotonic() if attempted else self.began,
                tries=tries,
                next_step=str(next_step),
            )
        )

    def ask_to_retry(self, failed: Sequence[Unfinished]) -> RetrySchedule:
        """The schedule of the next try, logged in the run for it to read.

        Its `dagster_wait_seconds` is the delay to ask Dagster for.
        """
        # One that gave up, or was blocked, is due at once with its tries (one that gave
        # up gives up again unless it can be attempted by then).
        waiting = [w if w.next_step in WAITING_STEPS else _at_once(w) for w in self._waiting]
        schedule = schedule_retry(
            waiting,
            clock=self.clock,
            now=time.monotonic(),
            waits_in_next_try=self.waits_in_next_try,
        )
        if len(self.partitions) == 1 and not self.waits_in_next_try:
            return schedule  # Dagster waits exactly this; the next try needs nothing
        why = {(f.asset, f.partition): f.message.splitlines()[0][:300] for f in failed}
        for pending in schedule.pending:
            record = {_PREFIX + n: value for n, value in schedule.to_record(pending).items()}
            self.context.log_event(
                dg.AssetObservation(
                    asset_key=dg.AssetKey.from_user_string(pending.asset),
                    partition=pending.partition,
                    description=_describe(pending.next_step, pending.due_in),
                    metadata={
                        "retry_due_in_seconds": round(pending.due_in, 3),
                        "next_step": pending.next_step,
                        "reason": why.get((pending.asset, pending.partition), ""),
                        _STEP_TRY: self.context.retry_number,
                        **record,
                    },
                )
            )
        return schedule


def _at_once(waiting: Waiting) -> Waiting:
    return Waiting(
        waiting.asset,
        waiting.partition,
        delay_seconds=0.0,
        decided_at=waiting.decided_at,
        tries=waiting.tries,
        next_step=waiting.next_step,
    )


def _describe(next_step: str, due_in: float) -> str:
    if next_step == NextStep.GIVE_UP:
        return "failed before its attempt could start, tries spent; the next try gives up again"
    if next_step == _BLOCKED:
        return "blocked: a partition it reads is not done; tried with it in the next try"
    return f"{next_step} due {due_in:.3f}s after the step's retry request"


def _previous_schedule(
    context: dg.AssetExecutionContext, assets: Sequence[str], partitions: Sequence[str]
) -> RetrySchedule | None:
    """The schedule the step's previous try logged, or None (it logged none: it died)."""
    wanted = context.retry_number - 1
    records: dict[tuple[str, str], dict[str, object]] = {}
    for asset, record in _this_runs(context, assets, partitions, observations=True):
        metadata = record.asset_observation.metadata if record.asset_observation else {}
        step_try = metadata.get(_STEP_TRY)
        if step_try is None or step_try.value != wanted or record.partition_key is None:
            continue
        entry: dict[str, object] = {
            name.removeprefix(_PREFIX): value.value
            for name, value in metadata.items()
            if name.startswith(_PREFIX)
        }
        records.setdefault((asset, record.partition_key), entry)
    return RetrySchedule.from_records(records)


def _materialized_in_run(
    context: dg.AssetExecutionContext, assets: Sequence[str], partitions: Sequence[str]
) -> set[tuple[str, str]]:
    """The partitions an earlier try of this step materialized."""
    return {
        (asset, record.partition_key)
        for asset, record in _this_runs(context, assets, partitions, observations=False)
        if record.partition_key is not None
    }


def _this_runs(
    context: dg.AssetExecutionContext,
    assets: Sequence[str],
    partitions: Sequence[str],
    *,
    observations: bool,
) -> Iterator[tuple[str, dg.EventLogRecord]]:
    """This run's observations (or materializations) of the step's partitions, newest first."""
    fetch = (
        context.instance.fetch_observations
        if observations
        else context.instance.fetch_materializations
    )
    # Newest first: this run's own events come before older runs'. Each earlier try
    # logs at most one event per partition; the margin covers other runs' events.
    limit = 2 * len(partitions) * max(1, context.retry_number) + 20
    for asset in assets:
        records = fetch(
            dg.AssetRecordsFilter(
                asset_key=dg.AssetKey.from_user_string(asset), asset_partitions=list(partitions)
            ),
            limit=limit,
        ).records
        for record in records:
            if record.run_id == context.run.run_id:
                yield asset, record
