"""`status --from KEY --to KEY`: which partitions of each backfill a window counts."""

from __future__ import annotations

import dagster as dg
import pytest

from jobs_platform.orchestration.tags import BACKFILL_TAG
from jobs_platform.orchestration.windows import keys_in_window, status_window

START, END = "2024-01-01", "2024-03-01"  # a finite range, so that "now" does not matter
HOURLY = dg.HourlyPartitionsDefinition(start_date=f"{START}-00:00", end_date=f"{END}-00:00")
DAILY = dg.DailyPartitionsDefinition(start_date=START, end_date=END)
WEEKLY = dg.WeeklyPartitionsDefinition(start_date=START, end_date=END, day_offset=1)
MONTHLY = dg.MonthlyPartitionsDefinition(start_date=START, end_date=END)
REGIONS = dg.StaticPartitionsDefinition(["apac", "emea"])
BY_DAY_AND_REGION = dg.MultiPartitionsDefinition({"date": DAILY, "region": REGIONS})


def backfill(name: str, partitions: dg.PartitionsDefinition) -> dg.AssetSpec:
    return dg.AssetSpec(name, partitions_def=partitions, tags={BACKFILL_TAG: "true"})


SPECS = [
    backfill("events", HOURLY),
    backfill("orders", DAILY),
    backfill("invoices", MONTHLY),
    backfill("sales", BY_DAY_AND_REGION),
    backfill("tenants", REGIONS),  # no time dimension
]
EVERY_KEY = {spec.key.to_user_string(): spec.partitions_def.get_partition_keys() for spec in SPECS}


def counted(first: str | None, last: str | None, specs=SPECS) -> dict[str, list[str]]:
    return keys_in_window(specs, EVERY_KEY, status_window(specs, first, last))


def test_a_window_of_days_counts_each_backfill_partitions_starting_in_it():
    inside = counted("2024-01-02", "2024-01-03")

    assert inside["events"] == [
        f"2024-01-0{day}-{hour:02d}:00" for day in (2, 3) for hour in range(24)
    ]
    assert inside["orders"] == ["2024-01-02", "2024-01-03"]
    assert inside["invoices"] == []  # January starts before the window
    assert inside["sales"] == [
        "2024-01-02|apac", "2024-01-02|emea", "2024-01-03|apac", "2024-01-03|emea",
    ]  # fmt: skip
    assert "tenants" not in inside


def test_a_window_of_hours_counts_the_day_that_starts_in_it():
    inside = counted("2024-01-02-00:00", "2024-01-02-23:00")

    assert len(inside["events"]) == 24
    assert inside["orders"] == ["2024-01-02"]


def test_a_month_counts_every_day_and_hour_of_it():
    inside = counted("2024-02-01", "2024-02-29")

    assert (len(inside["events"]), len(inside["orders"]), inside["invoices"]) == (
        29 * 24, 29, ["2024-02-01"],
    )  # fmt: skip


def test_an_open_end_runs_to_the_last_partition_and_an_open_start_from_the_first():
    assert counted("2024-02-28", None)["orders"] == ["2024-02-28", "2024-02-29"]
    assert counted(None, "2024-01-02")["orders"] == ["2024-01-01", "2024-01-02"]


def test_a_key_that_also_starts_a_week_reads_as_its_day():
    specs = [backfill("orders", DAILY), backfill("weekly_totals", WEEKLY)]

    window = status_window(specs, None, "2024-01-01")  # a Monday: a day and a week

    assert window.end is not None and window.end.isoformat() == "2024-01-02T00:00:00+00:00"


@pytest.mark.parametrize(
    ("first", "last", "message"),
    [
        ("2024-13-01", None, "--from '2024-13-01' is not a partition key"),
        (None, "2031-01-01", "--to '2031-01-01' is not a partition key (or not one yet)"),
        ("apac", None, "--from 'apac' is not a partition key"),  # a static key
        ("2024-01-03", "2024-01-02", "--from 2024-01-03 is after --to 2024-01-02"),
    ],
)
def test_a_bad_window_is_a_clear_error(first, last, message):
    with pytest.raises(ValueError) as refused:
        status_window(SPECS, first, last)

    assert message in str(refused.value)


def test_the_error_for_a_bad_key_says_what_keys_look_like():
    with pytest.raises(ValueError) as refused:
        status_window(SPECS, "yesterday", None)

    assert str(refused.value).endswith(
        "their first keys: 2024-01-01 (invoices, orders, sales); 2024-01-01-00:00 (events)"
    )


def test_a_window_needs_a_time_partitioned_backfill():
    with pytest.raises(ValueError, match="this code location has none"):
        status_window([backfill("tenants", REGIONS)], "2024-01-01", None)
