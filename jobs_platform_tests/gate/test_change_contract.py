"""Specifications of `expect=ChangeContract(...)` (docs/bad-rows.md), by the plain-Python runner.

A `ledger` backfill on PostgreSQL whose input the test controls: a day loaded once, then
read again by a "fan-out" reader that changes 40 % of its amounts. The contract allows
2 %: the table must stay exactly as it was, and the day be quarantined with the diff.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform.dead_letter.entries import DeadLetter, latest_entry
from jobs_platform.engine.gated_finalize import gate_stage
from jobs_platform.engine.outcomes import Failed, Outcome
from jobs_platform.engine.runner import Attempter, PartitionReport, PartitionRunner
from jobs_platform.engine.spec import BackfillSpec, PartitionInput, RejectRows
from jobs_platform.errors import Classification
from jobs_platform.gate.contract import ChangeContract
from jobs_platform.gate.reviews import ChangeReviews, latest_review, review_evidence
from jobs_platform.gate.stage import GATE_STAGE_PREFIX, partition_stage
from jobs_platform.settings import Settings
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import checkpoints, create_user_tables

ASSET, DAY, OTHER_DAY = "ledger", "2024-01-03", "2024-01-04"
ROWS = 1_000
CHUNK_ROWS = 100
STRICT = ChangeContract(max_updated_fraction=0.02, max_swept_fraction=0.0)


def ledger_table() -> sa.Table:
    return sa.Table(
        "ledger",
        sa.MetaData(),
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("amount", sa.BigInteger, nullable=False),
        sa.Column("part", sa.Text, nullable=False),
    )


@dataclass
class Ledger:
    """Each partition's rows as (id, amount); `fan_out` changes every n-th amount."""

    rows: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def read_chunks(self, source: PartitionInput):
        rows = self.rows[source.partition_key]
        for start in range(0, len(rows), source.chunk_rows):
            part = rows[start : start + source.chunk_rows]
            yield pd.DataFrame(
                {
                    "id": [row_id for row_id, _ in part],
                    "amount": [amount for _, amount in part],
                    "part": source.partition_key,
                }
            )


def day_rows(first_id: int = 1) -> list[tuple[int, int]]:
    return [(row_id, row_id * 10) for row_id in range(first_id, first_id + ROWS)]


def fanned_out(rows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """A join that fans out: two rows of every five get a doubled amount (40 %)."""
    return [(i, a * 2 if n % 5 < 2 else a) for n, (i, a) in enumerate(rows)]


@pytest.fixture
def settings(upgraded_pg_url, tmp_path) -> Settings:
    return ledger_settings(upgraded_pg_url, tmp_path)


@pytest.fixture
def settings_on_either(upgraded_url, tmp_path) -> Settings:
    """PostgreSQL, and SQLite (the embedded default's backend)."""
    return ledger_settings(upgraded_url, tmp_path)


def ledger_settings(url: str, tmp_path) -> Settings:
    create_user_tables(warehouse_engine(url), ledger_table())
    return Settings(
        database_url=url,
        landing_root=str(tmp_path),
        max_attempts=3,
        retry_delay_seconds=0.01,
        lease_seconds=30,
    )


def runner(settings: Settings, ledger: Ledger, expect: ChangeContract | None) -> PartitionRunner:
    spec = BackfillSpec(
        asset=ASSET,
        table=ledger_table(),
        key=("id",),
        read_chunks=ledger.read_chunks,
        partition_scope=lambda table, partition: table.c.part == partition,
        expect=expect,
    )
    return PartitionRunner(spec, settings)


def attempt(runner: PartitionRunner, partition: str = DAY, run_id: str = "run-1") -> Outcome:
    return runner.attempt(partition, Attempter(run_id=run_id), chunk_rows=CHUNK_ROWS)


def dump(url: str) -> list[tuple]:
    """The whole table, ordered: compared whole, value for value."""
    with warehouse_engine(url).connect() as connection:
        return [
            tuple(row) for row in connection.execute(sa.text("SELECT * FROM ledger ORDER BY id"))
        ]


def stages_left(url: str) -> list[str]:
    with warehouse_engine(url).connect() as connection:
        return [
            name
            for name in sa.inspect(connection).get_table_names()
            if name.startswith(GATE_STAGE_PREFIX)
        ]


def checkpoint_count(url: str) -> int:
    with warehouse_engine(url).connect() as connection:
        return connection.execute(sa.select(sa.func.count()).select_from(checkpoints)).scalar_one()


def test_a_contract_needs_a_bound_and_sane_ones():
    with pytest.raises(ValueError, match="needs a bound"):
        ChangeContract()
    with pytest.raises(ValueError, match="max_updated_fraction must be a fraction"):
        ChangeContract(max_updated_fraction=2)
    with pytest.raises(ValueError, match="max_inserted must be a whole number"):
        ChangeContract(max_inserted=-1)
    with pytest.raises(ValueError, match=r"row_count_between must be \(lo, hi\)"):
        ChangeContract(row_count_between=(10, 1))
    with pytest.raises(ValueError, match="row_count_within must be a fraction"):
        ChangeContract(row_count_within=float("nan"))


def test_a_first_load_within_the_contract_is_published_and_its_stage_dropped(settings):
    url = settings.database_url
    report = attempt(runner(settings, Ledger({DAY: day_rows()}), STRICT))

    assert isinstance(report, PartitionReport), report
    assert (report.counts.inserted, report.counts.updated, report.rows_swept) == (ROWS, 0, 0)
    assert dump(url) == [(i, a, DAY) for i, a in day_rows()]
    assert stages_left(url) == []
    # The stage went with its checkpoints: a re-run stages the day again, publishes nothing new.
    assert checkpoint_count(url) == 0
    again = attempt(runner(settings, Ledger({DAY: day_rows()}), STRICT), run_id="run-2")
    assert isinstance(again, PartitionReport), again
    assert (again.counts.inserted, again.counts.updated, again.counts.unchanged) == (0, 0, ROWS)


def test_a_fan_out_beyond_the_contract_leaves_the_table_as_it_was_and_quarantines_the_day(
    settings_on_either,
):
    settings = settings_on_either
    url = settings.database_url
    ledger = Ledger({DAY: day_rows(), OTHER_DAY: day_rows(first_id=10_001)})
    gated = runner(settings, ledger, STRICT)
    assert isinstance(attempt(gated), PartitionReport)
    assert isinstance(attempt(gated, OTHER_DAY), PartitionReport)
    before = dump(url)

    ledger.rows[DAY] = fanned_out(day_rows())[:-10]  # 40 % changed, the last 10 rows gone
    refused = attempt(gated, run_id="run-2")

    assert isinstance(refused, Failed), refused
    assert refused.verdict.classification == Classification.TERMINAL
    assert dump(url) == before
    assert stages_left(url) == []
    engine = warehouse_engine(url)
    with engine.connect() as connection:
        entry = latest_entry(connection, ASSET, DAY)
        evidence = review_evidence(latest_review(connection, ASSET, DAY))
    assert entry.status == "quarantined" and entry.error_class == "terminal"
    assert "updated 396 of 1000 rows (39.6%), more than max_updated_fraction=0.02" in (
        entry.last_error
    )
    assert "swept 10 of 1000 rows" in entry.last_error
    diff = evidence["diff"]
    assert (diff["inserted"], diff["updated"], diff["unchanged"], diff["swept"]) == (
        0,
        396,
        594,
        10,
    )
    assert diff["samples"]["updated"][:3] == [{"id": 1}, {"id": 2}, {"id": 6}]
    assert diff["samples"]["swept"][0] == {"id": 991}
    assert evidence["contract"] == (
        "ChangeContract(max_updated_fraction=0.02, max_swept_fraction=0.0)"
    )
    assert evidence["accepted_by"] is None


def refused_fan_out(settings: Settings) -> tuple[Ledger, PartitionRunner, list[tuple]]:
    """The day loaded, then refused for a fan-out; the table's dump before the refusal."""
    ledger = Ledger({DAY: day_rows()})
    gated = runner(settings, ledger, STRICT)
    assert isinstance(attempt(gated), PartitionReport)
    before = dump(settings.database_url)
    ledger.rows[DAY] = fanned_out(day_rows())
    assert isinstance(attempt(gated, run_id="run-2"), Failed)
    return ledger, gated, before


def accept_and_release(url: str, by: str = "cli") -> None:
    with warehouse_engine(url).begin() as connection:
        ChangeReviews(DATABASE_CLOCK).accept(connection, ASSET, DAY, by)
        DeadLetter(DATABASE_CLOCK).requeue_partition(connection, ASSET, DAY, reason="accepted")


def test_an_accepted_change_publishes_that_diff_once_and_no_other(settings):
    url = settings.database_url
    ledger, gated, _ = refused_fan_out(settings)

    accept_and_release(url)
    published = attempt(gated, run_id="run-3")

    assert isinstance(published, PartitionReport), published
    assert (published.counts.updated, published.counts.unchanged) == (400, 600)
    assert dump(url) == [(i, a, DAY) for i, a in fanned_out(day_rows())]
    with warehouse_engine(url).connect() as connection:
        review = review_evidence(latest_review(connection, ASSET, DAY))
    assert review["accepted_by"] == "cli" and review["published_at"] is not None

    # The approval is spent: the next change beyond the contract is refused again.
    published_dump = dump(url)
    ledger.rows[DAY] = day_rows()
    assert isinstance(attempt(gated, run_id="run-4"), Failed)
    assert dump(url) == published_dump


def test_an_approval_holds_only_for_the_diff_it_was_given(settings):
    url = settings.database_url
    ledger, gated, before = refused_fan_out(settings)
    accept_and_release(url)

    ledger.rows[DAY] = fanned_out(day_rows())[:-1]  # another diff: one row swept too
    refused = attempt(gated, run_id="run-3")

    assert isinstance(refused, Failed), refused
    assert dump(url) == before
    with warehouse_engine(url).connect() as connection:
        latest = review_evidence(latest_review(connection, ASSET, DAY))
    assert latest["accepted_by"] is None and latest["diff"]["swept"] == 1


def test_a_staged_day_resumes_after_a_failure_mid_stage_and_publishes_once(settings):
    url = settings.database_url
    ledger = Ledger({DAY: day_rows()})
    settings = dataclasses.replace(settings, failpoints=f"after_commit@{ASSET}#4=transient*1")
    gated = runner(settings, ledger, STRICT)

    failed = attempt(gated)
    assert isinstance(failed, Failed) and failed.verdict.classification == "retryable"
    assert dump(url) == []  # five chunks staged, none published
    with warehouse_engine(url).connect() as connection:
        stage = gate_stage(gated.place, DAY)
        assert stage is not None
        staged = connection.execute(sa.select(sa.func.count()).select_from(stage.table))
        assert staged.scalar_one() == 5 * CHUNK_ROWS

    resumed = attempt(gated, run_id="run-2")

    assert isinstance(resumed, PartitionReport), resumed
    assert (resumed.chunks_resumed, resumed.chunks_written) == (5, 5)
    assert (resumed.counts.inserted, resumed.counts.updated) == (ROWS, 0)
    assert dump(url) == [(i, a, DAY) for i, a in day_rows()]
    assert stages_left(url) == []


def test_a_stage_left_by_another_input_is_not_published(settings):
    """Chunks staged from an input that changed since are deleted before they could count."""
    url = settings.database_url
    ledger = Ledger({DAY: day_rows()})
    crashing = dataclasses.replace(settings, failpoints=f"after_commit@{ASSET}#4=transient*1")
    assert isinstance(attempt(runner(crashing, ledger, STRICT)), Failed)

    ledger.rows[DAY] = day_rows()[:250]  # shorter: chunks 3 and 4 staged before are stale
    report = attempt(runner(settings, ledger, STRICT), run_id="run-2")

    assert isinstance(report, PartitionReport), report
    assert report.chunks_resumed == 2
    assert dump(url) == [(i, a, DAY) for i, a in day_rows()[:250]]


def test_the_stage_is_named_from_a_hash_never_from_the_partition_text():
    stage = partition_stage(ledger_table(), ("id",), 'evil"; DROP TABLE ledger; --', DAY)
    assert stage.table.name.startswith(GATE_STAGE_PREFIX)
    assert all(c.isalnum() or c == "_" for c in stage.table.name)


def test_a_row_the_table_would_reject_is_rejected_by_row_as_it_is_staged(upgraded_pg_url, tmp_path):
    """Under `bad_rows=RejectRows(...)` the gate keeps the direct path's rejects: the stage
    has the table's NOT NULL and CHECK constraints, so the bad row is set aside, not the day."""
    table = sa.Table(
        "checked_ledger",
        sa.MetaData(),
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("amount", sa.BigInteger, sa.CheckConstraint("amount >= 0"), nullable=False),
        sa.Column("part", sa.Text, nullable=False),
        sa.CheckConstraint("amount < 1000000", name="checked_ledger_under_a_million"),
    )
    create_user_tables(warehouse_engine(upgraded_pg_url), table)
    rows = [(1, 10), (2, -1), (3, 2_000_000), (4, 40)]

    def read(source: PartitionInput):
        yield pd.DataFrame(
            {
                "id": [i for i, _ in rows],
                "amount": [a for _, a in rows],
                "part": source.partition_key,
            }
        )

    spec = BackfillSpec(
        asset="checked",
        table=table,
        key=("id",),
        read_chunks=read,
        partition_scope=lambda t, partition: t.c.part == partition,
        bad_rows=RejectRows(max_rows=5),
        expect=ChangeContract(max_inserted=10),
    )
    settings = ledger_settings(upgraded_pg_url, tmp_path)
    report = PartitionRunner(spec, settings).attempt(DAY, Attempter(run_id="run-1"))

    assert isinstance(report, PartitionReport), report
    assert (report.counts.inserted, report.rows_rejected) == (2, 2)
    assert "checked_ledger_under_a_million" in report.rejected_sample[1].reason
    with warehouse_engine(upgraded_pg_url).connect() as connection:
        stored = connection.execute(sa.text("SELECT id FROM checked_ledger ORDER BY id"))
        assert list(stored.scalars()) == [1, 4]
