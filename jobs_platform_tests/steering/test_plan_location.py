"""What `plan` asks of a loaded location: the range's keys, and the partitions each feeds."""

from __future__ import annotations

import dagster as dg
import pandas as pd
import pytest
import sqlalchemy as sa

from jobs_platform import PartitionInput, backfill_asset, platform_definitions
from jobs_platform.orchestration.upstream import upstream_reads
from jobs_platform.steering.plan_location import downstream_of_each, plan_keys

HOURS = dg.HourlyPartitionsDefinition(start_date="2025-01-01-00:00", end_date="2025-01-03-00:00")
DAYS = dg.DailyPartitionsDefinition(start_date="2025-01-01", end_date="2025-01-03")
metadata = sa.MetaData()


def _table(name: str) -> sa.Table:
    return sa.Table(name, metadata, sa.Column("k", sa.String(32), primary_key=True))


def _of_key(table: sa.Table, key: str) -> sa.ColumnElement[bool]:
    return table.c.k == key


@backfill_asset(table=_table("hours"), partitions_def=HOURS, partition_scope=_of_key)
def hours(source: PartitionInput):
    yield pd.DataFrame({"k": [source.partition_key]})


@backfill_asset(
    table=_table("hours_again"), partitions_def=HOURS, partition_scope=_of_key, deps=["hours"]
)
def hours_again(source: PartitionInput):
    yield pd.DataFrame({"k": [source.partition_key]})


@backfill_asset(table=_table("days"), partitions_def=DAYS, partition_scope=_of_key, deps=["hours"])
def days(source: PartitionInput):
    yield pd.DataFrame({"k": [source.partition_key]})


DEFS = platform_definitions([hours, hours_again, days])


def test_each_hour_feeds_the_same_hour_alike_and_its_day_through_the_mapping():
    graph = DEFS.get_repository_def().asset_graph
    feeds = downstream_of_each(
        graph, dg.AssetKey("hours"), ["2025-01-01-05:00", "2025-01-02-23:00"]
    )
    assert feeds == {
        "2025-01-01-05:00": ["days/2025-01-01", "hours_again/2025-01-01-05:00"],
        "2025-01-02-23:00": ["days/2025-01-02", "hours_again/2025-01-02-23:00"],
    }


def test_a_partition_alike_reads_the_same_key_as_the_mapping_says():
    graph = DEFS.get_repository_def().asset_graph
    reads = upstream_reads(graph, dg.AssetKey("hours_again"))
    assert reads("2025-01-01-05:00") == [("hours", "2025-01-01-05:00")]
    day = upstream_reads(graph, dg.AssetKey("days"))("2025-01-02")
    assert len(day) == 24 and day[0] == ("hours", "2025-01-02-00:00")


def test_a_range_is_its_keys_in_order_and_a_key_it_lacks_is_named():
    keys = plan_keys(DEFS, "hours", first="2025-01-01-22:00", last="2025-01-02-01:00")
    assert keys == [
        "2025-01-01-22:00",
        "2025-01-01-23:00",
        "2025-01-02-00:00",
        "2025-01-02-01:00",
    ]
    assert len(plan_keys(DEFS, "hours", first="2025-01-02-00:00")) == 24
    with pytest.raises(ValueError, match="has no partition '2025-02-01-00:00'"):
        plan_keys(DEFS, "hours", first="2025-01-01-00:00", last="2025-02-01-00:00")
    with pytest.raises(ValueError, match="comes after"):
        plan_keys(DEFS, "hours", first="2025-01-02-00:00", last="2025-01-01-00:00")
