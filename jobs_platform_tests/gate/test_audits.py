"""Specifications of `audits=[...]` (docs/bad-rows.md): SQL checks of the staged rows, before
publish, each a Dagster asset check evaluated for the partition.

A `ledger` backfill on PostgreSQL, run in process by Dagster: its input is a list the test
sets, so that an audit fails on one day and passes on another.
"""

from __future__ import annotations

import dagster as dg
import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform import PartitionInput, audits, backfill_asset
from jobs_platform.gate.audits import evaluate_audits
from jobs_platform.gate.stage import partition_stage
from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import create_user_tables

DAY = "2024-01-03"
ROWS: dict[str, list[tuple[int, int | None, str]]] = {}


def ledger_table() -> sa.Table:
    return sa.Table(
        "ledger",
        sa.MetaData(),
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("amount", sa.BigInteger),
        sa.Column("currency", sa.Text),
        sa.Column("part", sa.Text, nullable=False),
    )


def audited_ledger(*checks: audits.Audit) -> dg.AssetsDefinition:
    @backfill_asset(
        table=ledger_table(),
        partitions_def=dg.StaticPartitionsDefinition([DAY]),
        partition_scope=lambda table, partition: table.c.part == partition,
        audits=list(checks),
        name="ledger",
    )
    def ledger(source: PartitionInput):
        rows = ROWS[source.partition_key]
        yield pd.DataFrame(
            {
                "id": [row[0] for row in rows],
                "amount": pd.Series([row[1] for row in rows], dtype="Int64"),
                "currency": [row[2] for row in rows],
                "part": source.partition_key,
            }
        )

    return ledger


@pytest.fixture
def url(upgraded_pg_url) -> str:
    create_user_tables(warehouse_engine(upgraded_pg_url), ledger_table())
    return upgraded_pg_url


def materialize(url: str, asset: dg.AssetsDefinition) -> dg.ExecuteInProcessResult:
    with dg.DagsterInstance.ephemeral() as instance:
        return dg.materialize(
            [asset],
            partition_key=DAY,
            instance=instance,
            resources={"jobs_platform": JobsPlatformResource(database_url=url)},
            raise_on_error=False,
        )


def stored(url: str) -> list[tuple]:
    with warehouse_engine(url).connect() as connection:
        return [tuple(r) for r in connection.execute(sa.text("SELECT id, amount FROM ledger"))]


def evaluations(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def test_a_failing_blocking_audit_refuses_the_partition_and_is_a_failed_check(url):
    ROWS[DAY] = [(1, 10, "EUR"), (2, None, "EUR"), (3, 30, "GBP")]
    ledger = audited_ledger(
        audits.not_null("amount"), audits.accepted_values("currency", ["EUR", "USD"])
    )

    result = materialize(url, ledger)

    assert not result.success
    assert stored(url) == []
    checks = evaluations(result)
    assert set(checks) == {"not_null_amount", "accepted_values_currency"}
    not_null = checks["not_null_amount"]
    assert not not_null.passed and not_null.partition == DAY
    assert not_null.metadata["offending_rows"].value == 1
    assert not_null.metadata["sample"].value == {
        DAY: [{"id": 2, "amount": None, "currency": "EUR", "part": DAY}]
    }
    assert not checks["accepted_values_currency"].passed


def test_a_failing_warning_audit_is_recorded_and_the_partition_published(url):
    ROWS[DAY] = [(1, 10, "EUR"), (2, -5, "EUR")]
    ledger = audited_ledger(
        audits.not_null("amount"),
        audits.sql(
            "negative_amounts",
            "SELECT id, amount FROM staged WHERE amount < :floor",
            params={"floor": 0},
            blocking=False,
        ),
    )

    result = materialize(url, ledger)

    assert result.success
    assert sorted(stored(url)) == [(1, 10), (2, -5)]
    checks = evaluations(result)
    assert checks["not_null_amount"].passed
    warning = checks["negative_amounts"]
    assert not warning.passed and warning.severity == dg.AssetCheckSeverity.WARN
    assert warning.partition == DAY
    assert warning.metadata["sample"].value == {DAY: [{"id": 2, "amount": -5}]}


def test_row_count_and_unique_audit_the_rows_a_publish_would_write(url):
    table = ledger_table()
    stage = partition_stage(table, ("id",), "ledger", DAY)
    with warehouse_engine(url).begin() as connection:
        stage.prepare(connection)
        rows = [(0, 1, 10, "EUR"), (1, 1, 11, "EUR"), (1, 2, 11, "USD")]  # id 1 read twice
        connection.execute(
            sa.insert(stage.table),
            [
                {"_jp_chunk": c, "id": i, "amount": a, "currency": cur, "part": DAY}
                for c, i, a, cur in rows
            ],
        )
        found = evaluate_audits(
            connection,
            [audits.row_count(1, 1), audits.unique("amount"), audits.row_count(hi=2)],
            stage,
        )
    assert [(r.name, r.passed, r.offending) for r in found] == [
        ("row_count", False, 2),
        ("unique_amount", False, 1),
        ("row_count", True, 2),
    ]
    assert found[1].sample == ({"amount": 11, "rows": 2},)


def test_audits_are_named_as_dagster_names_checks():
    with pytest.raises(ValueError, match="letters, digits and underscores"):
        audits.sql("negative amounts", "SELECT 1")
    with pytest.raises(ValueError, match="two audits share a name"):
        audited_ledger(audits.not_null("amount"), audits.not_null("amount"))
