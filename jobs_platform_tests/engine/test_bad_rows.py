"""Specifications of `bad_rows=RejectRows(...)` (docs/bad-rows.md), run by the plain-Python runner.

A `ledger` backfill whose input the test controls: rows the warehouse rejects (a CHECK
violation, a BIGINT overflow) and rows the reader rejects (`source.reject`), on the new-
rows COPY path (an empty table) and on the merge path (the keys already stored).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform.dead_letter.entries import DeadLetter, latest_entry
from jobs_platform.engine.outcomes import Failed, Outcome
from jobs_platform.engine.runner import Attempter, PartitionReport, PartitionRunner
from jobs_platform.engine.spec import BackfillSpec, PartitionInput, RejectRows
from jobs_platform.errors import Classification
from jobs_platform.settings import Settings
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import create_user_tables
from jobs_platform.writer.rejects import RejectedRow, partition_rejects
from jobs_platform_tests.databases import upgraded_warehouse

ASSET, DAY = "ledger", "2024-01-03"
TOO_BIG = 2**63  # one past BIGINT's largest value
INPUT_ROWS = 1_000


def ledger_table() -> sa.Table:
    return sa.Table(
        "ledger",
        sa.MetaData(),
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("amount", sa.BigInteger, sa.CheckConstraint("amount >= 0"), nullable=False),
        sa.Column("part", sa.Text, nullable=False),
    )


@dataclass
class LedgerInput:
    """Each partition's lines: an int amount, or a string the reader rejects as malformed."""

    lines: dict[str, list[tuple[int, object]]] = field(default_factory=dict)

    def read_chunks(self, source: PartitionInput):
        rows: list[tuple[int, object]] = []
        for number, (row_id, amount) in enumerate(self.lines[source.partition_key], start=1):
            if isinstance(amount, str):
                source.reject(number, f"malformed amount {amount!r}", {"id": row_id})
                continue
            rows.append((row_id, amount))
            if len(rows) == source.chunk_rows:
                yield self._frame(rows, source.partition_key)
                rows = []
        if rows:
            yield self._frame(rows, source.partition_key)

    @staticmethod
    def _frame(rows: list[tuple[int, object]], partition: str) -> pd.DataFrame:
        return pd.DataFrame(
            {
                # object when an id overflows BIGINT (int64 cannot hold it)
                "id": pd.Series(
                    [row_id for row_id, _ in rows],
                    dtype=object if any(row_id >= TOO_BIG for row_id, _ in rows) else "int64",
                ),
                # object: a Python int past int64 (the overflow) stays itself, as a reader
                # of JSON would hand it over
                "amount": pd.Series([amount for _, amount in rows], dtype=object),
                "part": partition,
            }
        )


def good_lines(count: int = INPUT_ROWS) -> list[tuple[int, object]]:
    return [(row_id, row_id * 10) for row_id in range(1, count + 1)]


def three_bad_lines() -> list[tuple[int, object]]:
    lines = good_lines()
    lines[99] = (100, -5)  # CHECK (amount >= 0): 23514
    lines[499] = (500, TOO_BIG)  # BIGINT overflow: 22003
    lines[799] = (800, "12,5")  # the reader's: malformed
    return lines


@pytest.fixture
def settings(upgraded_pg_url, tmp_path) -> Settings:
    create_user_tables(warehouse_engine(upgraded_pg_url), ledger_table())
    return Settings(
        database_url=upgraded_pg_url,
        landing_root=str(tmp_path),
        max_attempts=3,
        retry_delay_seconds=0.01,
        lease_seconds=30,
    )


def ledger_runner(
    settings: Settings, source: LedgerInput, policy: RejectRows | None
) -> PartitionRunner:
    spec = BackfillSpec(
        asset=ASSET,
        table=ledger_table(),
        key=("id",),
        read_chunks=source.read_chunks,
        partition_scope=lambda table, partition: table.c.part == partition,
        bad_rows=policy,
    )
    return PartitionRunner(spec, settings)


def attempt(runner: PartitionRunner, chunk_rows: int = INPUT_ROWS) -> Outcome:
    return runner.attempt(DAY, Attempter(run_id="run-1"), chunk_rows=chunk_rows)


def stored_ids(runner: PartitionRunner) -> list[int]:
    table = runner.spec.table
    with runner.engine.connect() as connection:
        return list(connection.execute(sa.select(table.c.id).order_by(table.c.id)).scalars())


def rejects(runner: PartitionRunner) -> list[RejectedRow]:
    with runner.engine.connect() as connection:
        return partition_rejects(connection, ASSET, DAY)


def store_every_key_with_old_amounts(runner: PartitionRunner) -> None:
    """Every key already stored (other amounts): the chunk takes the merge, not the COPY."""
    table = runner.spec.table
    with runner.engine.begin() as connection:
        connection.execute(
            table.insert(), [{"id": i, "amount": 1, "part": DAY} for i in range(1, 1001)]
        )


@pytest.mark.parametrize("path", ["copy_new_rows", "merge"])
def test_a_chunk_commits_its_good_rows_and_rejects_the_three_bad_ones(settings, path):
    runner = ledger_runner(settings, LedgerInput({DAY: three_bad_lines()}), RejectRows(max_rows=5))
    if path == "merge":
        store_every_key_with_old_amounts(runner)

    report = attempt(runner)

    assert isinstance(report, PartitionReport), report
    assert report.rows_rejected == 3
    assert stored_ids(runner) == [i for i in range(1, 1001) if i not in (100, 500, 800)]
    found = [(r.row, r.column, r.sqlstate) for r in rejects(runner)]
    assert found == [(100, None, "23514"), (500, "amount", "22003"), (800, None, None)]
    reasons = [r.reason for r in rejects(runner)]
    assert "check constraint" in reasons[0]
    assert "out of range" in reasons[1]
    assert reasons[2] == "malformed amount '12,5'"
    assert [r.row for r in report.rejected_sample] == [100, 500, 800]


def test_the_good_rows_hold_the_inputs_values(settings):
    runner = ledger_runner(settings, LedgerInput({DAY: three_bad_lines()}), RejectRows(max_rows=5))
    store_every_key_with_old_amounts(runner)

    attempt(runner)

    table = runner.spec.table
    with runner.engine.connect() as connection:
        amounts = {i: a for i, a in connection.execute(sa.select(table.c.id, table.c.amount))}
    assert len(amounts) == 997
    assert all(amounts[i] == i * 10 for i in amounts)


def test_a_rejected_rows_values_and_reason_are_kept_truncated(settings):
    lines = good_lines(10)
    lines[3] = (4, "x" * 5_000)
    runner = ledger_runner(settings, LedgerInput({DAY: lines}), RejectRows(max_rows=5))

    attempt(runner)

    (reject,) = rejects(runner)
    assert reject.row == 4
    assert len(reject.reason) <= 500
    assert reject.values == {"id": "4"}


def test_a_rejected_rows_values_are_kept_as_text_cut_to_200_characters(settings):
    lines = good_lines(10)
    lines[3] = (4, 10**300)  # overflows BIGINT; its text is 301 characters
    runner = ledger_runner(settings, LedgerInput({DAY: lines}), RejectRows(max_rows=5))

    attempt(runner)

    (reject,) = rejects(runner)
    assert (reject.row, reject.sqlstate) == (4, "22003")
    assert reject.values is not None
    assert reject.values["id"] == "4" and reject.values["part"] == DAY
    assert len(reject.values["amount"]) == 200 and reject.values["amount"].endswith("...")


def test_rows_the_reader_rejects_count_in_the_row_numbers_of_later_chunks(settings):
    lines = good_lines(10)
    lines[1] = (2, "bad")  # row 2, the reader's
    lines[6] = (7, -1)  # row 7, the warehouse's (in the second chunk of 4 rows)
    runner = ledger_runner(settings, LedgerInput({DAY: lines}), RejectRows(max_rows=5))

    report = attempt(runner, chunk_rows=4)

    assert isinstance(report, PartitionReport), report
    assert [(r.row, r.sqlstate) for r in rejects(runner)] == [(2, None), (7, "23514")]
    assert stored_ids(runner) == [1, 3, 4, 5, 6, 8, 9, 10]


def test_without_the_policy_one_bad_row_quarantines_the_partition(settings):
    runner = ledger_runner(settings, LedgerInput({DAY: three_bad_lines()}), None)

    failed = attempt(runner)

    assert isinstance(failed, Failed)
    assert failed.verdict.classification is Classification.TERMINAL
    assert stored_ids(runner) == []
    assert rejects(runner) == []


def test_more_bad_rows_than_max_rows_quarantine_the_partition(settings):
    lines = good_lines()
    for row_id in range(10, 210, 10):  # 20 rows the warehouse rejects
        lines[row_id - 1] = (row_id, -row_id)
    runner = ledger_runner(settings, LedgerInput({DAY: lines}), RejectRows(max_rows=5))

    failed = attempt(runner)

    assert isinstance(failed, Failed), failed
    assert failed.verdict.classification is Classification.TERMINAL
    with runner.engine.connect() as connection:
        entry = latest_entry(connection, ASSET, DAY)
    assert entry.status == "quarantined"
    assert "rows rejected, more than max_rows=5" in entry.last_error
    assert "row 10 " in entry.last_error and "row 20 " in entry.last_error
    assert stored_ids(runner) == []  # the chunk that passed the limit rolled back
    assert rejects(runner) == []


def test_more_reader_rejections_than_max_fraction_quarantine_the_partition(settings):
    lines = good_lines(100)
    for row_id in range(1, 12):  # 11 of 100 rows > 10%
        lines[row_id - 1] = (row_id, "bad")
    runner = ledger_runner(settings, LedgerInput({DAY: lines}), RejectRows(max_fraction=0.1))

    failed = attempt(runner)

    assert isinstance(failed, Failed), failed
    assert "11 rows rejected, more than max_fraction=0.1 of 100 input rows" in str(failed.error)


def test_fixing_the_input_and_rerunning_converges_and_clears_the_rejects(settings):
    source = LedgerInput({DAY: three_bad_lines()})
    runner = ledger_runner(settings, source, RejectRows(max_rows=5))
    attempt(runner)
    source.lines[DAY] = good_lines()

    report = attempt(runner)

    assert isinstance(report, PartitionReport), report
    assert report.rows_rejected == 0
    assert rejects(runner) == []
    assert stored_ids(runner) == list(range(1, 1001))


def test_fixing_the_input_of_a_quarantined_partition_and_requeueing_converges(settings):
    lines = good_lines()
    for row_id in range(10, 210, 10):
        lines[row_id - 1] = (row_id, -row_id)
    source = LedgerInput({DAY: lines})
    runner = ledger_runner(settings, source, RejectRows(max_rows=5))
    attempt(runner, chunk_rows=100)  # chunk 0 (rows 1-100, 10 bad) passes the limit
    source.lines[DAY] = good_lines()
    with runner.engine.begin() as connection:
        DeadLetter(DATABASE_CLOCK).requeue_partition(connection, ASSET, DAY, reason="input fixed")

    report = attempt(runner, chunk_rows=100)

    assert isinstance(report, PartitionReport), report
    assert stored_ids(runner) == list(range(1, 1001))
    assert rejects(runner) == []


def test_a_rerun_with_a_different_bad_row_replaces_the_rejects(settings):
    source = LedgerInput({DAY: three_bad_lines()})
    runner = ledger_runner(settings, source, RejectRows(max_rows=5))
    attempt(runner)
    lines = good_lines()
    lines[41] = (42, -1)
    source.lines[DAY] = lines

    attempt(runner)

    assert [r.row for r in rejects(runner)] == [42]
    assert len(stored_ids(runner)) == 999


def test_a_stored_row_that_turns_bad_is_swept_not_kept_stale(settings):
    source = LedgerInput({DAY: good_lines(10)})
    runner = ledger_runner(settings, source, RejectRows(max_rows=5))
    attempt(runner)
    lines = good_lines(10)
    lines[4] = (5, -50)
    source.lines[DAY] = lines

    attempt(runner)

    assert stored_ids(runner) == [1, 2, 3, 4, 6, 7, 8, 9, 10]


def test_the_policy_on_a_sqlite_warehouse_is_rejected_naming_postgresql(sqlite_url, tmp_path):
    create_user_tables(upgraded_warehouse(sqlite_url), ledger_table())
    settings = Settings(database_url=sqlite_url, landing_root=str(tmp_path), max_attempts=3)
    runner = ledger_runner(settings, LedgerInput({DAY: good_lines(3)}), RejectRows(max_rows=5))

    failed = attempt(runner)

    assert isinstance(failed, Failed)
    assert failed.verdict.classification is Classification.TERMINAL
    assert "needs a PostgreSQL warehouse" in str(failed.error)


def test_reject_without_the_policy_stops_the_partition_as_invalid_input(settings):
    lines = good_lines(5)
    lines[2] = (3, "bad")
    runner = ledger_runner(settings, LedgerInput({DAY: lines}), None)

    failed = attempt(runner)

    assert isinstance(failed, Failed)
    assert "row 3: malformed amount 'bad'" in str(failed.error)


@pytest.mark.parametrize(
    "arguments",
    [{}, {"max_rows": -1}, {"max_fraction": 1.5}, {"max_rows": True}],
)
def test_reject_rows_rejects_a_missing_or_impossible_limit(arguments):
    with pytest.raises(ValueError):
        RejectRows(**arguments)


def statements_of_an_attempt(runner: PartitionRunner, partition: str, chunk_rows: int) -> int:
    executed: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany):
        executed.append(statement)

    sa.event.listen(runner.engine, "before_cursor_execute", count)
    try:
        report = runner.attempt(partition, Attempter(run_id="run-1"), chunk_rows=chunk_rows)
    finally:
        sa.event.remove(runner.engine, "before_cursor_execute", count)
    assert isinstance(report, PartitionReport), report
    return len(executed)


@pytest.mark.parametrize("chunks", [1, 5])
def test_a_chunk_with_no_bad_row_costs_no_extra_statement(settings, chunks):
    days = ("2024-01-04", "2024-01-05", "2024-01-06")
    lines = {day: [(i + n * 10_000, i) for i in range(1, 101)] for n, day in enumerate(days)}
    strict = ledger_runner(settings, LedgerInput(lines), None)
    lenient = ledger_runner(settings, LedgerInput(lines), RejectRows(max_rows=5))
    statements_of_an_attempt(strict, days[0], chunk_rows=100)  # the engine's first-use checks

    without = statements_of_an_attempt(strict, days[1], chunk_rows=100 // chunks)
    with_policy = statements_of_an_attempt(lenient, days[2], chunk_rows=100 // chunks)

    # Whatever the number of chunks: the report's two reads of the partition's rejects.
    assert with_policy - without == 2


def test_a_resumed_chunk_keeps_its_rejects_and_never_sends_a_rejected_key_again(settings):
    lines = good_lines(8)
    lines[1] = (TOO_BIG, 5)  # row 2: its key overflows BIGINT
    crashing = dataclasses.replace(settings, failpoints=f"after_commit@{ASSET}#0=transient*1")
    runner = ledger_runner(crashing, LedgerInput({DAY: lines}), RejectRows(max_rows=5))
    first = attempt(runner, chunk_rows=4)
    assert isinstance(first, Failed), first

    resumed = attempt(runner, chunk_rows=4)

    assert isinstance(resumed, PartitionReport), resumed
    assert (resumed.chunks_resumed, resumed.chunks_written) == (1, 1)
    assert [(r.row, r.column, r.sqlstate) for r in rejects(runner)] == [(2, "id", "22003")]
    assert resumed.rows_rejected == 1
    assert stored_ids(runner) == [1, 3, 4, 5, 6, 7, 8]
