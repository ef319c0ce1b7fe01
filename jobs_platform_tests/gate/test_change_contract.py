"""Specifications of `expect=ChangeContract(...)` (docs/bad-rows.md), by the plain-Python runner.

A `ledger` backfill on PostgreSQL whose input the test controls: a day loaded once, then
read again by a "fan-out" reader that changes 40 % of its amounts. The contract allows
2 %: the table must stay exactly as it was, and the day be quarantined with the diff.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform.dead_letter.entries import latest_entry
from jobs_platform.engine.outcomes import Failed, Outcome
from jobs_platform.engine.runner import Attempter, PartitionReport, PartitionRunner
from jobs_platform.engine.spec import BackfillSpec, PartitionInput
from jobs_platform.errors import Classification
from jobs_platform.gate.contract import ChangeContract
from jobs_platform.gate.reviews import latest_review, review_evidence
from jobs_platform.gate.stage import GATE_STAGE_PREFIX
from jobs_platform.settings import Settings
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
    create_user_tables(warehouse_engine(upgraded_pg_url), ledger_table())
    return Settings(
        database_url=upgraded_pg_url,
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
    settings,
):
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
