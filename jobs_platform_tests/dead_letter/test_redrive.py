"""The redrive's rules in the store: which open entries are due, by code, input and cool-down."""

from __future__ import annotations

import datetime as dt

import pytest

from jobs_platform.alerts.deliveries import RETRY_CEILING_SECONDS, AlertLedger, event_sink
from jobs_platform.dead_letter.entries import DeadLetter, entries_by_id
from jobs_platform.dead_letter.redrive import (
    EXHAUSTED_EVENT,
    MAX_COOLDOWN_SECONDS,
    RedriveReason,
    Redrives,
    code_changed_entries,
    cooldown_seconds,
    exhausted_entries,
    exhausted_entries_to_alert,
    fingerprinted_entries,
    redrives_by_reason,
)
from jobs_platform.dead_letter.releases import RequeuedBy
from jobs_platform.store.clock import DATABASE_CLOCK
from jobs_platform_tests.clocks import ManualClock
from jobs_platform_tests.store.factories import AT, SECOND, a_quarantine_entry

ASSET = "items"
MINUTES_15 = 900.0


def redriven_before(connection, partition: str, reasons: list[RedriveReason]) -> None:
    """The partition's history: one released entry per earlier redrive, with its reason."""
    for episode, reason in enumerate(reasons, start=1):
        entry_id = a_quarantine_entry(connection, partition=partition, episode=episode)
        DeadLetter(ManualClock(AT)).release_entries(
            connection,
            entries_by_id(connection, [entry_id]),
            by=RequeuedBy.REDRIVE,
            reason=str(reason),
        )


def ids(rows) -> list[int]:
    return [row.id for row in rows]


def test_the_cool_down_grows_four_times_with_each_earlier_cool_down_redrive():
    assert [cooldown_seconds(MINUTES_15, k) for k in range(4)] == [900, 3600, 14_400, 57_600]


def test_the_cool_down_is_capped_at_a_year_however_many_redrives():
    assert cooldown_seconds(MINUTES_15, 9) == MAX_COOLDOWN_SECONDS
    assert cooldown_seconds(MINUTES_15, 10_000) == MAX_COOLDOWN_SECONDS


def test_an_outage_entry_is_due_once_its_first_cool_down_has_passed(connection):
    entry = a_quarantine_entry(connection, error_class="retryable", quarantined_at=AT)

    def due(seconds: float) -> list[int]:
        return ids(
            Redrives(ManualClock(AT + seconds * SECOND)).cooldown_due_entries(
                connection, [ASSET], first_cooldown_seconds=MINUTES_15, max_redrives=3, limit=10
            )
        )

    assert due(899) == []
    assert due(900) == [entry]


@pytest.mark.parametrize("error_class", ["retryable", "crash", "unknown"])
def test_each_outage_class_is_redriven_by_cool_down(connection, error_class):
    entry = a_quarantine_entry(connection, error_class=error_class)

    due = Redrives(ManualClock(AT + SECOND)).cooldown_due_entries(
        connection, [ASSET], first_cooldown_seconds=1, max_redrives=3, limit=10
    )

    assert ids(due) == [entry]


def test_a_terminal_entry_is_never_due_by_cool_down(connection):
    a_quarantine_entry(connection, error_class="terminal")

    due = Redrives(ManualClock(AT + dt.timedelta(days=3650))).cooldown_due_entries(
        connection, [ASSET], first_cooldown_seconds=1, max_redrives=3, limit=10
    )

    assert due == []


def test_the_second_cool_down_is_four_times_the_first_counted_across_episodes(connection):
    redriven_before(connection, "2024-01-03", [RedriveReason.COOLDOWN])
    entry = a_quarantine_entry(connection, partition="2024-01-03", episode=2, quarantined_at=AT)

    def due(seconds: float) -> list[int]:
        return ids(
            Redrives(ManualClock(AT + seconds * SECOND)).cooldown_due_entries(
                connection, [ASSET], first_cooldown_seconds=MINUTES_15, max_redrives=3, limit=10
            )
        )

    assert due(3599) == []
    assert due(3600) == [entry]


def test_redrives_for_other_reasons_do_not_grow_the_cool_down(connection):
    redriven_before(connection, "2024-01-03", [RedriveReason.INPUT_CHANGED])
    entry = a_quarantine_entry(connection, partition="2024-01-03", episode=2, quarantined_at=AT)

    due = Redrives(ManualClock(AT + 900 * SECOND)).cooldown_due_entries(
        connection, [ASSET], first_cooldown_seconds=MINUTES_15, max_redrives=3, limit=10
    )

    assert ids(due) == [entry]


def test_a_partition_redriven_max_times_is_due_for_no_reason(connection):
    reasons = [RedriveReason.COOLDOWN, RedriveReason.CODE_CHANGED, RedriveReason.INPUT_CHANGED]
    redriven_before(connection, "2024-01-03", reasons)
    a_quarantine_entry(
        connection, partition="2024-01-03", episode=4, code_version="1", fingerprint="old"
    )
    late = AT + dt.timedelta(days=3650)

    due = Redrives(ManualClock(late)).cooldown_due_entries(
        connection, [ASSET], first_cooldown_seconds=1, max_redrives=3, limit=10
    )
    assert due == []
    assert code_changed_entries(connection, ASSET, "2", max_redrives=3, limit=10) == []
    assert fingerprinted_entries(connection, [ASSET], after_id=0, max_redrives=3, limit=10) == []


def test_code_changed_finds_entries_of_another_version_only(connection):
    older = a_quarantine_entry(connection, partition="2024-01-01", code_version="1")
    a_quarantine_entry(connection, partition="2024-01-02", code_version="2")

    assert ids(code_changed_entries(connection, ASSET, "2", max_redrives=3, limit=10)) == [older]


def test_an_entry_with_no_recorded_code_version_is_not_judged_by_code(connection):
    a_quarantine_entry(connection, code_version=None)

    assert code_changed_entries(connection, ASSET, "2", max_redrives=3, limit=10) == []


def test_a_backfill_without_code_version_never_finds_code_changed(connection):
    a_quarantine_entry(connection, code_version="1")

    assert code_changed_entries(connection, ASSET, "", max_redrives=3, limit=10) == []


def test_only_open_entries_of_the_given_assets_are_candidates(connection):
    a_quarantine_entry(connection, partition="2024-01-01", code_version="1", status="requeued")
    a_quarantine_entry(connection, asset="others", code_version="1")

    assert code_changed_entries(connection, ASSET, "2", max_redrives=3, limit=10) == []


def test_the_fingerprint_walk_pages_by_id_past_entries_without_a_fingerprint(connection):
    first = a_quarantine_entry(connection, partition="2024-01-01", fingerprint="a")
    a_quarantine_entry(connection, partition="2024-01-02", fingerprint=None)
    third = a_quarantine_entry(connection, partition="2024-01-03", fingerprint="c")

    page = fingerprinted_entries(connection, [ASSET], after_id=0, max_redrives=3, limit=1)
    rest = fingerprinted_entries(connection, [ASSET], after_id=first, max_redrives=3, limit=10)

    assert (ids(page), ids(rest)) == ([first], [third])


def test_an_exhausted_entry_is_to_alert_until_every_sink_has_settled_its_alert(connection):
    redriven_before(connection, "2024-01-03", [RedriveReason.COOLDOWN] * 2)
    entry = a_quarantine_entry(connection, partition="2024-01-03", episode=3)

    def to_alert() -> list[int]:
        return ids(
            exhausted_entries_to_alert(
                connection, [ASSET], max_redrives=2, sinks=["log", "webhook"], limit=10
            )
        )

    before = to_alert()
    for sink in ("log", "webhook"):
        AlertLedger(DATABASE_CLOCK).claim_delivery(
            connection, entry, event_sink(sink, EXHAUSTED_EVENT), max_tries=5
        )
        AlertLedger(DATABASE_CLOCK).mark_sent(connection, entry, event_sink(sink, EXHAUSTED_EVENT))
        if sink == "log":
            halfway = to_alert()

    assert (before, halfway, to_alert()) == ([entry], [entry], [])


def test_an_exhausted_entry_whose_failed_alert_waits_for_its_next_try_is_left_out(connection):
    redriven_before(connection, "2024-01-03", [RedriveReason.COOLDOWN] * 2)
    entry = a_quarantine_entry(connection, partition="2024-01-03", episode=3)
    clock = ManualClock()
    ledger, key = AlertLedger(clock), event_sink("slack", EXHAUSTED_EVENT)
    ledger.claim_delivery(connection, entry, key, max_tries=5)
    ledger.record_failed_send(connection, entry, key, "slack down", max_tries=5)

    def to_alert() -> list[int]:
        return ids(
            exhausted_entries_to_alert(
                connection, [ASSET], max_redrives=2, sinks=["slack"], limit=10, now=clock.now()
            )
        )

    waiting = to_alert()
    clock.advance(RETRY_CEILING_SECONDS)

    assert (waiting, to_alert()) == ([], [entry])


def test_an_entry_never_redriven_is_not_exhausted_even_when_redrives_are_off(connection):
    a_quarantine_entry(connection)

    assert exhausted_entries_to_alert(
        connection, [ASSET], max_redrives=0, sinks=["log"], limit=10
    ) == []  # fmt: skip
    assert exhausted_entries(connection, 0) == {}


def test_the_redrive_counts_are_by_asset_and_reason_and_exhausted_entries_per_asset(connection):
    redriven_before(connection, "2024-01-03", [RedriveReason.COOLDOWN, RedriveReason.COOLDOWN])
    redriven_before(connection, "2024-01-04", [RedriveReason.INPUT_CHANGED])
    a_quarantine_entry(connection, partition="2024-01-03", episode=3)
    a_quarantine_entry(connection, partition="2024-01-04", episode=2)

    assert redrives_by_reason(connection) == {(ASSET, "cooldown"): 2, (ASSET, "input_changed"): 1}
    assert exhausted_entries(connection, 2) == {ASSET: 1}
