"""`steering.plan`'s rows from the warehouse's facts, without Dagster (PostgreSQL and SQLite)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools

import pytest
import sqlalchemy as sa

from jobs_platform.dead_letter.entries import DeadLetter, active_entry
from jobs_platform.dead_letter.releases import RequeuedBy
from jobs_platform.engine.decisions import RetryBudget
from jobs_platform.errors import Classification
from jobs_platform.steering.estimate import History, estimate, median, progress, runs_at_once
from jobs_platform.steering.holds import Hold, HoldReason, Holds
from jobs_platform.steering.pauses import Pauses
from jobs_platform.steering.plan import Backfill, plan_rows
from jobs_platform.steering.plan_circuits import read_circuits
from jobs_platform.steering.plan_facts import read_facts
from jobs_platform.steering.plan_holds import read_holds
from jobs_platform.steering.plan_readiness import NotReady, ask_readiness
from jobs_platform.steering.plan_row import Action, Reason
from jobs_platform.store.attempts import AttemptFailure, Attempts
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.partitions import Partitions, PartitionStatus
from jobs_platform.store.schema import circuits, leases

ASSET = "events"
BUDGET = RetryBudget(max_attempts=3, base_delay_seconds=1.0, lease_seconds=30.0)
BACKFILL = Backfill(ASSET, version="2", fingerprinted=True, max_redrives=1, budget=BUDGET)


def rows(connection, keys, backfill=BACKFILL, fingerprints=None, upstream=None):
    facts = read_facts(
        connection, DATABASE_CLOCK, ASSET, keys, upstream, max_attempts=BUDGET.max_attempts
    )
    holds = read_holds(connection, ASSET, keys)
    return {
        row.partition: row for row in plan_rows(backfill, keys, facts, fingerprints or {}, holds)
    }


_tokens = itertools.count(1)


def started_attempt(connection, partition: str) -> int:
    """An attempt whose worker never reported (its lease gone): a crash, once found."""
    attempt_id, _ = Attempts(DATABASE_CLOCK).start(
        connection,
        asset=ASSET,
        partition=partition,
        episode=1,
        run_id="r",
        step_retry=0,
        token=next(_tokens),
        holder="h",
        correlation_id=None,
        code_version="2",
    )
    return attempt_id


def failed_attempt(connection, partition: str, error_class: str) -> None:
    attempts = Attempts(DATABASE_CLOCK)
    attempt_id = started_attempt(connection, partition)
    attempts.finish(
        connection, attempt_id, AttemptFailure(Classification(error_class), "OSError", "down")
    )


def test_a_paused_backfill_skips_every_partition_the_gate_lets_through(connection):
    Partitions(DATABASE_CLOCK).set_status(connection, ASSET, "b", PartitionStatus.FAILED)
    failed_attempt(connection, "c", "terminal")
    DeadLetter(DATABASE_CLOCK).quarantine_partition(connection, ASSET, "c", 1)
    Pauses(DATABASE_CLOCK).pause(connection, ASSET, by="alice", reason="maintenance")
    planned = rows(connection, ["a", "b", "c"])
    assert [(row.action, row.reason) for row in planned.values()] == [
        (Action.SKIP, Reason.PAUSED),
        (Action.SKIP, Reason.PAUSED),
        (Action.SKIP, Reason.QUARANTINED),  # the gate refuses it first, as an attempt's does
    ]


def test_a_partition_held_for_its_input_is_not_ready(connection):
    Holds(DATABASE_CLOCK).hold(connection, ASSET, "b", HoldReason.NOT_READY, run_id="r")
    planned = rows(connection, ["a", "b"])
    assert (planned["a"].reason, planned["b"].reason) == (Reason.MISSING, Reason.NOT_READY)


def test_an_outage_entry_cools_down_until_its_redrives_run_out(connection):
    failed_attempt(connection, "a", "retryable")
    failed_attempt(connection, "b", "retryable")
    dead_letter = DeadLetter(DATABASE_CLOCK)
    dead_letter.quarantine_partition(connection, ASSET, "a", 1)
    entry_b = dead_letter.quarantine_partition(connection, ASSET, "b", 1)
    # b was redriven once before (the limit is 1 here), and quarantined again.
    dead_letter.release_entries(
        connection, [active_entry(connection, ASSET, "b")], by=RequeuedBy.REDRIVE, reason="cooldown"
    )
    failed_attempt(connection, "b", "retryable")
    dead_letter.quarantine_partition(connection, ASSET, "b", 2)
    assert entry_b
    planned = rows(connection, ["a", "b"])
    assert planned["a"].reason is Reason.COOLING_DOWN
    assert planned["a"].until is not None
    assert planned["a"].until > DATABASE_CLOCK.now(connection) + dt.timedelta(seconds=800)
    assert planned["b"].reason is Reason.QUARANTINED
    # Without the redrive (redrive=False), nothing cools down: each waits for a person.
    unredriven = Backfill(ASSET, version="2", fingerprinted=True, redrive=False)
    assert rows(connection, ["a"], unredriven)["a"].reason is Reason.QUARANTINED


def test_a_done_partition_without_a_fingerprint_is_read_again(connection):
    Partitions(DATABASE_CLOCK).set_status(
        connection, ASSET, "a", PartitionStatus.DONE, fingerprint="content@2"
    )
    unfingerprinted = Backfill(ASSET, version="2", fingerprinted=False)
    assert rows(connection, ["a"], unfingerprinted)["a"].reason is Reason.NO_FINGERPRINT
    fingerprinted = rows(connection, ["a"], fingerprints={"a": "content@2"})["a"]
    assert (fingerprinted.action, fingerprinted.reason) == (Action.SKIP, Reason.DONE_UNCHANGED)


def test_a_partition_reading_an_upstream_not_done_names_it(connection):
    Partitions(DATABASE_CLOCK).set_status(connection, "source", "a", PartitionStatus.DONE)
    Partitions(DATABASE_CLOCK).set_status(connection, "source", "b", PartitionStatus.FAILED)
    upstream = {"a": [("source", "a")], "b": [("source", "b")], "c": [("source", "c")]}
    planned = rows(connection, ["a", "b", "c"], upstream=upstream)
    assert planned["a"].reason is Reason.MISSING
    assert (planned["b"].reason, planned["b"].upstream) == (Reason.BLOCKED, "source/b")
    assert (planned["c"].reason, planned["c"].upstream) == (Reason.BLOCKED, "source/c")


def test_the_estimate_is_the_p50_times_the_count_over_the_runs_at_once():
    history = History(partitions=3, p50_seconds=2.0, p50_rows=100)
    assert runs_at_once(90, 30) == 3
    assert runs_at_once(90, None) == 1  # single_run()
    assert runs_at_once(0, 30) == 1
    assert (estimate(90, 30, history).rows, estimate(90, 30, history).seconds) == (9000, 60.0)
    assert estimate(90, 30, None).as_dict()["history"] == "no history"
    assert median([5.0, 1.0, 3.0, 100.0]) == 3.0


def test_progress_counts_what_remains_and_its_eta():
    going = progress(
        done=10, missing=50, failed=10, quarantined=2, p50_seconds=3.0, partitions_per_run=30
    )
    assert going.as_dict() == {"done": 10, "remaining": 60, "failing": 12, "eta_seconds": 90.0}
    unknown = progress(
        done=0, missing=5, failed=0, quarantined=0, p50_seconds=None, partitions_per_run=None
    )
    assert unknown.eta_seconds is None


def test_crashes_that_spent_the_budget_are_quarantined_by_the_launch_not_run(connection):
    # a: two crashes recorded and a third attempt that never reported (the budget is 3).
    failed_attempt(connection, "a", "crash")
    failed_attempt(connection, "a", "crash")
    started_attempt(connection, "a")
    # b: the same, but its partition was marked failed by a retryable failure in between.
    failed_attempt(connection, "b", "crash")
    failed_attempt(connection, "b", "retryable")
    failed_attempt(connection, "b", "crash")
    Partitions(DATABASE_CLOCK).set_status(connection, ASSET, "b", PartitionStatus.FAILED)
    # c: two crashes only; d: three failures not counted (lost leases).
    failed_attempt(connection, "c", "crash")
    started_attempt(connection, "c")
    for _ in range(3):
        failed_attempt(connection, "d", "lease_lost")
    planned = rows(connection, ["a", "b", "c", "d"])
    assert [(row.action, row.reason, row.failures) for row in planned.values()] == [
        (Action.SKIP, Reason.BUDGET_SPENT, 3),
        (Action.SKIP, Reason.BUDGET_SPENT, 3),
        (Action.RUN, Reason.MISSING, None),
        (Action.RUN, Reason.MISSING, None),
    ]
    assert planned["a"].as_dict()["failures"] == 3
    # A requeue starts a new episode: the spent one is not the launch's any more.
    Partitions(DATABASE_CLOCK).set_status(connection, ASSET, "a", PartitionStatus.FAILED, episode=2)
    assert rows(connection, ["a"])["a"].reason is Reason.FAILED_DUE


def _hold(partition: str, since: dt.datetime) -> Hold:
    return Hold(ASSET, partition, HoldReason.NOT_READY, since, run_id="r", held_at=since)


def test_ready_is_asked_in_order_and_a_partition_held_past_max_wait_says_so():
    now = dt.datetime(2026, 12, 6, 3, 0, tzinfo=dt.UTC)
    held = {"b": _hold("b", now - dt.timedelta(hours=7)), "c": _hold("c", now)}
    asked = []

    def is_ready(key: str) -> bool:
        asked.append(key)
        if key == "d":
            raise OSError("bucket unreachable")
        return key == "a"

    readiness = ask_readiness(
        ["a", "b", "c", "d"], is_ready, held, max_wait=dt.timedelta(hours=6), now=now
    )
    assert asked == ["a", "b", "c", "d"]
    assert readiness.not_ready == {
        "b": NotReady(since=now - dt.timedelta(hours=7), past_max_wait=True),
        "c": NotReady(since=now, past_max_wait=False),
        "d": NotReady(error="OSError: bucket unreachable"),
    }
    assert readiness.unasked == frozenset()


def test_an_expensive_ready_is_asked_within_the_budget_and_the_rest_are_left_unasked():
    ticks = itertools.count(0.0, 4.0)  # each question costs 4 s on this clock
    readiness = ask_readiness(
        ["a", "b", "c", "d", "e"],
        lambda key: False,
        {},
        max_wait=None,
        now=dt.datetime(2026, 12, 6, tzinfo=dt.UTC),
        budget_seconds=10.0,
        monotonic=lambda: next(ticks),
    )
    assert sorted(readiness.not_ready) == ["a", "b"]
    assert readiness.unasked == frozenset({"c", "d", "e"})


@pytest.mark.parametrize("paused", [False, True])
def test_not_ready_comes_after_the_gate_and_the_pause_and_before_the_lease(connection, paused):
    failed_attempt(connection, "q", "terminal")
    DeadLetter(DATABASE_CLOCK).quarantine_partition(connection, ASSET, "q", 1)
    if paused:
        Pauses(DATABASE_CLOCK).pause(connection, ASSET, by="alice", reason="window")
    facts = read_facts(connection, DATABASE_CLOCK, ASSET, ["a", "q"])
    holds = read_holds(connection, ASSET, ["a", "q"])
    since = DATABASE_CLOCK.now(connection)
    not_ready = {"a": NotReady(since), "q": NotReady(since)}
    planned = plan_rows(
        BACKFILL, ["a", "q"], facts, {}, dataclasses.replace(holds, not_ready=not_ready)
    )
    assert [row.reason for row in planned] == [
        Reason.PAUSED if paused else Reason.NOT_READY,
        Reason.QUARANTINED,
    ]


def open_circuit(connection, next_probe_in: float, probe: str | None = None) -> None:
    """An open circuit of the backfill, as the breaker left it (`steering.circuits`)."""
    now = DATABASE_CLOCK.now(connection)
    connection.execute(
        sa.insert(circuits).values(
            asset=ASSET,
            signature="a1b2c3d4",
            error_class="retryable",
            error_type="HTTPError",
            last_error="503 Service Unavailable",
            opened_at=now - dt.timedelta(minutes=1),
            partitions=5,
            times_opened=1,
            probes_failed=0,
            snoozes=0,
            next_probe_at=now + dt.timedelta(seconds=next_probe_in),
            probe_partition=probe,
            probe_token=7 if probe else None,
        )
    )
    if probe is not None:
        connection.execute(
            sa.insert(leases).values(
                asset=ASSET,
                partition=probe,
                token=7,
                holder="another-host:1",
                run_id="probing",
                acquired_at=now,
                expires_at=now + dt.timedelta(minutes=5),
            )
        )


def circuit_rows(connection, keys):
    facts = read_facts(connection, DATABASE_CLOCK, ASSET, keys)
    state = read_circuits(connection, ASSET, facts.now)
    return plan_rows(BACKFILL, keys, facts, {}, read_holds(connection, ASSET, keys), state)


def test_an_open_circuit_skips_every_partition_until_its_probe_is_due(connection):
    failed_attempt(connection, "q", "terminal")
    DeadLetter(DATABASE_CLOCK).quarantine_partition(connection, ASSET, "q", 1)
    open_circuit(connection, next_probe_in=60)
    planned = circuit_rows(connection, ["a", "q", "b"])
    assert [(row.action, row.reason) for row in planned] == [
        (Action.SKIP, Reason.CIRCUIT_OPEN),
        (Action.SKIP, Reason.QUARANTINED),  # the gate first, as an attempt's
        (Action.SKIP, Reason.CIRCUIT_OPEN),
    ]
    assert planned[0].signature == "a1b2c3d4"
    assert planned[0].as_dict()["next_probe_at"] > DATABASE_CLOCK.now(connection).isoformat()


def test_the_first_partition_to_reach_a_due_circuit_is_its_probe(connection):
    failed_attempt(connection, "q", "terminal")
    DeadLetter(DATABASE_CLOCK).quarantine_partition(connection, ASSET, "q", 1)
    open_circuit(connection, next_probe_in=-1)
    planned = circuit_rows(connection, ["q", "a", "b", "c"])
    assert [(row.partition, row.action, row.reason) for row in planned] == [
        ("q", Action.SKIP, Reason.QUARANTINED),
        ("a", Action.RUN, Reason.MISSING),
        ("b", Action.SKIP, Reason.CIRCUIT_OPEN),
        ("c", Action.SKIP, Reason.CIRCUIT_OPEN),
    ]
    assert planned[1].note is not None and "probe" in planned[1].note


def test_a_probe_still_trying_snoozes_every_other_partition(connection):
    open_circuit(connection, next_probe_in=-1, probe="p")
    planned = circuit_rows(connection, ["a", "p"])
    assert [(row.reason, row.probe) for row in planned] == [
        (Reason.CIRCUIT_OPEN, "p"),
        (Reason.IN_FLIGHT, None),  # the probe itself: its lease is live
    ]
