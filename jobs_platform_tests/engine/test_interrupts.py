"""A second interrupt during an attempt's own bookkeeping changes nothing.

Real signals sent to this process at exact instants: the first while a chunk is read (as a
process group's SIGTERM lands in a slow chunk), the second inside the statements that
record how the attempt ended (as the SIGINT Dagster's executor forwards a few
milliseconds later). SIGINT and SIGTERM both raise here, as in a Dagster step.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from jobs_platform.engine.interrupts import InterruptShield
from jobs_platform.engine.runner import Attempter, PartitionReport, PartitionRunner
from jobs_platform.errors import RetryableError
from jobs_platform.settings import Settings
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import create_user_tables, leases, quarantine
from jobs_platform_tests.engine.test_runner import (
    DAY,
    ItemsInput,
    history,
    items_spec,
    items_table,
    stored_items,
)

ROWS = [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")]
# The statements of the interrupted attempt's end, in order: the seen keys dropped, then
# the fenced record (the owner check, the attempt, the budget, the partition, the lease)
# and its commit. Each is where the second interrupt lands in one test.
BOOKKEEPING = [
    "DROP TABLE jp_stage_seen_keys",
    "SELECT jp_leases.token",
    "UPDATE jp_attempts",
    "SELECT coalesce(sum(",
    "INSERT INTO jp_partitions",
    "UPDATE jp_leases SET holder",
    "COMMIT",  # the commit of that record
]


@pytest.fixture
def raising_handlers() -> Iterator[None]:
    """SIGINT and SIGTERM raise, as in a Dagster step (KeyboardInterrupt here)."""
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum in previous:
        signal.signal(signum, signal.default_int_handler)
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)


@pytest.fixture
def items_input() -> ItemsInput:
    return ItemsInput(rows={DAY: list(ROWS)})


@pytest.fixture
def runner(upgraded_url, tmp_path, items_input, raising_handlers) -> PartitionRunner:
    """One attempt per partition: an interrupted attempt taken for a crash would spend it."""
    create_user_tables(warehouse_engine(upgraded_url), items_table())
    settings = Settings(
        database_url=upgraded_url,
        landing_root=str(tmp_path),
        max_attempts=1,
        retry_delay_seconds=0.01,
        lease_seconds=5,
        # The reader raises the first signal between two chunks: on the engine's thread.
        read_ahead=False,
    )
    return PartitionRunner(items_spec(items_input), settings)


class SignalAt:
    """Sends `signum` to this process when the statement `at` runs, once `arm()` was called.

    `at` is the start of a statement, or "COMMIT" for the commit after the lease release.
    """

    def __init__(self, engine: sa.Engine, signum: int, at: str):
        self.signum, self.at = signum, at
        self.armed = self.sent = self._released = False
        event.listen(engine, "before_cursor_execute", self._statement)
        event.listen(engine, "commit", self._commit)

    def arm(self) -> None:
        self.armed = True

    def _statement(self, connection, cursor, statement: str, *args) -> None:
        text = " ".join(statement.split())
        if self.armed and self.at == "COMMIT" and text.startswith("UPDATE jp_leases SET holder"):
            self._released = True
        elif self.armed and not self.sent and text.startswith(self.at):
            self._send()

    def _commit(self, connection) -> None:
        if self.armed and not self.sent and self.at == "COMMIT" and self._released:
            self._send()

    def _send(self) -> None:
        self.sent = True
        signal.raise_signal(self.signum)


def send_first_signal(items_input: ItemsInput, second: SignalAt, signum: int) -> None:
    """`signum` once, before chunk 1 is read; `second` goes off from then on."""

    def send() -> None:
        del items_input.before_chunk[1]
        second.arm()
        signal.raise_signal(signum)

    items_input.before_chunk[1] = send


def lease_holder(runner: PartitionRunner) -> str | None:
    with runner.engine.connect() as connection:
        return connection.execute(sa.select(leases.c.holder)).scalar_one()


def quarantined(runner: PartitionRunner) -> int:
    with runner.engine.connect() as connection:
        return connection.execute(sa.select(sa.func.count()).select_from(quarantine)).scalar_one()


def attempt(runner: PartitionRunner):
    return runner.attempt(DAY, Attempter(run_id="run-1"), chunk_rows=2)


@pytest.mark.parametrize("at", BOOKKEEPING)
def test_a_second_interrupt_inside_the_bookkeeping_changes_nothing(runner, items_input, at):
    second = SignalAt(runner.engine, signal.SIGINT, at)
    send_first_signal(items_input, second, signal.SIGTERM)

    with pytest.raises(KeyboardInterrupt):
        attempt(runner)

    assert second.sent
    assert history(runner) == [(1, 1, "failed", "interrupted")]
    assert lease_holder(runner) is None
    assert quarantined(runner) == 0
    # Nothing was counted: the one attempt of the budget finishes the partition.
    assert isinstance(attempt(runner), PartitionReport)
    assert [row[:2] for row in stored_items(runner)] == ROWS


@pytest.mark.parametrize(
    "first, second",
    [(signal.SIGINT, signal.SIGTERM), (signal.SIGINT, signal.SIGINT)],
    ids=["sigint-then-sigterm", "sigint-twice"],
)
def test_the_order_of_the_two_signals_does_not_matter(runner, items_input, first, second):
    injected = SignalAt(runner.engine, second, "UPDATE jp_attempts")
    send_first_signal(items_input, injected, first)

    with pytest.raises(KeyboardInterrupt):
        attempt(runner)

    assert injected.sent
    assert history(runner) == [(1, 1, "failed", "interrupted")]
    assert lease_holder(runner) is None


def test_a_signal_while_a_failure_is_recorded_stops_the_step_after_the_record(runner, items_input):
    injected = SignalAt(runner.engine, signal.SIGTERM, "UPDATE jp_attempts")

    def outage() -> None:
        del items_input.before_chunk[1]
        injected.arm()
        raise RetryableError("connection reset")

    items_input.before_chunk[1] = outage

    with pytest.raises(KeyboardInterrupt):
        attempt(runner)

    assert injected.sent
    assert history(runner) == [(1, 1, "failed", "retryable")]  # the failure, recorded whole
    assert lease_holder(runner) is None


def test_a_signal_while_the_attempt_starts_interrupts_it_before_any_work(runner, items_input):
    injected = SignalAt(runner.engine, signal.SIGTERM, "INSERT INTO jp_attempts")
    injected.arm()

    with pytest.raises(KeyboardInterrupt):
        attempt(runner)

    assert injected.sent
    assert items_input.reads == []
    assert history(runner) == [(1, 1, "failed", "interrupted")]
    assert lease_holder(runner) is None


# The shield alone, without a database.


def test_a_signal_outside_the_work_is_held_then_delivered_at_the_end(raising_handlers):
    shield = InterruptShield()
    with pytest.raises(KeyboardInterrupt), shield:
        signal.raise_signal(signal.SIGTERM)
        held = True  # reached: the signal did not raise here
    assert held and not shield.interrupted


def test_the_first_signal_in_the_work_raises_and_the_next_ones_are_dropped(raising_handlers):
    with InterruptShield() as shield:
        with pytest.raises(KeyboardInterrupt), shield.delivering():
            signal.raise_signal(signal.SIGTERM)
        with shield.delivering():
            signal.raise_signal(signal.SIGINT)  # held: the work is already interrupted
        signal.raise_signal(signal.SIGINT)
        shield.drop_held()
    assert shield.interrupted
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_a_signal_held_before_the_work_is_raised_when_the_work_starts(raising_handlers):
    ran = False
    with InterruptShield() as shield:
        signal.raise_signal(signal.SIGINT)
        with pytest.raises(KeyboardInterrupt), shield.delivering():
            ran = True
    assert not ran and shield.interrupted


def test_a_signal_inside_a_held_commit_waits_for_deliver_held(raising_handlers):
    committed = False
    with InterruptShield() as shield, pytest.raises(KeyboardInterrupt), shield.delivering():
        with shield.holding():
            signal.raise_signal(signal.SIGTERM)
            committed = True  # reached: the commit was not cut short
        shield.deliver_held()
    assert committed and shield.interrupted


def test_ignored_signals_and_other_threads_are_left_alone(raising_handlers):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with InterruptShield():
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    seen = []

    def in_a_thread() -> None:
        with InterruptShield() as shield, shield.delivering():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler]
