"""Specifications of the dead letter read by cause (`dead_letter.triage`), on PostgreSQL and
SQLite."""

from __future__ import annotations

import sqlalchemy as sa

from jobs_platform.dead_letter.triage import open_signature_count, signature_groups
from jobs_platform.store.schema import quarantine
from jobs_platform_tests.store.factories import AT, SECOND, a_quarantine_entry

MALFORMED = "line {line}: not valid JSON (Expecting value, column 35)"
CURRENCY = "line {line}, field 'currency': must be one of 'EUR', 'GBP', 'USD', got 'JPY'"


def entries(connection, asset: str, message: str, days: range, *, status="quarantined", at=AT):
    for day in days:
        a_quarantine_entry(
            connection,
            asset=asset,
            partition=f"2024-08-{day:02d}",
            status=status,
            error_class="terminal",
            error_type="InputValidationError",
            last_error=message.format(line=day * 7),
            first_failed_at=at + day * SECOND,
            last_failed_at=at + day * 2 * SECOND,
        )


def test_open_entries_are_grouped_by_cause_largest_first_with_counts_per_asset(connection):
    entries(connection, "orders", MALFORMED, range(1, 4))
    entries(connection, "returns", MALFORMED, range(1, 3))
    entries(connection, "orders", CURRENCY, range(10, 14))

    groups = signature_groups(connection)

    assert [(g.count, dict(g.assets)) for g in groups] == [
        (5, {"orders": 3, "returns": 2}),
        (4, {"orders": 4}),
    ]
    malformed, currency = groups
    assert (malformed.error_class, malformed.error_type) == ("terminal", "InputValidationError")
    assert malformed.first_failed_at == AT + SECOND
    assert malformed.last_failed_at == AT + 6 * SECOND
    assert currency.sample_message == CURRENCY.format(line=13 * 7)  # the latest failure's
    assert malformed.signature != currency.signature
    assert len(malformed.signature) == 12


def test_a_group_samples_at_most_five_partitions_latest_failures_first(connection):
    entries(connection, "orders", MALFORMED, range(1, 9))

    (group,) = signature_groups(connection)

    assert group.count == 8
    assert group.sample_partitions == [f"2024-08-{day:02d}" for day in (8, 7, 6, 5, 4)]
    assert group.samples[0] == ("orders", "2024-08-08")


def test_released_and_resolved_entries_are_not_in_any_group(connection):
    entries(connection, "orders", MALFORMED, range(1, 3))
    entries(connection, "orders", CURRENCY, range(3, 5), status="requeued")
    entries(connection, "orders", CURRENCY, range(5, 7), status="resolved")

    assert [g.count for g in signature_groups(connection)] == [2]
    assert open_signature_count(connection) == 1


def test_groups_narrow_to_one_asset_or_to_a_code_locations_assets(connection):
    entries(connection, "orders", MALFORMED, range(1, 4))
    entries(connection, "returns", MALFORMED, range(1, 3))
    entries(connection, "refunds", CURRENCY, range(1, 2))

    (one,) = signature_groups(connection, asset="returns")
    location = signature_groups(connection, assets=["orders", "refunds"])

    assert (one.count, dict(one.assets)) == (2, {"returns": 2})
    assert [(g.count, dict(g.assets)) for g in location] == [
        (3, {"orders": 3}),
        (1, {"refunds": 1}),
    ]
    assert signature_groups(connection, assets=[]) == []


def test_groups_of_equal_size_put_the_most_recent_failure_first(connection):
    entries(connection, "orders", MALFORMED, range(1, 3))
    entries(connection, "orders", CURRENCY, range(5, 7))

    groups = signature_groups(connection)

    assert [g.sample_message for g in groups] == [
        CURRENCY.format(line=6 * 7),
        MALFORMED.format(line=2 * 7),
    ]


def test_an_empty_dead_letter_has_no_group(connection):
    assert signature_groups(connection) == []
    assert open_signature_count(connection) == 0


def test_the_number_of_open_causes_counts_each_signature_once(connection):
    entries(connection, "orders", MALFORMED, range(1, 4))
    entries(connection, "returns", MALFORMED, range(1, 4))
    entries(connection, "orders", CURRENCY, range(5, 6))

    assert open_signature_count(connection) == 2
    signed = connection.execute(sa.select(sa.func.count(sa.distinct(quarantine.c.signature))))
    assert signed.scalar_one() == 2
