"""Specifications of one partition attempt, run by the plain-Python runner (no Dagster).

Each test builds a tiny backfill on its own `items` table whose input is a Python list the
test controls, so that an attempt can be made to succeed, fail, block or crash at will.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform.dead_letter.entries import DeadLetter, latest_entry
from jobs_platform.engine.decisions import NextStep
from jobs_platform.engine.outcomes import BudgetSpent, Busy, Failed, Outcome, Refused
from jobs_platform.engine.runner import Attempter, PartitionReport, PartitionRunner
from jobs_platform.engine.spec import BackfillSpec, PartitionInput
from jobs_platform.errors import AttemptInterrupted, Classification, RetryableError, TerminalError
from jobs_platform.settings import Settings
from jobs_platform.store.attempts import attempt_history
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.holders import HolderIdentity
from jobs_platform.store.leases import LeaseBusy, Leases, this_holder
from jobs_platform.store.partitions import partition_rows
from jobs_platform.store.schema import EntryStatus, create_user_tables
from jobs_platform.writer.upsert import UpsertCounts
from jobs_platform_tests.waiting import wait_for

ASSET, DAY = "items", "2024-01-03"
MAX_ATTEMPTS = 3


@dataclass
class ItemsInput:
    """The input of every partition: its rows, and errors its next reads raise first."""

    rows: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    reading: threading.Event = field(default_factory=threading.Event)
    hold: threading.Event | None = None
    before_chunk: dict[int, Callable[[], object]] = field(default_factory=dict)

    def read_chunks(self, source: PartitionInput) -> Iterator[pd.DataFrame]:
        self.reads.append(source.partition_key)
        self.reading.set()
        if self.hold is not None and not self.hold.wait(timeout=30):
            raise AssertionError("the test never released the reader")
        if self.errors:
            raise self.errors.pop(0)
        rows = self.rows.get(source.partition_key, [])
        for index, start in enumerate(range(0, len(rows), source.chunk_rows)):
            if index in self.before_chunk:
                self.before_chunk[index]()
            chunk = rows[start : start + source.chunk_rows]
            yield pd.DataFrame(
                {
                    "id": [row_id for row_id, _ in chunk],
                    "value": [value for _, value in chunk],
                    "part": source.partition_key,
                }
            )


def items_table() -> sa.Table:
    return sa.Table(
        "items",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("value", sa.Text),
        sa.Column("part", sa.Text, nullable=False),
    )


def items_spec(source: ItemsInput) -> BackfillSpec:
    return BackfillSpec(
        asset=ASSET,
        table=items_table(),
        key=("id",),
        read_chunks=source.read_chunks,
        partition_scope=lambda table, partition: table.c.part == partition,
    )


@pytest.fixture
def settings(upgraded_url, tmp_path) -> Settings:
    """A warehouse as a deploy leaves it: upgraded, with the backfill's `items` table."""
    create_user_tables(warehouse_engine(upgraded_url), items_table())
    return Settings(
        database_url=upgraded_url,
        landing_root=str(tmp_path),
        max_attempts=MAX_ATTEMPTS,
        retry_delay_seconds=0.01,
        lease_seconds=5,
    )


@pytest.fixture
def items_input() -> ItemsInput:
    return ItemsInput(rows={DAY: [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")]})


@pytest.fixture
def runner(items_input, settings) -> PartitionRunner:
    return PartitionRunner(items_spec(items_input), settings)


def attempt(runner: PartitionRunner, step_retry: int = 0) -> Outcome:
    return runner.attempt(DAY, Attempter(run_id="run-1", step_retry=step_retry), chunk_rows=2)


def history(runner: PartitionRunner) -> list[tuple[int, int, str, str | None]]:
    """(episode, attempt, outcome, error_class) of every attempt, oldest first."""
    with runner.engine.connect() as connection:
        return [
            (row.episode, row.attempt, row.outcome, row.error_class)
            for row in attempt_history(connection, ASSET, DAY)
        ]


def stored_items(runner: PartitionRunner) -> list[tuple]:
    table = runner.spec.table
    with runner.engine.connect() as connection:
        return [tuple(row) for row in connection.execute(sa.select(table).order_by(table.c.id))]


def quarantine_entry(runner: PartitionRunner) -> sa.Row:
    with runner.engine.connect() as connection:
        return latest_entry(connection, ASSET, DAY)


def partition_state(runner: PartitionRunner) -> tuple[str, int]:
    with runner.engine.connect() as connection:
        (row,) = partition_rows(connection, ASSET)
        return row.status, row.episode


def fail_until_quarantined(runner: PartitionRunner, items_input: ItemsInput) -> Failed:
    items_input.errors.extend(RetryableError("upstream timed out") for _ in range(MAX_ATTEMPTS))
    results = [attempt(runner) for _ in range(MAX_ATTEMPTS)]
    assert all(isinstance(r, Failed) for r in results), results
    assert [r.decision.next_step for r in results] == [NextStep.RETRY] * 2 + [NextStep.QUARANTINE]
    return results[-1]


# Success


def test_successful_attempt_reports_rows_chunks_and_counts(runner):
    report = attempt(runner)

    assert isinstance(report, PartitionReport)
    assert (report.attempt, report.input_rows) == (1, 5)
    assert report.counts == UpsertCounts(inserted=5)
    assert (report.chunks_written, report.chunks_resumed, report.rows_swept) == (3, 0, 0)


def test_successful_attempt_writes_the_input_and_marks_the_partition_done(runner):
    attempt(runner)

    assert stored_items(runner) == [(i, v, DAY) for i, v in enumerate("abcde", start=1)]
    assert partition_state(runner) == ("done", 1)
    assert history(runner) == [(1, 1, "succeeded", None)]


def test_rerun_with_unchanged_input_resumes_every_chunk_and_writes_nothing(runner):
    attempt(runner)
    before = stored_items(runner)

    report = attempt(runner)

    assert (report.chunks_written, report.chunks_resumed) == (0, 3)
    assert report.counts == UpsertCounts()
    assert stored_items(runner) == before


def test_rerun_after_the_input_changed_converges_to_the_new_input(runner, items_input):
    attempt(runner)
    items_input.rows[DAY] = [(2, "B"), (5, "e"), (6, "f")]

    report = attempt(runner)

    assert report.rows_swept == 3
    assert report.counts == UpsertCounts(inserted=1, updated=1, unchanged=1)
    assert stored_items(runner) == [(2, "B", DAY), (5, "e", DAY), (6, "f", DAY)]


def test_success_leaves_other_partitions_rows_alone(runner, items_input):
    items_input.rows["2024-01-04"] = [(10, "x")]
    runner.attempt("2024-01-04", Attempter(), chunk_rows=2)
    items_input.rows[DAY] = [(1, "only")]

    attempt(runner)

    assert stored_items(runner) == [(1, "only", DAY), (10, "x", "2024-01-04")]


def test_chunk_size_below_one_is_refused(runner):
    with pytest.raises(ValueError, match="chunk_rows must be at least 1"):
        runner.attempt(DAY, Attempter(), chunk_rows=0)


# Retryable failures and the ceiling


def test_retryable_error_gives_retry_and_a_retryable_attempt_row(runner, items_input):
    items_input.errors.append(RetryableError("upstream timed out"))

    failed = attempt(runner)

    assert isinstance(failed, Failed)
    assert failed.decision.next_step is NextStep.RETRY
    assert failed.verdict.classification is Classification.RETRYABLE
    assert (failed.attempt, failed.failures, failed.entry_id) == (1, 1, None)
    assert history(runner) == [(1, 1, "failed", "retryable")]
    assert partition_state(runner) == ("failed", 1)


def test_retry_delay_honours_retry_after(runner, items_input):
    items_input.errors.append(RetryableError("slow down", retry_after=7.0))

    failed = attempt(runner)

    assert failed.decision.next_step is NextStep.RETRY
    assert failed.decision.delay_seconds >= 7.0


def test_retry_after_a_transient_failure_succeeds(runner, items_input):
    items_input.errors.append(RetryableError("upstream timed out"))
    attempt(runner)

    report = attempt(runner)

    assert isinstance(report, PartitionReport)
    assert report.attempt == 2
    assert history(runner) == [(1, 1, "failed", "retryable"), (1, 2, "succeeded", None)]


def test_failure_at_the_attempt_ceiling_quarantines_with_every_attempt_counted(runner, items_input):
    failed = fail_until_quarantined(runner, items_input)

    entry = quarantine_entry(runner)
    assert failed.entry_id == entry.id
    assert (entry.status, entry.attempts, entry.error_class) == ("quarantined", 3, "retryable")
    assert entry.last_error == "upstream timed out"
    assert partition_state(runner) == ("quarantined", 1)


def test_quarantined_partition_is_refused_at_the_gate_and_records_no_attempt(runner, items_input):
    fail_until_quarantined(runner, items_input)
    reads_before = len(items_input.reads)

    refused = attempt(runner)

    assert isinstance(refused, Refused)  # no decision, no attempt: nothing was decided
    entry = quarantine_entry(runner)
    assert (refused.entry_id, refused.entry_class, refused.failures) == (
        entry.id,
        "retryable",
        MAX_ATTEMPTS,
    )
    # The run's failure adds the requeue command, naming the run's code location.
    assert refused.message.startswith("items/2024-01-03 is quarantined (entry ")
    assert refused.message.endswith("; it runs again once requeued")
    assert len(items_input.reads) == reads_before
    assert len(history(runner)) == MAX_ATTEMPTS


def test_attempt_counter_counts_failures_since_the_last_success_only(runner, items_input):
    items_input.errors.append(RetryableError("first outage"))
    attempt(runner)
    assert isinstance(attempt(runner), PartitionReport)
    items_input.errors.extend([RetryableError("second outage"), RetryableError("still out")])
    attempt(runner)

    failed = attempt(runner)

    assert failed.decision.next_step is NextStep.RETRY
    assert failed.failures == 2
    assert failed.attempt == 4


# Terminal failures


def test_terminal_error_is_quarantined_after_exactly_one_attempt(runner, items_input):
    items_input.errors.append(TerminalError("line 3: not valid JSON"))

    failed = attempt(runner)

    assert isinstance(failed, Failed)
    assert failed.decision.next_step is NextStep.QUARANTINE
    assert failed.verdict.classification is Classification.TERMINAL
    assert history(runner) == [(1, 1, "failed", "terminal")]
    entry = quarantine_entry(runner)
    assert (entry.attempts, entry.error_class, entry.last_error) == (
        1,
        "terminal",
        "line 3: not valid JSON",
    )


def test_terminal_error_after_some_chunks_leaves_those_chunks_committed(
    runner, items_input, settings
):
    runner = PartitionRunner(runner.spec, replace(settings, failpoints="read#2=terminal"))

    failed = attempt(runner)

    assert failed.decision.next_step is NextStep.QUARANTINE
    assert [row[0] for row in stored_items(runner)] == [1, 2, 3, 4]


# Requeue


def test_requeue_starts_a_new_episode_and_a_later_success_resolves_the_entry(runner, items_input):
    items_input.errors.append(TerminalError("bad input"))
    attempt(runner)
    with runner.engine.begin() as connection:
        DeadLetter(DATABASE_CLOCK).requeue_partition(connection, ASSET, DAY)

    report = attempt(runner)

    assert isinstance(report, PartitionReport)
    assert report.attempt == 1
    assert quarantine_entry(runner).status == EntryStatus.RESOLVED
    assert partition_state(runner) == ("done", 2)
    assert history(runner) == [(1, 1, "failed", "terminal"), (2, 1, "succeeded", None)]


def test_requeued_partition_has_a_fresh_attempt_budget(runner, items_input):
    fail_until_quarantined(runner, items_input)
    with runner.engine.begin() as connection:
        DeadLetter(DATABASE_CLOCK).requeue_partition(connection, ASSET, DAY)
    items_input.errors.append(RetryableError("one more outage"))

    failed = attempt(runner)

    assert failed.decision.next_step is NextStep.RETRY
    assert (failed.attempt, failed.failures) == (1, 1)
    assert quarantine_entry(runner).status == EntryStatus.REQUEUED


# Not the input's fault


def test_second_worker_snoozes_while_the_first_holds_the_lease(items_input, settings):
    items_input.hold = threading.Event()
    first, second = (PartitionRunner(items_spec(items_input), settings) for _ in range(2))
    outcome: list[Outcome] = []
    worker = threading.Thread(target=lambda: outcome.append(attempt(first)))
    worker.start()
    try:
        assert items_input.reading.wait(timeout=30)

        busy = attempt(second)
    finally:
        items_input.hold.set()
        worker.join(timeout=30)

    assert isinstance(busy, Busy)  # no attempt started, none spent
    assert busy.decision.next_step is NextStep.SNOOZE
    assert busy.decision.delay_seconds > 0
    assert isinstance(busy.error, LeaseBusy)
    assert items_input.reads == [DAY]  # the second worker never read its input
    assert isinstance(outcome[0], PartitionReport)
    assert history(first) == [(1, 1, "succeeded", None)]


def test_interrupted_attempt_is_recorded_and_releases_its_lease(runner, items_input):
    items_input.errors.append(AttemptInterrupted("SIGTERM"))

    with pytest.raises(AttemptInterrupted):
        attempt(runner)
    report = attempt(runner)

    assert isinstance(report, PartitionReport)
    assert history(runner) == [(1, 1, "failed", "interrupted"), (1, 2, "succeeded", None)]


def test_interrupted_attempt_does_not_count_toward_the_ceiling(runner, items_input):
    items_input.errors.extend([AttemptInterrupted("SIGTERM"), RetryableError("outage")])
    with pytest.raises(AttemptInterrupted):
        attempt(runner)

    failed = attempt(runner)

    assert (failed.attempt, failed.failures) == (2, 1)


def test_worker_whose_lease_was_taken_over_cannot_commit_and_snoozes(runner, items_input):
    # The pid is ours but the start time is not: judged a dead (recycled) holder, so
    # another worker may take the lease over while this attempt is still reading.
    here = HolderIdentity.parse(this_holder())
    stale_holder = str(dataclasses.replace(here, start_ticks="0"))

    def take_over() -> None:
        # Chunk 1 is read while chunk 0 commits (`engine.read_ahead`): the take-over waits
        # for that commit, so that it is chunk 1's commit the lost lease refuses.
        wait_for(lambda: len(stored_items(runner)) == 2, timeout=30, what="chunk 0 committed")
        Leases(runner.engine, DATABASE_CLOCK).acquire(
            ASSET, DAY, holder="worker-b", run_id=None, ttl_seconds=60
        )

    items_input.before_chunk[1] = take_over

    failed = runner.attempt(DAY, Attempter(holder=stale_holder), chunk_rows=2)

    assert failed.decision.next_step is NextStep.SNOOZE
    assert failed.verdict.classification is Classification.LEASE_LOST
    assert [row[0] for row in stored_items(runner)] == [1, 2]  # chunk 1 rolled back
    assert history(runner) == [(1, 1, "failed", "lease_lost")]


def test_retry_after_a_failed_commit_resumes_from_the_last_committed_chunk(
    runner, items_input, settings
):
    flaky = PartitionRunner(
        runner.spec, replace(settings, failpoints="before_commit#1=transient*1")
    )
    failed = attempt(flaky, step_retry=0)
    assert failed.decision.next_step is NextStep.RETRY
    assert [row[0] for row in stored_items(runner)] == [1, 2]  # chunk 1 rolled back

    report = attempt(flaky, step_retry=1)

    assert (report.chunks_resumed, report.chunks_written) == (1, 2)
    assert [row[0] for row in stored_items(runner)] == [1, 2, 3, 4, 5]


# Crashes (real processes, killed by a failpoint)


def _attempt_and_crash(spec: BackfillSpec, settings: Settings) -> None:
    attempt(PartitionRunner(spec, replace(settings, failpoints="read#1=crash")))


def crash_a_worker(runner: PartitionRunner) -> None:
    worker = multiprocessing.get_context("fork").Process(
        target=_attempt_and_crash, args=(runner.spec, runner.settings)
    )
    worker.start()
    worker.join(timeout=60)
    assert worker.exitcode == -signal.SIGKILL


def test_worker_killed_mid_attempt_is_recorded_as_a_crash_by_the_next_attempt(runner):
    crash_a_worker(runner)

    report = attempt(runner)

    assert isinstance(report, PartitionReport)
    assert (report.chunks_resumed, report.chunks_written) == (1, 2)
    assert history(runner) == [(1, 1, "failed", "crash"), (1, 2, "succeeded", None)]


def test_crashes_spend_the_budget_and_the_next_attempt_quarantines_without_starting(runner):
    for _ in range(MAX_ATTEMPTS):
        crash_a_worker(runner)

    spent = attempt(runner)

    assert isinstance(spent, BudgetSpent)  # quarantined before an attempt started
    assert spent.verdict.classification is Classification.CRASH
    assert history(runner) == [(1, n, "failed", "crash") for n in (1, 2, 3)]
    entry = quarantine_entry(runner)
    assert (entry.attempts, entry.error_class) == (3, "crash")
    assert (spent.failures, spent.entry_id) == (3, entry.id)


# The run's log


class LinesKept(logging.Handler):
    """The lines a run's log keeps (each a stored event in Dagster's)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def run_log(name: str) -> tuple[logging.Logger, LinesKept]:
    log, kept = logging.getLogger(f"jobs_platform_tests.{name}"), LinesKept()
    log.addHandler(kept)
    log.setLevel(logging.INFO)
    log.propagate = False
    return log, kept


def events_kept(kept: LinesKept) -> list[str]:
    return [line.split()[1] for line in kept.lines if line.startswith(f"{ASSET}/")]


def test_a_partition_of_one_chunk_keeps_only_its_end_line_in_the_run_log(items_input, settings):
    log, kept = run_log("one_chunk")
    runner = PartitionRunner(items_spec(items_input), settings, log=log)

    assert isinstance(
        runner.attempt(DAY, Attempter(run_id="run-1"), chunk_rows=10), PartitionReport
    )

    assert events_kept(kept) == ["succeeded"]


def test_a_partition_of_several_chunks_keeps_each_chunk_line(items_input, settings):
    log, kept = run_log("several_chunks")
    runner = PartitionRunner(items_spec(items_input), settings, log=log)

    assert isinstance(runner.attempt(DAY, Attempter(run_id="run-1"), chunk_rows=2), PartitionReport)

    assert events_kept(kept) == ["chunk_committed"] * 3 + ["succeeded"]


def test_a_retry_keeps_its_started_line_in_the_run_log(items_input, settings):
    log, kept = run_log("retry")
    runner = PartitionRunner(items_spec(items_input), settings, log=log)
    items_input.errors.append(RetryableError("upstream timed out"))

    assert isinstance(runner.attempt(DAY, Attempter(run_id="run-1"), chunk_rows=10), Failed)
    assert isinstance(
        runner.attempt(DAY, Attempter(run_id="run-1"), chunk_rows=10), PartitionReport
    )

    assert events_kept(kept) == ["failed", "retrying", "started", "succeeded"]


# One commit for a partition of one chunk


def test_a_partition_of_one_chunk_commits_its_rows_with_its_finalize(runner):
    commits: list[None] = []
    sa.event.listen(runner.engine, "commit", lambda connection: commits.append(None))

    report = runner.attempt(DAY, Attempter(run_id="run-1"), chunk_rows=10)

    assert isinstance(report, PartitionReport)
    assert (report.chunks_written, report.input_rows) == (1, 5)
    assert partition_state(runner) == ("done", 1)
    assert len(commits) == COMMITS_OF_A_ONE_CHUNK_PARTITION


def test_a_fingerprinted_partition_of_one_chunk_checks_its_input_in_the_same_commits(
    runner, settings
):
    spec = replace(runner.spec, fingerprint=lambda source: "input-v1")
    fingerprinted = PartitionRunner(spec, settings)
    commits: list[None] = []
    sa.event.listen(fingerprinted.engine, "commit", lambda connection: commits.append(None))

    report = fingerprinted.attempt(DAY, Attempter(run_id="run-1"), chunk_rows=10)

    assert isinstance(report, PartitionReport) and not report.unchanged_input
    assert len(commits) == COMMITS_OF_A_ONE_CHUNK_PARTITION
    again = fingerprinted.attempt(DAY, Attempter(run_id="run-2"), chunk_rows=10)
    assert isinstance(again, PartitionReport) and again.unchanged_input
    assert len(commits) == COMMITS_OF_A_ONE_CHUNK_PARTITION + 2  # the start; the finish


# The start (gates, lease, attempt row); the input's state (unchanged and done, or the
# chunks committed for it); the seen keys emptied; the chunk with its finalize.
COMMITS_OF_A_ONE_CHUNK_PARTITION = 4


def test_a_first_attempt_reads_the_clock_once_and_settles_nothing(runner, settings):
    executed: list[str] = []
    sa.event.listen(
        runner.engine,
        "before_cursor_execute",
        lambda connection, cursor, statement, *rest: executed.append(statement),
    )

    report = runner.attempt(DAY, Attempter(run_id="run-1"), chunk_rows=10)

    assert isinstance(report, PartitionReport) and report.attempt == 1
    # The lease's judgment reads it; every stamp and the fence read it in their statement.
    # (SQLite's clock is the host's: no statement reads it there.)
    postgres = settings.database_url.startswith("postgresql")
    assert executed.count("SELECT clock_timestamp()") == (1 if postgres else 0)
    # The partition's first lease: no budget to settle, no attempt number to read.
    assert not any("max(jp_attempts.attempt)" in statement for statement in executed)
    assert not any("coalesce(sum(" in statement for statement in executed)


def test_a_failed_finalize_rolls_back_the_one_chunk_it_would_commit(runner, items_input, settings):
    flaky = PartitionRunner(runner.spec, replace(settings, failpoints="finalize=transient*1"))

    failed = flaky.attempt(DAY, Attempter(run_id="run-1"), chunk_rows=10)

    assert isinstance(failed, Failed)
    assert stored_items(runner) == []  # done with its rows or not at all
    report = flaky.attempt(DAY, Attempter(run_id="run-1", step_retry=1), chunk_rows=10)
    assert isinstance(report, PartitionReport)
    assert (report.chunks_resumed, report.chunks_written) == (0, 1)
    assert [row[0] for row in stored_items(runner)] == [1, 2, 3, 4, 5]


def test_a_read_failing_after_a_short_chunk_leaves_that_chunk_committed(runner, settings):
    def short_then_unreadable(source: PartitionInput) -> Iterator[pd.DataFrame]:
        yield pd.DataFrame({"id": [1], "value": ["a"], "part": source.partition_key})
        raise TerminalError("the second file is unreadable")

    spec = replace(runner.spec, read_chunks=short_then_unreadable)

    failed = PartitionRunner(spec, runner.settings).attempt(DAY, Attempter(), chunk_rows=2)

    assert isinstance(failed, Failed)
    assert stored_items(runner) == [(1, "a", DAY)]  # read ahead of its commit, committed
