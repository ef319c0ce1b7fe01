"""Specifications of one metrics reading of the warehouse (`metrics.reader`)."""

from __future__ import annotations

import datetime as dt

from jobs_platform.metrics.reader import DURATION_BUCKETS, EMPTY_HISTOGRAM, read_metrics
from jobs_platform_tests.clocks import ManualClock
from jobs_platform_tests.store.factories import (
    AT,
    SECOND,
    a_lease,
    a_partition,
    a_quarantine_entry,
    an_attempt,
)

NOW = AT + 3600 * SECOND
CLOCK = ManualClock(NOW)  # the database's clock, fixed: every reading is at NOW
KEYS = {"items": [f"2024-01-{day:02d}" for day in range(1, 6)], "other": ["2024-01-01"]}


def test_ended_attempts_are_counted_by_asset_outcome_and_error_class(connection):
    an_attempt(connection, partition="2024-01-01", outcome="succeeded")
    an_attempt(connection, partition="2024-01-02", outcome="failed", error_class="retryable")
    an_attempt(connection, partition="2024-01-02", outcome="failed", error_class="retryable")
    an_attempt(connection, partition="2024-01-03", outcome="failed", error_class="terminal")
    an_attempt(connection, partition="2024-01-04", outcome="running")

    reading = read_metrics(connection, KEYS, clock=CLOCK)

    assert reading.attempts == {
        ("items", "succeeded", "none"): 1,
        ("items", "failed", "retryable"): 2,
        ("items", "failed", "terminal"): 1,
    }


def test_attempt_durations_fill_cumulative_buckets_with_their_sum_and_count(connection):
    for seconds in (0.05, 0.3, 0.3, 7, 4000):
        an_attempt(
            connection,
            outcome="succeeded",
            started_at=AT,
            ended_at=AT + dt.timedelta(seconds=seconds),
        )
    an_attempt(connection, outcome="running")  # not ended: no duration yet

    histogram = read_metrics(connection, KEYS, clock=CLOCK).durations["items"]

    expected = {0.1: 1, 0.25: 1, 0.5: 3, 1.0: 3, 5.0: 3, 10.0: 4, 3600.0: 4}
    by_bound = dict(zip(DURATION_BUCKETS, histogram.cumulative_counts, strict=True))
    assert {bound: by_bound[bound] for bound in expected} == expected
    assert histogram.count == 5
    assert abs(histogram.sum_seconds - 4007.65) < 1e-3


def test_an_attempt_ended_before_it_started_counts_as_zero_seconds(connection):
    # Another host's clock recorded the end (a crash found by the next worker).
    an_attempt(connection, outcome="failed", error_class="crash", ended_at=AT - 2 * SECOND)

    histogram = read_metrics(connection, KEYS, clock=CLOCK).durations["items"]

    assert histogram.cumulative_counts[0] == 1
    assert histogram.sum_seconds == 0


def test_every_asset_of_the_code_location_appears_from_zero(connection):
    reading = read_metrics(connection, KEYS, clock=CLOCK)

    assert reading.durations == {"items": EMPTY_HISTOGRAM, "other": EMPTY_HISTOGRAM}
    assert reading.rows_written == {"items": 0, "other": 0}
    assert reading.quarantine_entries == {"items": 0, "other": 0}
    assert reading.quarantine_groups == 0
    assert reading.attempts == {}
    assert reading.health["items"].missing == 5


def test_an_asset_known_only_to_the_history_keeps_its_counts(connection):
    an_attempt(connection, asset="retired", outcome="succeeded")
    a_partition(connection, asset="retired", status="done", row_count=7)

    reading = read_metrics(connection, KEYS, clock=CLOCK)

    assert reading.attempts == {("retired", "succeeded", "none"): 1}
    assert reading.rows_written["retired"] == 7
    assert "retired" not in reading.health


def test_rows_written_sum_the_done_partitions_only(connection):
    a_partition(connection, partition="2024-01-01", status="done", row_count=100)
    a_partition(connection, partition="2024-01-02", status="done", row_count=50)
    a_partition(connection, partition="2024-01-03", status="failed", row_count=999)

    assert read_metrics(connection, KEYS, clock=CLOCK).rows_written["items"] == 150


def test_open_quarantine_entries_are_quarantined_or_requeued_not_resolved(connection):
    a_quarantine_entry(connection, partition="2024-01-01", status="quarantined")
    a_quarantine_entry(connection, partition="2024-01-02", status="requeued")
    a_quarantine_entry(connection, partition="2024-01-03", status="resolved")

    assert read_metrics(connection, KEYS, clock=CLOCK).quarantine_entries["items"] == 2


def test_quarantine_groups_count_the_causes_of_the_quarantined_entries_across_assets(
    connection,
):
    malformed = "line {}: not valid JSON (Expecting value, column 3)"
    for day, line in ((1, 4), (2, 70)):
        for asset in ("items", "other"):
            a_quarantine_entry(
                connection, asset=asset, partition=f"2024-01-0{day}",
                last_error=malformed.format(line),
            )  # fmt: skip
    a_quarantine_entry(connection, partition="2024-01-03", last_error="no input")
    # Released or fixed: no longer a cause waiting for anyone.
    a_quarantine_entry(connection, partition="2024-01-04", status="requeued", last_error="x")
    a_quarantine_entry(connection, partition="2024-01-05", status="resolved", last_error="y")

    assert read_metrics(connection, KEYS, clock=CLOCK).quarantine_groups == 2


def test_partition_states_and_leases_are_the_status_figures(connection):
    a_partition(connection, partition="2024-01-01", status="done", duration_seconds=1.0)
    a_partition(connection, partition="2024-01-02", status="failed")
    a_partition(connection, partition="2024-01-03", status="failed")
    a_quarantine_entry(connection, partition="2024-01-03")
    a_lease(connection, partition="2024-01-04", acquired_at=NOW - 90 * SECOND,
            expires_at=NOW + 30 * SECOND)  # fmt: skip
    a_lease(connection, partition="2024-01-05", acquired_at=NOW - 600 * SECOND,
            expires_at=NOW - 60 * SECOND)  # fmt: skip

    health = read_metrics(connection, KEYS, clock=CLOCK).health["items"]

    assert (health.done, health.failed, health.quarantined, health.missing) == (1, 1, 1, 2)
    assert (health.in_flight, health.expired_leases) == (1, 1)
    assert health.oldest_lease_age_seconds == 90
