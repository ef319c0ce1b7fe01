"""Replay of rejected rows (docs/bad-rows.md): a validator fixed and `code_version` bumped,
the rows it set aside come back on their own.

A `ledger` backfill of 30 days on PostgreSQL, in process: under v1 the reader rejects
negative amounts (two rows a day); v2 accepts them. One tick of the requeue sensor asks for
one run over the 30 days; once it ran, `dead-letter rows --asset` is empty and each row's
journey (rejected under v1, accepted under v2) is kept. A second tick asks for nothing.
"""

from __future__ import annotations

import dagster as dg
import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform import PartitionInput, RejectRows, backfill_asset, platform_definitions
from jobs_platform.orchestration.rejects_replay import REPLAY_TAG
from jobs_platform.orchestration.resources import JobsPlatformResource
from jobs_platform.orchestration.tags import PARTITION_RANGE_END_TAG, PARTITION_RANGE_START_TAG
from jobs_platform.store.db import warehouse_engine
from jobs_platform.store.schema import create_user_tables
from jobs_platform.writer.rejects import reject_journeys, rejects_by_reason

DAYS = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-31")
FIRST, LAST = "2024-01-01", "2024-01-30"
ROWS_PER_DAY = 20


def ledger_table() -> sa.Table:
    return sa.Table(
        "ledger",
        sa.MetaData(),
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("amount", sa.BigInteger, nullable=False),
        sa.Column("day", sa.Text, nullable=False),
    )


def ledger(version: str, *, rejects_negative: bool) -> dg.AssetsDefinition:
    @backfill_asset(
        table=ledger_table(),
        partitions_def=DAYS,
        partition_scope=lambda table, partition: table.c.day == partition,
        bad_rows=RejectRows(max_fraction=0.5),
        code_version=version,
        name="ledger",
    )
    def ledger_days(source: PartitionInput):
        day = int(source.partition_key[-2:])
        rows = []
        for n in range(ROWS_PER_DAY):
            amount = n - 2  # rows 1 and 2 of each day are negative
            if rejects_negative and amount < 0:
                source.reject(n + 1, "amount must be >= 0", {"amount": amount})
                continue
            rows.append((day * 100 + n, amount))
        yield pd.DataFrame(
            {
                "id": [i for i, _ in rows],
                "amount": [a for _, a in rows],
                "day": source.partition_key,
            }
        )

    return ledger_days


@pytest.fixture
def url(upgraded_pg_url) -> str:
    create_user_tables(warehouse_engine(upgraded_pg_url), ledger_table())
    return upgraded_pg_url


def run(url: str, asset: dg.AssetsDefinition, instance: dg.DagsterInstance, tags: dict) -> None:
    result = dg.materialize(
        [asset],
        instance=instance,
        resources={"jobs_platform": JobsPlatformResource(database_url=url)},
        tags=tags,
    )
    assert result.success


def requeue_tick(url: str, asset: dg.AssetsDefinition, instance) -> list[dg.RunRequest]:
    resource = JobsPlatformResource(database_url=url)
    definitions = platform_definitions([asset], jobs_platform=resource)
    repository = definitions.get_repository_def()
    sensor = repository.get_sensor_def("requeue_sensor")
    context = dg.build_sensor_context(
        instance=instance, repository_def=repository, resources={"jobs_platform": resource}
    )
    result = sensor.evaluate_tick(context)
    return list(result.run_requests or [])


def still_rejected(url: str) -> list[tuple[str, int, list[str]]]:
    with warehouse_engine(url).connect() as connection:
        return [
            (r.reason, r.rows, list(r.versions)) for r in rejects_by_reason(connection, "ledger")
        ]


def test_a_new_code_version_replays_the_rejected_rows_of_30_days_once(url):
    whole_month = {PARTITION_RANGE_START_TAG: FIRST, PARTITION_RANGE_END_TAG: LAST}
    with dg.DagsterInstance.ephemeral() as instance:
        run(url, ledger("v1", rejects_negative=True), instance, whole_month)
        assert still_rejected(url) == [("amount must be >= 0", 60, ["v1"])]
        assert requeue_tick(url, ledger("v1", rejects_negative=True), instance) == []

        fixed = ledger("v2", rejects_negative=False)
        (request,) = requeue_tick(url, fixed, instance)

        assert request.tags[PARTITION_RANGE_START_TAG] == FIRST
        assert request.tags[PARTITION_RANGE_END_TAG] == LAST
        assert request.tags[REPLAY_TAG] == "ledger"
        run(url, fixed, instance, {**request.tags, "dagster/run_key": str(request.run_key)})

        assert still_rejected(url) == []
        assert requeue_tick(url, fixed, instance) == []
    with warehouse_engine(url).connect() as connection:
        stored = connection.execute(sa.text("SELECT count(*) FROM ledger WHERE amount < 0"))
        assert stored.scalar_one() == 60
        journeys = reject_journeys(connection, "ledger", "2024-01-07")
    assert [(j["row"], j["rejected_version"], j["read_again_version"]) for j in journeys] == [
        (1, "v1", "v2"),
        (2, "v1", "v2"),
    ]
    assert not any(j["still_rejected"] for j in journeys)
