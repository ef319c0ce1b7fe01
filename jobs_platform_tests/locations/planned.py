"""A code location for `jobs-platform plan`: a backfill with every state a plan names.

`planned_events` reads `<landing>/planned/<partition>.csv` (lines of `id,value`), with a
`fingerprint=` hashing the file through the `landing` resource, at `code_version="2"`. It
reads `planned_source` partition for partition (so a partition whose source is not done is
blocked), and `planned_totals` reads it alike (the partitions a run makes stale). A line
`poison` is a terminal error, a line `outage` a retryable one. A partition is ready once
its file has landed (`ready=`), and waits for it at most 6 hours (`max_wait`).
`planned_gated` reads the same files under a change contract (`expect=`: at most a quarter
of a partition's rows updated by one attempt).

The tests load it with `-m` (the CLI) and import it (the launch), as a user's location.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pandas as pd
import sqlalchemy as sa

from jobs_platform import (
    ChangeContract,
    PartitionInput,
    RetryableError,
    TerminalError,
    backfill_asset,
    platform_definitions,
)
from orders_example.orders.resources import LANDING_RESOURCE_KEY, LandingZone

PARTITIONS = dg.StaticPartitionsDefinition([f"p{index:02d}" for index in range(12)])

planned_metadata = sa.MetaData()
planned_source_table = sa.Table(
    "planned_source",
    planned_metadata,
    sa.Column("part", sa.String(8), primary_key=True),
)
planned_events_table = sa.Table(
    "planned_events",
    planned_metadata,
    sa.Column("part", sa.String(8), primary_key=True),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("value", sa.Integer, nullable=False),
)
planned_gated_table = sa.Table(
    "planned_gated",
    planned_metadata,
    sa.Column("part", sa.String(8), primary_key=True),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("value", sa.Integer, nullable=False),
)
planned_totals_table = sa.Table(
    "planned_totals",
    planned_metadata,
    sa.Column("part", sa.String(8), primary_key=True),
    sa.Column("total", sa.BigInteger, nullable=False),
)


def of_part(table: sa.Table, partition: str) -> sa.ColumnElement[bool]:
    return table.c.part == partition


def input_file(landing: LandingZone, partition: str) -> Path:
    return Path(landing.resolved_root()) / "planned" / f"{partition}.csv"


@backfill_asset(table=planned_source_table, partitions_def=PARTITIONS, partition_scope=of_part)
def planned_source(source: PartitionInput) -> Iterator[pd.DataFrame]:
    yield pd.DataFrame({"part": [source.partition_key]})


def file_fingerprint(source: PartitionInput, landing: LandingZone) -> str:
    return hashlib.sha256(input_file(landing, source.partition_key).read_bytes()).hexdigest()


def file_landed(source: PartitionInput, landing: LandingZone) -> bool:
    return input_file(landing, source.partition_key).exists()


def planned_events_at(code_version: str) -> dg.AssetsDefinition:
    """`planned_events` as shipped at `code_version` (the location serves "2")."""

    @backfill_asset(
        table=planned_events_table,
        partitions_def=PARTITIONS,
        partition_scope=of_part,
        fingerprint=file_fingerprint,
        ready=file_landed,
        max_wait=dt.timedelta(hours=6),
        code_version=code_version,
        deps=["planned_source"],
        backfill_policy=dg.BackfillPolicy.multi_run(5),
        name="planned_events",
    )
    def planned_events(source: PartitionInput, landing: LandingZone) -> Iterator[pd.DataFrame]:
        lines = input_file(landing, source.partition_key).read_text().split()
        if "poison" in lines:
            raise TerminalError(f"{source.partition_key}: a poison line")
        if "outage" in lines:
            raise RetryableError(f"{source.partition_key}: the source is down")
        yield parsed(source.partition_key, lines)

    return planned_events


def parsed(partition: str, lines: list[str]) -> pd.DataFrame:
    pairs = [line.split(",") for line in lines]
    return pd.DataFrame(
        {
            "part": [partition] * len(pairs),
            "id": [int(key) for key, _ in pairs],
            "value": [int(value) for _, value in pairs],
        }
    )


planned_events = planned_events_at("2")


@backfill_asset(
    table=planned_gated_table,
    partitions_def=PARTITIONS,
    partition_scope=of_part,
    expect=ChangeContract(max_updated_fraction=0.25),
)
def planned_gated(source: PartitionInput, landing: LandingZone) -> Iterator[pd.DataFrame]:
    lines = input_file(landing, source.partition_key).read_text().split()
    yield parsed(source.partition_key, lines)


@backfill_asset(
    table=planned_totals_table,
    partitions_def=PARTITIONS,
    partition_scope=of_part,
    deps=["planned_events"],
)
def planned_totals(source: PartitionInput) -> Iterator[pd.DataFrame]:
    with source.warehouse.connect() as connection:
        total = connection.execute(
            sa.select(sa.func.coalesce(sa.func.sum(planned_events_table.c.value), 0)).where(
                planned_events_table.c.part == source.partition_key
            )
        ).scalar_one()
    yield pd.DataFrame({"part": [source.partition_key], "total": [total]})


defs = dg.Definitions.merge(
    platform_definitions([planned_source, planned_events, planned_totals, planned_gated]),
    dg.Definitions(resources={LANDING_RESOURCE_KEY: LandingZone()}),
)
