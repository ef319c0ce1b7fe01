"""Specifications of the circuit breaker per cause (`steering.circuits`), on real warehouses.

Each test runs attempts through the plain-Python runner (no Dagster) on a clock it moves
by hand: 3 distinct partitions failing with one cause within 60 s open the backfill's
circuit; probes try after 10 s, then 20 s, up to 40 s.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
import sqlalchemy as sa

from jobs_platform.alerts.notices import notices_of
from jobs_platform.engine.decisions import NextStep
from jobs_platform.engine.outcomes import Busy, Failed, Outcome, PartitionReport
from jobs_platform.engine.runner import Attempter, PartitionRunner
from jobs_platform.errors import RetryableError, TerminalError
from jobs_platform.settings import Settings
from jobs_platform.steering.circuit_report import open_circuits
from jobs_platform.steering.circuit_rule import CircuitRule, probe_interval
from jobs_platform.steering.circuits import CIRCUIT_CLOSED, CIRCUIT_OPENED, CircuitOpen
from jobs_platform.store.attempts import budget_state
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import attempts, create_user_tables, quarantine
from jobs_platform_tests.clocks import ManualClock
from jobs_platform_tests.engine.test_runner import ItemsInput, items_spec, items_table

OUTAGE = "source answered 503 Service Unavailable for {day}"
DAYS = [f"2024-01-{day:02d}" for day in range(1, 11)]


@pytest.fixture
def circuit_settings(upgraded_url, tmp_path) -> Settings:
    """A warehouse as a deploy leaves it, with the backfill's `items` table."""
    return _circuit_settings(upgraded_url, tmp_path)


@pytest.fixture
def pg_circuit_settings(upgraded_pg_url, tmp_path) -> Settings:
    """The same on PostgreSQL only: SQLite has one writer, so two workers cannot both be in
    the gate at once (the second's snooze waits for the probe's read)."""
    return _circuit_settings(upgraded_pg_url, tmp_path)


def _circuit_settings(url: str, tmp_path) -> Settings:
    create_user_tables(warehouse_engine(url), items_table())
    return Settings(
        database_url=url,
        landing_root=str(tmp_path),
        max_attempts=3,
        retry_delay_seconds=0.01,
        lease_seconds=5,
        circuit_partitions=3,
        circuit_window_seconds=60,
        circuit_probe_seconds=10,
        circuit_probe_max_seconds=40,
    )


@pytest.fixture
def source() -> ItemsInput:
    return ItemsInput(rows={day: [(index, day)] for index, day in enumerate(DAYS)})


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def runner(source, circuit_settings, clock) -> PartitionRunner:
    return PartitionRunner(items_spec(source), circuit_settings, clock=clock)


def attempt(runner: PartitionRunner, day: str) -> Outcome:
    return runner.attempt(day, Attempter(run_id="run-1"), chunk_rows=10)


def fail(runner: PartitionRunner, source: ItemsInput, day: str, error: Exception | None = None):
    source.errors.append(error or RetryableError(OUTAGE.format(day=day)))
    outcome = attempt(runner, day)
    assert isinstance(outcome, Failed), outcome
    return outcome


def circuits_of(runner: PartitionRunner, asset: str = "items") -> list:
    with runner.engine.connect() as connection:
        return open_circuits(connection, [asset])


def attempts_recorded(runner: PartitionRunner) -> int:
    with runner.engine.connect() as connection:
        return connection.execute(sa.select(sa.func.count()).select_from(attempts)).scalar_one()


def counted_failures(runner: PartitionRunner, day: str) -> int:
    with runner.engine.connect() as connection:
        return budget_state(connection, "items", day, 1).counted_failures


def open_the_circuit(runner: PartitionRunner, source: ItemsInput) -> None:
    for day in DAYS[:3]:
        fail(runner, source, day)
    assert len(circuits_of(runner)) == 1


def test_one_cause_on_n_distinct_partitions_within_the_window_opens_the_circuit(runner, source):
    open_the_circuit(runner, source)
    before = attempts_recorded(runner)

    snoozed = attempt(runner, DAYS[3])

    assert isinstance(snoozed, Busy)
    assert isinstance(snoozed.error, CircuitOpen)
    assert snoozed.decision.next_step is NextStep.SNOOZE
    assert snoozed.decision.delay_seconds >= 10  # about when the probe is due
    assert attempts_recorded(runner) == before  # no attempt started, none spent
    assert DAYS[3] not in source.reads
    (circuit,) = circuits_of(runner)
    assert (circuit.partitions, circuit.snoozes, circuit.error_class) == (3, 1, "retryable")


def test_n_minus_one_partitions_do_not_open_it(runner, source):
    for day in DAYS[:2]:
        fail(runner, source, day)

    assert circuits_of(runner) == []
    assert isinstance(attempt(runner, DAYS[2]), PartitionReport)


def test_one_partition_failing_n_times_does_not_open_it(runner, source):
    for _ in range(2):
        fail(runner, source, DAYS[0])
    fail(runner, source, DAYS[1])

    assert circuits_of(runner) == []


def test_failures_outside_the_window_do_not_open_it(runner, source, clock):
    fail(runner, source, DAYS[0])
    clock.advance(61)
    fail(runner, source, DAYS[1])
    fail(runner, source, DAYS[2])

    assert circuits_of(runner) == []


def test_terminal_failures_never_open_it(runner, source):
    for day in DAYS[:4]:
        fail(runner, source, day, TerminalError(f"malformed row in {day}"))

    assert circuits_of(runner) == []


def test_another_cause_is_counted_apart(runner, source):
    for day in DAYS[:2]:
        fail(runner, source, day)
    for day in DAYS[2:4]:
        fail(runner, source, day, RetryableError(f"connection reset by peer reading {day}"))

    assert circuits_of(runner) == []


def test_another_backfill_is_unaffected(runner, source, circuit_settings, clock):
    open_the_circuit(runner, source)
    other = PartitionRunner(
        replace(items_spec(source), asset="other_items"), circuit_settings, clock=clock
    )

    assert isinstance(attempt(other, DAYS[5]), PartitionReport)
    assert circuits_of(runner, "other_items") == []


def test_the_failures_that_opened_it_and_those_while_open_spend_no_budget(runner, source):
    fail(runner, source, DAYS[0])
    assert counted_failures(runner, DAYS[0]) == 1

    fail(runner, source, DAYS[1])
    fail(runner, source, DAYS[2])

    assert [counted_failures(runner, day) for day in DAYS[:3]] == [0, 0, 0]
    with runner.engine.connect() as connection:
        assert connection.execute(sa.select(quarantine)).first() is None


def test_a_probe_tries_after_the_interval_and_its_success_closes_the_circuit(runner, source, clock):
    open_the_circuit(runner, source)
    clock.advance(10)

    probe = attempt(runner, DAYS[3])

    assert isinstance(probe, PartitionReport)
    assert circuits_of(runner) == []
    assert isinstance(attempt(runner, DAYS[0]), PartitionReport)  # snoozed ones proceed


def test_a_failed_probe_is_forgiven_and_doubles_the_interval(runner, source, clock):
    open_the_circuit(runner, source)
    clock.advance(10)

    probe = fail(runner, source, DAYS[3])

    assert probe.decision.next_step is NextStep.RETRY  # not quarantined, nothing spent
    assert counted_failures(runner, DAYS[3]) == 0
    (circuit,) = circuits_of(runner)
    assert circuit.probes_failed == 1
    assert circuit.probe_partition is None
    clock.advance(probe_interval(1, CircuitRule(3, 60, 10, 40)) - 1)
    assert isinstance(attempt(runner, DAYS[4]), Busy)  # 19 s: not yet
    clock.advance(1)
    assert isinstance(attempt(runner, DAYS[4]), PartitionReport)


def test_the_interval_grows_to_its_cap():
    rule = CircuitRule(partitions=5, window_seconds=300, probe_seconds=10, probe_max_seconds=300)

    assert [probe_interval(n, rule) for n in range(7)] == [10, 20, 40, 80, 160, 300, 300]


def test_one_probe_at_a_time_across_two_workers(source, pg_circuit_settings, clock):
    circuit_settings = pg_circuit_settings
    first, second = (
        PartitionRunner(items_spec(source), circuit_settings, clock=clock) for _ in range(2)
    )
    open_the_circuit(first, source)
    clock.advance(10)
    source.hold = threading.Event()
    probed: list[Outcome] = []
    worker = threading.Thread(target=lambda: probed.append(attempt(first, DAYS[3])))
    worker.start()
    try:
        assert source.reading.wait(timeout=30)

        other = attempt(second, DAYS[4])
    finally:
        source.hold.set()
        worker.join(timeout=30)

    assert isinstance(other, Busy)
    assert isinstance(other.error, CircuitOpen)
    assert DAYS[4] not in source.reads
    assert isinstance(probed[0], PartitionReport)
    assert circuits_of(first) == []


def test_a_crashed_probe_frees_the_slot_when_its_lease_expires(runner, source, clock):
    open_the_circuit(runner, source)
    clock.advance(10)
    # A probe that took its lease, then died without a word.
    lease = runner.store.leases.acquire(
        "items", DAYS[3], holder="dead-worker", run_id=None, ttl_seconds=5
    ).lease
    with runner.engine.begin() as connection:
        rule = CircuitRule.from_settings(runner.settings)
        runner.store.circuits.admit(connection, rule, "items", DAYS[3], lease.token)

    assert isinstance(attempt(runner, DAYS[4]), Busy)
    clock.advance(6)
    assert isinstance(attempt(runner, DAYS[4]), PartitionReport)
    assert circuits_of(runner) == []


def test_the_breaker_is_off_at_zero_partitions(source, circuit_settings, clock):
    runner = PartitionRunner(
        items_spec(source), replace(circuit_settings, circuit_partitions=0), clock=clock
    )
    for day in DAYS[:5]:
        fail(runner, source, day)

    assert circuits_of(runner) == []


def test_opening_and_closing_are_each_noticed_once(runner, source, clock):
    open_the_circuit(runner, source)
    assert isinstance(attempt(runner, DAYS[3]), Busy)
    clock.advance(10)
    assert isinstance(attempt(runner, DAYS[4]), PartitionReport)  # the probe closes it

    with runner.engine.connect() as connection:
        notices = notices_of(connection, ["items"])
    assert [notice.kind for notice in notices] == [CIRCUIT_OPENED, CIRCUIT_CLOSED]
    opened, closed = notices
    assert opened.key == closed.key  # one occurrence: its signature and when it opened
    assert (opened.details["partitions"], closed.details["probe_partition"]) == (3, DAYS[4])
