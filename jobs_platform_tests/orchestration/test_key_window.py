"""`key_window`: which partitions definitions status counts by their keys' range, and that
the window it reads from Dagster's arithmetic is the one their listed keys span."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest

from jobs_platform.orchestration.catalog import key_window
from jobs_platform.store.health import KeyWindow

NOW = dt.datetime(2026, 12, 4, 2, 30, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    "partitions_def",
    [
        dg.DailyPartitionsDefinition(start_date="2024-01-01"),
        dg.DailyPartitionsDefinition(start_date="2024-01-01", end_offset=1),
        dg.DailyPartitionsDefinition(start_date="2024-01-01", timezone="US/Central"),
        dg.HourlyPartitionsDefinition(start_date="2015-07-01-00:00"),
        dg.MonthlyPartitionsDefinition(start_date="2020-01-01"),
        dg.WeeklyPartitionsDefinition(start_date="2024-01-01"),
        dg.TimeWindowPartitionsDefinition(
            start="20240101", fmt="%Y%m%d", cron_schedule="0 0 * * *"
        ),
        dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-03-01"),
    ],
    ids=["daily", "daily+1", "daily-central", "hourly", "monthly", "weekly", "compact", "ended"],
)
def test_the_window_spans_the_listed_keys(partitions_def):
    keys = partitions_def.get_partition_keys(current_time=NOW)

    window = key_window(partitions_def, NOW)

    assert window == KeyWindow(keys[0], keys[-1], len(keys))
    assert sorted(keys) == list(keys) and {len(key) for key in keys} == {len(keys[0])}


@pytest.mark.parametrize(
    "partitions_def",
    [
        # Keys that do not sort as their days do.
        dg.TimeWindowPartitionsDefinition(
            start="01-01-2024", fmt="%d-%m-%Y", cron_schedule="0 0 * * *"
        ),
        # An hour named on a clock with daylight saving time: a key can repeat.
        dg.HourlyPartitionsDefinition(start_date="2024-01-01-00:00", timezone="US/Central"),
        dg.StaticPartitionsDefinition(["a", "b"]),
        dg.DynamicPartitionsDefinition(name="customers"),
        dg.MultiPartitionsDefinition(
            {
                "day": dg.DailyPartitionsDefinition(start_date="2024-01-01"),
                "region": dg.StaticPartitionsDefinition(["eu", "us"]),
            }
        ),
        None,
    ],
    ids=["day-first", "hourly-dst", "static", "dynamic", "multi", "unpartitioned"],
)
def test_other_definitions_have_no_window_and_are_listed_key_by_key(partitions_def):
    assert key_window(partitions_def, NOW) is None


def test_a_definition_with_no_partition_yet_has_an_empty_window():
    later = dg.DailyPartitionsDefinition(start_date="2030-01-01")

    assert key_window(later, NOW) == KeyWindow("", "", 0)
